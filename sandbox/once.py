"""One fresh sandboxed interpreter per call: the simple path and the benchmark baseline."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .isolation import Interpreter, WorkerSettings, resolve_mode
from .types import ExecResult, SandboxLimits
from .worker import WorkerError, WorkerHandle, failure_result


def run_once(
    code: str,
    limits: SandboxLimits | None = None,
    *,
    python: str | None = None,
    site_packages: Sequence[str] = (),
    isolation: str = "auto",
) -> ExecResult:
    """Start a sandboxed interpreter, run ``code`` in it, tear it down. Never raises on the code.

    Exactly the isolation of a pool worker (same launcher, same per-call child), without the warm
    start: no modules are preloaded.
    """
    limits = limits or SandboxLimits()
    interp = Interpreter.from_executable(python) if python else Interpreter.default()
    settings = WorkerSettings(
        interpreter=interp,
        site_packages=tuple(site_packages),
        preload=(),
        limits=limits,
        max_sessions=1,
        isolation=isolation,
    )
    started = time.monotonic()
    handle = WorkerHandle(settings, resolve_mode(settings))
    try:
        handle.start()
        return handle.run(code, limits)
    except WorkerError as e:
        return failure_result(str(e), started, limits)
    finally:
        handle.kill()
