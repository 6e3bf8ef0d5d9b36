"""Value types of the sandbox: the limits of one call and the result of one call."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from signal import SIGXCPU

MiB = 1 << 20


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to every call.

    Most limits are per call and may be overridden per call (``pool.run(code, limits=...)``).
    ``tmp_bytes`` sizes the worker's private tmpfs and is fixed when a worker starts; for
    sessions, the memory/process/file limits are fixed when the session starts (per call only
    ``wall_s``, ``cpu_s`` and ``max_output_bytes`` change).
    """

    wall_s: float = 10.0
    """Wall-clock time of one call; the code is killed (SIGKILL) when it runs past it."""
    cpu_s: float = 10.0
    """CPU time (RLIMIT_CPU): SIGXCPU at the soft limit, SIGKILL one second later."""
    memory_bytes: int = 1024 * MiB
    """Address space of each process (RLIMIT_AS)."""
    file_size_bytes: int = 16 * MiB
    """Largest file the code may write (RLIMIT_FSIZE)."""
    tmp_bytes: int = 64 * MiB
    """Size of the worker's private tmpfs (all calls' files together); bwrap mode only."""
    max_processes: int = 8
    """Processes + threads the code may have at once (RLIMIT_NPROC on a dedicated uid)."""
    max_open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    max_output_bytes: int = 64 * 1024
    """Bytes kept per stream (stdout, stderr); past it the code is stopped and flagged."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"SandboxLimits.{f.name} must be a positive number, got {value!r}")
        if self.max_open_files < 16:
            # The interpreter itself needs a handful of descriptors to start printing.
            raise ValueError("SandboxLimits.max_open_files must be at least 16")

    def to_wire(self) -> dict[str, float | int]:
        """The JSON form sent to the in-sandbox worker."""
        return asdict(self)


@dataclass(frozen=True)
class ExecResult:
    """What one call produced. Host paths in ``stdout``/``stderr`` are replaced by placeholders."""

    stdout: str
    stderr: str
    exit_status: int
    """Exit code of the program; negative signal number when it was killed by a signal."""
    timed_out: bool = False
    truncated: bool = False
    """stdout or stderr went past ``max_output_bytes``: it was cut and the program stopped."""
    duration_s: float = 0.0
    note: str = ""
    """Remarks from the sandbox itself (worker replaced, session state lost, ...)."""

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out and not self.truncated

    @property
    def out_of_time(self) -> bool:
        """Stopped by a time limit: the wall clock (``timed_out``) or the CPU time (SIGXCPU).

        A busy loop meets both at about the same moment when ``cpu_s == wall_s``, and which one
        the kernel or the worker enforces first is a race, so a caller that says why a program
        stopped should read this rather than ``timed_out`` alone.
        """
        return self.timed_out or self.exit_status == -SIGXCPU

    @property
    def output(self) -> str:
        """stdout followed by stderr: what a tool-calling model is shown."""
        if self.stdout and self.stderr and not self.stdout.endswith("\n"):
            return f"{self.stdout}\n{self.stderr}"
        return self.stdout + self.stderr
