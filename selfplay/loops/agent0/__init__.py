"""Agent0: curriculum agent vs tool-using executor (``loop.py``: the algorithm; ``settings.py``:
its config section; ``kinds.py``: the task kinds; ``records.py``: metrics and records)."""

from selfplay.loops.agent0.loop import CURRICULUM, EXECUTOR, Agent0Loop
from selfplay.loops.agent0.settings import Agent0Settings

__all__ = ["CURRICULUM", "EXECUTOR", "Agent0Loop", "Agent0Settings"]
