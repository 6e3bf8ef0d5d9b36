"""Facts about the machine this process runs on (dependency-free)."""

from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process may run on (affinity, e.g. ``taskset`` or a container's cpuset)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)
