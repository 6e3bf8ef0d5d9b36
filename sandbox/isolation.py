"""How a worker process is launched: bubblewrap when it works here, a reduced fallback otherwise.

Modes (chosen once per settings, see ``resolve_mode``):

* **bwrap as root** (containers, GPU boxes): no user namespace, so the worker is uid 0 *without*
  capabilities except SETUID/SETGID/KILL/CHOWN/DAC_OVERRIDE/FOWNER; every call's child drops to a
  dedicated unprivileged uid (RLIMIT_NPROC is ignored for uid 0, enforced for others), which
  also means it cannot signal, ptrace or read the worker. Leftover processes are found by uid.
* **bwrap as a normal user**: a user namespace (``--unshare-user --disable-userns``); the code
  runs as the caller's uid, so RLIMIT_NPROC is set to "what the sandbox already runs + limit" and
  leftovers are every process of the sandbox's PID namespace except the worker and sessions.
* **fallback** (no bwrap, or no namespaces): same worker, no mount/network/PID isolation; rlimits,
  timeouts, a clean environment, a private temp dir and seccomp remain; as root the code still
  drops to a dedicated uid. A warning is emitted once per process.

Everything the sandbox can see is read-only except a size-limited private tmpfs at /tmp: /usr,
the /bin,/lib* links, two files of /etc, the interpreter's prefix (the *base* interpreter, not the
venv) and any site-packages directories the caller lists explicitly.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .seccomp import build_filter
from .types import SandboxLimits

log = logging.getLogger(__name__)

FALLBACK_ENV = "SELFPLAY_SANDBOX_FALLBACK"
"""Set to 1 to force the reduced (no bwrap) mode, e.g. to test it."""

SANDBOX_TMP = "/tmp"
# Capabilities the root-mode worker keeps; each call's child loses all of them on setuid.
ROOT_WORKER_CAPS = ("SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER")
UID_RANGE = (1_000_000, 2_000_000_000)
UID_SLOTS = 256  # per worker: uid_base (stateless calls) + one uid per live session
# Modules imported once per worker, so forked calls get them for free. In fallback-as-root mode
# these are also the only ones usable when the interpreter's files are not world-readable.
DEFAULT_PRELOAD = (
    "array",
    "bisect",
    "cmath",
    "collections",
    "contextlib",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "itertools",
    "json",
    "math",
    "numbers",
    "operator",
    "pprint",
    "random",
    "re",
    "statistics",
    "string",
    "textwrap",
    "threading",
    "time",
    "typing",
)
_CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    # One string-hash seed for every worker (and what a call starts): a program whose output
    # follows a set's or dict's order of strings gives the same answer in any worker. Python
    # reads it at start-up, hence no -E/-I on the worker's command line (plan_launch).
    "PYTHONHASHSEED": "0",
    # Numeric libraries must not spawn a thread per core: threads count against max_processes.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    # glibc reserves a 64 MiB malloc arena per thread: without a cap, 3 threads would eat a
    # quarter of a 1 GiB address-space limit.
    "MALLOC_ARENA_MAX": "2",
}
_WORKER_PATH = Path(__file__).with_name("_worker.py")
_WORKER_SOURCE = _WORKER_PATH.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Interpreter:
    """The Python that runs inside the sandbox and the directories it needs (bound read-only)."""

    executable: str
    prefixes: tuple[str, ...]

    @classmethod
    def default(cls) -> Interpreter:
        """The base interpreter of the running Python (not the venv: the venv is host state)."""
        base = Path(sys.base_prefix)
        major, minor = sys.version_info[:2]
        for name in (f"python{major}.{minor}", f"python{major}", "python"):
            exe = base / "bin" / name
            if exe.exists():
                return cls.from_executable(str(exe))
        return cls.from_executable(sys.executable)

    @classmethod
    def from_executable(cls, executable: str) -> Interpreter:
        exe = os.path.realpath(executable)
        prefix = str(Path(exe).parent.parent)  # <prefix>/bin/python3.X
        prefixes = {prefix}
        if prefix == os.path.realpath(sys.base_prefix):
            prefixes.add(os.path.realpath(sys.base_exec_prefix))
        return cls(exe, tuple(sorted(prefixes)))


@dataclass(frozen=True)
class WorkerSettings:
    """Everything that decides how a worker is launched (shared by a pool's workers)."""

    interpreter: Interpreter = field(default_factory=Interpreter.default)
    site_packages: tuple[str, ...] = ()
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    max_sessions: int = 16
    isolation: str = "auto"  # "auto" | "bwrap" | "fallback"

    def __post_init__(self) -> None:
        if not 1 <= self.max_sessions <= UID_SLOTS - 2:
            raise ValueError(f"max_sessions must be between 1 and {UID_SLOTS - 2}")


@dataclass(frozen=True)
class Mode:
    isolated: bool  # bwrap in use
    root: bool  # the host side runs as uid 0: calls drop to dedicated uids

    @property
    def sweep(self) -> str:
        if self.root:
            return "uid"
        return "ns" if self.isolated else "sid"


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    pass_fds: tuple[int, ...]
    host_tmp: str | None  # fallback: the host directory that plays /tmp (removed on stop)
    uid_base: int | None  # root modes: the calls run as uid_base .. uid_base + UID_SLOTS - 1
    tmp_root: str  # the temp root as the worker sees it
    scrub_paths: tuple[tuple[str, str], ...]

    def close_fds(self) -> None:
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)


