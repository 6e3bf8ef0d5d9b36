"""Stopping a run cleanly on SIGINT (Ctrl-C) or SIGTERM: the stage in progress finishes, then the
run stops, resumable from its last checkpoint, and says so in one line (docs/architecture.md#
stopping-a-run).

Files are never left half-written by a stage that was cut short: the runner asks ``after`` at
the end of every stage of a step, so a signal that arrives during collect, learn, sync or a
checkpoint takes effect only once that stage is done. A second signal stops at once (Python's
usual ``KeyboardInterrupt``; checkpoints and episode files are written atomically, so that too
leaves the last checkpoint whole).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(Exception):
    """A signal asked the run to stop; raised at the end of ``stage`` of step ``step``."""

    def __init__(self, signum: int, stage: str, step: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} after {stage} of step {step}")
        self.signum, self.stage, self.step = signum, stage, step


class StopSignals:
    """SIGINT and SIGTERM recorded while ``installed``; ``after(stage, step)`` raises
    ``StopRequested`` at the end of a stage once one has arrived."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.last: tuple[str, int] | None = None  # the last stage that ended, and its step

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        """The handlers, for the duration of a run (only the main thread may set them; a run
        on another thread keeps Python's defaults)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        for signum in SIGNALS:
            signal.signal(signum, self._record)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _record(self, signum: int, frame) -> None:
        if self.signum is not None:  # the second one: stop now
            raise KeyboardInterrupt
        self.signum = signum

    def after(self, stage: str, step: int) -> None:
        """The end of ``stage`` of step ``step``: stop here if a signal asked to."""
        self.last = (stage, step)
        if self.signum is not None:
            raise StopRequested(self.signum, stage, step)

    def where(self, step: int) -> str:
        """Where a run that failed in step ``step`` was: after which stage of it."""
        if self.last is None or self.last[1] != step:
            return f"in step {step}, before its collect stage ended"
        return f"in step {step}, after its {self.last[0]} stage"
