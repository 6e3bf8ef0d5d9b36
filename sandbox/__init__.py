"""Runs untrusted Python from model outputs.

Isolation is bubblewrap (read-only system, private tmpfs, no network, own PID namespace, seccomp)
plus per-call rlimits and a dedicated unprivileged uid; see ``docs/sandbox.md``.

    from sandbox import SandboxPool
    with SandboxPool(size=2) as pool:
        print(pool.run("print(6 * 7)").stdout)
"""

from .isolation import DEFAULT_PRELOAD, FALLBACK_ENV, isolation_available
from .once import run_once
from .pool import SandboxPool, Session
from .types import ExecResult, SandboxLimits

__all__ = [
    "DEFAULT_PRELOAD",
    "FALLBACK_ENV",
    "ExecResult",
    "SandboxLimits",
    "SandboxPool",
    "Session",
    "isolation_available",
    "run_once",
]