# ------------------------------------------------------------------------------- detection

_warned_lock = threading.Lock()
_warned = False


def warn_reduced_isolation(reason: str) -> None:
    """Warn (once per process) that the sandbox runs without bubblewrap."""
    global _warned
    with _warned_lock:
        if _warned:
            return
        _warned = True
    message = (
        f"sandbox: bubblewrap isolation unavailable ({reason}); running with reduced isolation "
        "(rlimits, timeouts, clean env, private temp dir, seccomp; no file-system, network or PID "
        "isolation). Install it with: apt-get install -y bubblewrap"
    )
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _reset_warning_for_tests() -> None:
    global _warned
    with _warned_lock:
        _warned = False


def fallback_forced() -> bool:
    return os.environ.get(FALLBACK_ENV, "").strip().lower() not in ("", "0", "false", "no")


@functools.lru_cache(maxsize=1)
def _bwrap_help() -> str:
    exe = shutil.which("bwrap")
    if exe is None:
        return ""
    try:
        proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout + proc.stderr


@functools.lru_cache(maxsize=8)
def _probe_bwrap(interpreter: Interpreter, site_packages: tuple[str, ...]) -> str | None:
    """Run ``python -c pass`` under the real bwrap command line; None if it works, else why."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    settings = WorkerSettings(interpreter=interpreter, site_packages=site_packages, preload=())
    mode = Mode(isolated=True, root=os.geteuid() == 0)
    plan = plan_launch(settings, mode, program=["-c", "import sys; sys.exit(0)"])
    try:
        proc = subprocess.run(
            plan.argv, env=plan.env, pass_fds=plan.pass_fds, capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"bwrap failed to run: {e}"
    finally:
        plan.close_fds()
    if proc.returncode != 0:
        return f"bwrap exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}"
    return None


def isolation_available(python: str | None = None) -> bool:
    """True when bubblewrap isolation works on this machine (and is not disabled by env)."""
    if fallback_forced():
        return False
    interp = Interpreter.from_executable(python) if python else Interpreter.default()
    return _probe_bwrap(interp, ()) is None


def resolve_mode(settings: WorkerSettings) -> Mode:
    root = os.geteuid() == 0
    if settings.isolation not in ("auto", "bwrap", "fallback"):
        raise ValueError(f"isolation must be auto, bwrap or fallback, not {settings.isolation!r}")
    if settings.isolation == "fallback" or (settings.isolation == "auto" and fallback_forced()):
        warn_reduced_isolation("fallback requested")
        return Mode(isolated=False, root=root)
    problem = _probe_bwrap(settings.interpreter, settings.site_packages)
    if problem is None:
        return Mode(isolated=True, root=root)
    if settings.isolation == "bwrap":
        raise RuntimeError(f"sandbox: bubblewrap isolation requested but unusable: {problem}")
    warn_reduced_isolation(problem)
    return Mode(isolated=False, root=root)


# -------------------------------------------------------------------------------- planning


def _seccomp_fd() -> tuple[int, bytes] | None:
    program = build_filter()
    if program is None:
        return None
    fd = os.memfd_create("sandbox-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd, program


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _bind_args(paths: list[str]) -> list[str]:
    """Read-only binds of /usr, the /bin and /lib* entries, /etc bits and ``paths``."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    # ld.so.cache: finds shared libraries of extension modules; localtime: time.localtime().
    for f in ("/etc/ld.so.cache", "/etc/localtime"):
        args += ["--ro-bind-try", f, f]
    bound = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
    made: set[str] = set()
    for path in sorted(set(paths), key=len):
        if _under(path, bound) or not os.path.isdir(path):
            continue
        # bwrap copies the modes of missing parents from the host (/root is 0700): create them
        # world-traversable so that the unprivileged uid can reach the interpreter.
        parents = list(reversed(Path(path).parents))[1:]
        for parent in map(str, parents):
            if parent not in made:
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += ["--ro-bind", path, path]
        bound.append(path)
    return args


