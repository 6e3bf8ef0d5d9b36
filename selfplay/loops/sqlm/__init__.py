"""Self-Questioning Language Models: one model proposes and solves (docs/sqlm.md)."""

from selfplay.loops.sqlm.loop import SqlmLoop

__all__ = ["SqlmLoop"]
