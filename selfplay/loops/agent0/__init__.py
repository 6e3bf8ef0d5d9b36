"""Agent0: curriculum agent vs tool-using executor (``loop.py``: the algorithm; ``kinds.py``:
the task kinds; ``records.py``: metrics and records)."""

from selfplay.loops.agent0.loop import CURRICULUM, EXECUTOR, Agent0Loop, Agent0Settings

__all__ = ["CURRICULUM", "EXECUTOR", "Agent0Loop", "Agent0Settings"]