def _bwrap_argv(settings: WorkerSettings, mode: Mode, seccomp_fd: int | None) -> list[str]:
    args = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session", "--clearenv"]
    if mode.root:
        # No user namespace: root's user namespace would map only uid 0, and the calls need
        # real unprivileged uids (RLIMIT_NPROC is not enforced for uid 0).
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        args += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        for cap in ROOT_WORKER_CAPS:
            args += ["--cap-add", f"CAP_{cap}"]
    else:
        args += ["--unshare-all", "--unshare-user"]
        if "--disable-userns" in _bwrap_help():
            args.append("--disable-userns")
    args += ["--hostname", "sandbox"]
    for key, value in {**_CHILD_ENV, "HOME": SANDBOX_TMP, "TMPDIR": SANDBOX_TMP}.items():
        args += ["--setenv", key, value]
    interp = settings.interpreter
    args += _bind_args([*interp.prefixes, *settings.site_packages])
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(int(settings.limits.tmp_bytes))]
    args += ["--tmpfs", SANDBOX_TMP, "--remount-ro", "/", "--chdir", SANDBOX_TMP]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args


def worker_config(settings: WorkerSettings, mode: Mode, tmp_root: str, seccomp: bytes | None):
    """The JSON configuration handed to ``_worker.py`` (nothing secret: the code can read it)."""
    cfg: dict[str, object] = {
        "tmp_root": tmp_root,
        "sweep": mode.sweep,
        "env": {**_CHILD_ENV, "HOME": tmp_root, "TMPDIR": tmp_root},
        "sys_path": list(settings.site_packages),
        "preload": list(settings.preload),
        "max_sessions": settings.max_sessions,
    }
    if mode.root:
        cfg["uid_base"] = random.randrange(*UID_RANGE) // UID_SLOTS * UID_SLOTS
    if seccomp is not None and not mode.isolated:
        cfg["seccomp"] = seccomp.hex()  # no bwrap to install it: the worker does
    return cfg


def _scrub_paths(settings: WorkerSettings, tmp_root: str, host_tmp: str | None):
    pairs = [(tmp_root.rstrip("/") + "/sbx-run", "<tmp>")]
    if host_tmp:
        pairs.append((host_tmp, "<tmp>"))
    pairs += [(p, "<python>") for p in settings.interpreter.prefixes]
    pairs += [(p, "<site>") for p in settings.site_packages]
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        pairs.append((os.path.realpath(p), "<python>"))
        pairs.append((p, "<python>"))
    pairs.append((os.getcwd(), "<host>"))
    pairs.append((str(Path.home()), "<home>"))
    # Longest first, so that a prefix under the home folder is named <python>, not <home>/...
    unique = {p: name for p, name in pairs if p and p != "/"}
    return tuple(sorted(unique.items(), key=lambda kv: -len(kv[0])))


def plan_launch(settings: WorkerSettings, mode: Mode, program: list[str] | None = None):
    """The command line, environment and fds that start one worker."""
    sec = _seccomp_fd() if mode.isolated else None
    seccomp = build_filter()
    host_tmp = None
    if mode.isolated:
        tmp_root = SANDBOX_TMP
        prefix = _bwrap_argv(settings, mode, sec[0] if sec else None)
        env = {"PATH": "/usr/bin:/bin"}
        cwd = None
    else:
        host_tmp = tempfile.mkdtemp(prefix="selfplay-sandbox-")
        os.chmod(host_tmp, 0o711)  # a dropped uid must reach its own sub-directory
        tmp_root = host_tmp
        prefix = []
        env = {**_CHILD_ENV, "HOME": host_tmp, "TMPDIR": host_tmp}
        cwd = host_tmp
    cfg = worker_config(settings, mode, tmp_root, seccomp)
    if program is None:
        import json

        program = ["-c", _WORKER_SOURCE, json.dumps(cfg)]
    # -s -S -B and the worker dropping '' from sys.path stand for -I, which would also ignore
    # PYTHONHASHSEED (-E); the environment is ours alone (bwrap --clearenv / `env` below)
    argv = [*prefix, settings.interpreter.executable, "-s", "-S", "-B", *program]
    return LaunchPlan(
        argv=argv,
        env=env,
        cwd=cwd,
        pass_fds=(sec[0],) if sec else (),
        host_tmp=host_tmp,
        uid_base=cfg.get("uid_base"),  # type: ignore[arg-type]
        tmp_root=tmp_root,
        scrub_paths=_scrub_paths(settings, tmp_root, host_tmp),
    )


# the worker file's own helper (run_path defines it without running the worker's main), so the
# host's sweep and the worker's are one piece of code
_KILL_UIDS = """
import os, runpy, sys
worker = runpy.run_path(sys.argv[1], run_name="kill_uids")
for uid in range(int(sys.argv[2]), int(sys.argv[3])):
    os.waitpid(worker["signal_every_process_of"](uid, 9), 0)
"""


def kill_uids(uid_base: int, count: int = UID_SLOTS) -> None:
    """SIGKILL every host process of a fallback worker's uids (as root; after the worker died).

    Under bwrap the PID namespace dies with the worker; in fallback mode, descendants of a call
    that outlive a killed worker would otherwise be orphaned on the host.
    """
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", _KILL_UIDS, str(_WORKER_PATH), str(uid_base),
             str(uid_base + count)],
            timeout=30,
            check=False,
        )
