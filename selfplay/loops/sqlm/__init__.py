"""Self-Questioning Language Models (SQLM): one model proposes problems from a fixed topic
prompt and solves them, rewarded by majority agreement (docs/sqlm.md)."""

from selfplay.loops.sqlm.loop import SqlmLoop

__all__ = ["SqlmLoop"]
