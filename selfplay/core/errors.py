"""User-facing errors: the CLI prints them as one line and exits with code 2 (a stopped run:
128 + the signal's number)."""

from __future__ import annotations

import errno

# what the kernel says when a write finds no room: the disk, or the user's quota
_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = ("No space left on device", "Disk quota exceeded")


class UserError(Exception):
    """Bad input from the user (config, model spec, game id, file): one clear line, no traceback."""


class RunStopped(UserError):
    """A run stopped by its machine, not by its inputs (a full disk, a dead learner rank): one
    line that says how to resume, no traceback."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT (Ctrl-C) or SIGTERM at the end of a stage, resumable from its last
    checkpoint. The CLI prints the message as one line and exits with 128 + ``signum``."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a write that found the disk full. Libraries wrap the
    ``OSError``: ``torch.distributed.checkpoint`` keeps each rank's in ``failures``, Ray and
    safetensors keep only its text, so the causes, those failures and the text are all read."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL:
            return True
        if any(text in str(current) for text in _FULL_TEXT):
            return True
        failures = getattr(current, "failures", None)  # dcp's CheckpointException
        if isinstance(failures, dict):
            pending += [f[0] if isinstance(f, tuple) else f for f in failures.values()
                        if isinstance(f, BaseException | tuple)]
        pending += [current.__cause__, current.__context__]
    return False
