"""The in-sandbox worker: receives code over a pipe, runs each call in a forked, limited child.

This file is sent verbatim to ``python -I -S -B -c`` inside the sandbox (the project tree is not
mounted there), so it must use the standard library only and never import the ``sandbox``
package. It is trusted code; everything it runs on behalf of the caller happens in a child:

* stateless call: fork -> child drops to a dedicated uid, applies rlimits, redirects its output
  into pipes, ``exec``s the code and exits; the worker collects the output, kills the child at the
  deadline, then kills *every* leftover process of the call (daemons included) and wipes the
  temp dir. The next call starts from the worker's pristine state.
* session call: a persistent child (one per session id, its own uid and directory) keeps a
  namespace between calls; it receives each call's code and output pipes over a unix socket and
  is SIGSTOPped between calls so nothing runs in the background.

Protocol on fds 0/1 (the worker keeps private duplicates): 4-byte big-endian length + JSON.
"""

from __future__ import annotations

import _signal
import builtins
import contextlib
import io
import json
import os
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import time
import traceback

HEADER = struct.Struct(">I")
MAX_FRAME = 256 << 20
DRAIN_S = 0.1  # how long to wait for pipe EOF once the code's processes are dead
RUN_DIR = "sbx-run"
SESSION_DIR = "sbx-s"
UID_SLOTS = 256  # uids uid_base .. uid_base + UID_SLOTS - 1 belong to this worker
RESET_SIGNALS = tuple(
    int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1)
)
SIG_DFL = int(signal.SIG_DFL)

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
WALL = 0x40000000  # waitpid's __WALL: children of any exit signal count (Linux)

_libc = None


def libc():
    """ctypes' libc, or None when ctypes is missing (every use of it is best effort)."""
    global _libc
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        except Exception:
            _libc = False
    return _libc or None


def prctl(option: int, arg: int = 0) -> bool:
    lib = libc()
    return bool(lib) and lib.prctl(option, arg, 0, 0, 0) == 0


def install_seccomp(program: bytes) -> bool:
    """Install a seccomp-BPF program (fallback mode; under bwrap, bwrap installs it)."""
    lib = libc()
    if not lib or not program:
        return False
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    return lib.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0


# ---------------------------------------------------------------------------------- framing


def read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        try:
            b = os.read(fd, n)
        except InterruptedError:
            continue
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_frame(fd: int) -> dict | None:
    head = read_exact(fd, HEADER.size)
    if head is None:
        return None
    (n,) = HEADER.unpack(head)
    if n > MAX_FRAME:
        return None
    body = read_exact(fd, n)
    return None if body is None else json.loads(body)


def encode_frame(obj: dict) -> bytes:
    data = json.dumps(obj).encode()
    return HEADER.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# ------------------------------------------------------------------------------- processes


def list_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def proc_status(pid: int) -> dict[str, str] | None:
    """State, Uid and Threads of a process from /proc/PID/status (None if gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("State", "Uid", "Threads"):
            out[key] = value.split()[0] if value.split() else ""
    return out


def proc_session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


def pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


# ---------------------------------------------------------------------------------- output


def signal_every_process_of(uid: int, sig: int) -> int:
    """Send ``sig`` to every process of ``uid`` at once: kill(-1) from a forked helper that
    becomes that uid; returns the helper's pid (the caller reaps it).

    kill(-1) walks the process list in one pass under the kernel's tasklist lock, so a fork
    bomb cannot outrun it (a scan of /proc followed by kill() per pid can be outrun). The host
    side's ``isolation.kill_uids`` runs this same function (from this file) after a fallback
    worker died.
    """
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, sig)
        finally:
            os._exit(0)
    return pid


class Collector:
    """Reads a call's stdout/stderr pipes, keeping at most ``cap`` bytes of each."""

    def __init__(self, out_fd: int, err_fd: int, cap: int) -> None:
        self.bufs = {out_fd: bytearray(), err_fd: bytearray()}
        self.order = (out_fd, err_fd)
        self.open = {out_fd, err_fd}
        self.cap = cap
        self.overflow = False

    def read(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.open.discard(fd)
            os.close(fd)
            return
        buf = self.bufs[fd]
        room = self.cap - len(buf)
        if len(data) > room:
            self.overflow = True
        buf += data[: max(room, 0)]

    def drain(self, timeout: float) -> None:
        """Read what is left until every writer is gone (or ``timeout``), then close."""
        end = time.monotonic() + timeout
        while self.open:
            left = end - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(self.open), [], [], left)
            for fd in ready:
                self.read(fd)
        for fd in self.open:
            os.close(fd)
        self.open.clear()

    def text(self, which: int) -> str:
        return bytes(self.bufs[self.order[which]]).decode("utf-8", "replace")


# ------------------------------------------------------------------------ the code's child


def exec_code(code: str, namespace: dict) -> int:
    """Run ``code`` like ``python -c`` would; return the exit status."""
    try:
        exec(compile(code, "<sandbox>", "exec"), namespace)
        return 0
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code & 0xFF
        print(e.code, file=sys.stderr)
        return 1
    except BaseException as e:
        with contextlib.suppress(BaseException):
            # Skip this frame: the traceback should start at the user's code.
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        return 1


def flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def std_streams() -> None:
    """Fresh unbuffered-ish text streams on fds 0-2 (partial output survives a kill)."""

    def wrap(fd: int, mode: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        return io.TextIOWrapper(
            raw,
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
            write_through=True,
        )

    sys.stdin = sys.__stdin__ = wrap(0, "r")
    sys.stdout = sys.__stdout__ = wrap(1, "w")
    sys.stderr = sys.__stderr__ = wrap(2, "w")


def set_limit(which: int, soft: float, hard: float | None = None) -> None:
    soft = int(soft)
    hard = soft if hard is None else int(hard)
    try:  # noqa: SIM105 - not contextlib.suppress: an object less per limit, per forked child
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        pass


def become(uid: int | None, workdir: str, keep_fds: tuple[int, ...]) -> None:
    """In a fresh child: own session, private fds, unprivileged uid, cwd, clean signals."""
    os.setsid()
    keep = sorted(set(keep_fds) | {0, 1, 2})
    prev = -1
    for fd in keep:  # close everything else inherited from the worker (its protocol pipes!)
        if prev + 1 < fd:  # never an empty range: closerange(0, 0) closes *every* fd
            os.closerange(prev + 1, fd)
        prev = fd
    os.closerange(prev + 1, 1 << 20)
    if uid is not None:
        # Leaving uid 0 also clears every capability the worker was given.
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    # The worker is non-dumpable (protects it from same-uid snooping); the child may be dumpable
    # so that it can read its own /proc/self/*.
    prctl(PR_SET_DUMPABLE, 1)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.chdir(workdir)
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    # _signal.signal with plain ints: the same sigaction as signal.signal, without its enum
    # conversions (which cost a forked child ~0.1 ms of copy-on-write faults).
    for sig in RESET_SIGNALS:
        _signal.signal(sig, SIG_DFL)
    sys.argv = ["-c"]


def apply_limits(limits: dict, nproc: int, cpu: bool = True) -> None:
    set_limit(resource.RLIMIT_CORE, 0)
    set_limit(resource.RLIMIT_FSIZE, limits["file_size_bytes"])
    set_limit(resource.RLIMIT_NOFILE, limits["max_open_files"])
    set_limit(resource.RLIMIT_NPROC, nproc)
    if cpu:
        cpu_s = max(1, int(limits["cpu_s"] + 0.999))
        set_limit(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)
    # Last: the address-space limit may make any later allocation in this setup fail.
    set_limit(resource.RLIMIT_AS, limits["memory_bytes"])


def stateless_child(code: str, limits: dict, uid, workdir: str, out_w: int, err_w: int, nproc):
    status = 127
    try:
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        become(uid, workdir, ())
        apply_limits(limits, nproc)
        std_streams()
        status = exec_code(code, {"__name__": "__main__", "__builtins__": builtins})
        flush_std()
    except BaseException as e:
        os.write(2, f"sandbox: could not start the code: {e!r}\n".encode())
    finally:
        os._exit(status)


def session_child(sock_fd: int, limits: dict, uid, workdir: str, nproc: int) -> None:
    """A session's persistent process: one namespace, one call at a time, told over a socket."""
    status = 0
    try:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.dup2(sock_fd, 3)
        become(uid, workdir, (3,))
        apply_limits(limits, nproc, cpu=False)
        sock = socket.socket(fileno=3)
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        while True:
            request = recv_session_request(sock)
            if request is None:
                break
            message, fds = request
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
            # RLIMIT_CPU counts the whole life of the process: this call's budget starts from
            # what the session used so far (the hard limit stays open for later calls).
            used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
            soft = used + max(1.0, message["cpu_s"]) + 1
            set_limit(resource.RLIMIT_CPU, soft, resource.RLIM_INFINITY)
            std_streams()
            call_status = exec_code(message["code"], namespace)
            flush_std()
            os.dup2(0, 1)
            os.dup2(0, 2)
            sock.sendall(encode_frame({"status": call_status}))
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def recv_session_request(sock: socket.socket) -> tuple[dict, list[int]] | None:
    head, fds, _, _ = socket.recv_fds(sock, HEADER.size, 2)
    while head and len(head) < HEADER.size:
        more = sock.recv(HEADER.size - len(head))
        if not more:
            return None
        head += more
    if len(head) < HEADER.size or len(fds) != 2:
        return None
    (n,) = HEADER.unpack(head)
    body = bytearray()
    while len(body) < n:
        chunk = sock.recv(min(1 << 20, n - len(body)))
        if not chunk:
            return None
        body += chunk
    return json.loads(body), fds


# ------------------------------------------------------------------------------ the worker


class Session:
    def __init__(self, sid: str, slot: int, pid: int, sock: socket.socket, uid, workdir: str):
        self.sid = sid
        self.slot = slot
        self.pid = pid
        self.sock = sock
        self.uid = uid
        self.workdir = workdir
        self.pidfd = pidfd_open(pid)
        self.last_used = time.monotonic()

    def signal(self, sig: int) -> None:
        """Signal the session process through its pidfd: immune to pid reuse."""
        if self.pidfd is None:
            kill(self.pid, sig)
            return
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, sig)


class Worker:
    def __init__(self, cfg: dict, subreaper: bool = False) -> None:
        self.tmp_root: str = cfg["tmp_root"]
        self.uid_base: int | None = cfg.get("uid_base")
        self.sweep_mode: str = cfg["sweep"]  # "uid" | "ns" | "sid"
        self.max_sessions: int = min(cfg.get("max_sessions", 16), UID_SLOTS - 2)
        self.sessions: dict[str, Session] = {}
        self.lost: set[str] = set()  # sessions killed by a failure: their next call is told
        self.exited: dict[int, int] = {}  # pid -> wait status, for children reaped early
        self.next_slot = 1
        self.me = os.getpid()
        self.my_uid = os.getuid()
        # The worker adopts every orphan of its calls (PR_SET_CHILD_SUBREAPER): only then does
        # "no child left" prove "no process of the call left" (see has_children).
        self.subreaper = subreaper

    # -- bookkeeping -------------------------------------------------------------------------

    def reap(self) -> None:
        """Collect every exited child (orphans too: the worker is a child subreaper)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exited[pid] = status

    def has_children(self) -> bool:
        """Reap what has exited; True while any child remains (running, stopped or unreapable).

        As a child subreaper the worker is an ancestor of every process its calls started: an
        orphan is re-parented to it (in the same kernel step that makes its parent a zombie),
        and a clone(CLONE_PARENT) sibling is its child outright. So when waitpid says there is
        no child at all (ECHILD, __WALL: whatever the exit signal), not one process of any call
        is alive, and no process of a call's uid exists: only the worker creates those.
        """
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG | WALL)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            self.exited[pid] = status

    def wait(self, pid: int) -> int:
        """Block until ``pid`` exits; return its exit status (negative signal number)."""
        status = self.exited.pop(pid, None)
        if status is None:
            while True:
                try:
                    _, status = os.waitpid(pid, 0)
                    break
                except InterruptedError:
                    continue
                except ChildProcessError:
                    status = self.exited.pop(pid, 0)
                    break
        return os.waitstatus_to_exitcode(status)

    def uid_for(self, slot: int):
        return None if self.uid_base is None else self.uid_base + slot % UID_SLOTS

    def nproc_budget(self, limits: dict, uid) -> int:
        """RLIMIT_NPROC value: the limit counts every task of the (real) uid.

        With a dedicated uid the count starts at zero. Without one (non-root modes) the code
        shares the worker's uid, so the budget is what that uid already runs plus the limit.
        """
        n = int(limits["max_processes"])
        if uid is not None:
            return n
        used = 0
        for pid in list_pids():
            st = proc_status(pid)
            if st and st.get("Uid") == str(self.my_uid):
                used += int(st.get("Threads") or 1)
        return used + n

    def signal_uid(self, uid: int, sig: int) -> None:
        """Send ``sig`` to every process of ``uid`` at once (``signal_every_process_of``)."""
        self.wait(signal_every_process_of(uid, sig))

    def sweep(self, uid, sid: int, keep: set[int]) -> None:
        """SIGKILL every leftover process of a call (those that double-forked away too)."""
        keep = keep | {self.me, 1}
        session_pids = {s.pid for s in self.sessions.values()}
        # First freeze (or kill) the whole population in one atomic step, so that nothing forks
        # while the scan below picks the victims.
        if self.sweep_mode == "uid" and uid is not None:
            self.signal_uid(uid, signal.SIGSTOP if keep - {self.me, 1} else signal.SIGKILL)
        elif self.sweep_mode == "ns":
            # Everything in our PID namespace but init and us (sessions are stopped between
            # calls anyway; the next call of a session continues it).
            kill(-1, signal.SIGSTOP)
        for attempt in range(200):
            victims = []
            for pid in list_pids():
                if pid in keep:
                    continue
                st = proc_status(pid)
                if st is None or st.get("State") in ("Z", "X"):
                    continue
                if self.sweep_mode == "uid":
                    if st.get("Uid") != str(uid):
                        continue
                elif self.sweep_mode == "sid":
                    if proc_session(pid) != sid:
                        continue
                elif pid in session_pids:  # "ns": everything but us, init and live sessions
                    continue
                victims.append(pid)
            if not victims:
                break
            for pid in victims:
                kill(pid, signal.SIGSTOP)  # "sid" mode has no atomic freeze: stop, then kill
            for pid in victims:
                kill(pid)
            self.reap()
            if attempt:
                time.sleep(0.002)
        self.reap()

    def prepare_dir(self, name: str, uid) -> str:
        path = os.path.join(self.tmp_root, name)
        try:
            os.mkdir(path, 0o700)  # the usual case: clean_tmp removed it after the last call
        except FileExistsError:
            self.remove(path)
            os.mkdir(path, 0o700)
        if uid is not None:
            os.chown(path, uid, uid)
        return path

    @staticmethod
    def remove(path: str) -> None:
        def fix(func, p, _exc):
            try:
                os.chmod(os.path.dirname(p), 0o700)
                func(p)
            except OSError:
                pass

        try:
            os.rmdir(path)  # an empty directory, what most calls leave: one syscall
            return
        except OSError:  # not empty, not a directory (a link to one too), gone: the long way
            pass
        if os.path.islink(path) or os.path.isfile(path):
            with contextlib.suppress(OSError):
                os.unlink(path)
        elif os.path.exists(path):
            shutil.rmtree(path, onerror=fix)

    def clean_tmp(self) -> None:
        """Delete everything a stateless call left in the temp root (not the live sessions)."""
        keep = {os.path.basename(s.workdir) for s in self.sessions.values()}
        try:
            names = os.listdir(self.tmp_root)
        except OSError:
            return
        for name in names:
            if name not in keep:
                self.remove(os.path.join(self.tmp_root, name))

    # -- supervising a running call ------------------------------------------------------

    def supervise(self, pid: int, pidfd, col: Collector, deadline: float, sock=None):
        """Collect output until the process exits, ``sock`` says done, or the deadline.

        Returns (done_message or None, exited, timed_out).
        """
        sock_buf = bytearray()
        while True:
            if col.overflow:
                return None, False, False
            left = deadline - time.monotonic()
            if left <= 0:
                return None, False, True
            fds = list(col.open)
            if pidfd is not None:
                fds.append(pidfd)
            if sock is not None:
                fds.append(sock.fileno())
            timeout = left if pidfd is not None else min(left, 0.005)
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                continue
            for fd in ready:
                if fd == pidfd:
                    return None, True, False
                if sock is not None and fd == sock.fileno():
                    msg = self.read_done(sock, sock_buf)
                    if msg is not None:
                        return msg, False, False
                else:
                    col.read(fd)
            if pidfd is None:
                self.reap()
                if pid in self.exited:
                    return None, True, False

    @staticmethod
    def read_done(sock: socket.socket, buf: bytearray):
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        if not data:
            return {"eof": True}
        buf += data
        if len(buf) < HEADER.size:
            return None
        (n,) = HEADER.unpack(buf[: HEADER.size])
        if n > 4096:
            return {"eof": True}
        if len(buf) < HEADER.size + n:
            return None
        try:
            msg = json.loads(bytes(buf[HEADER.size : HEADER.size + n]))
        except ValueError:
            return {"eof": True}
        return msg if isinstance(msg, dict) else {"eof": True}

    # -- stateless calls --------------------------------------------------------------------

    def run_stateless(self, code: str, limits: dict) -> dict:
        uid = self.uid_for(0)
        workdir = self.prepare_dir(RUN_DIR, uid)
        nproc = self.nproc_budget(limits, uid)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            stateless_child(code, limits, uid, workdir, out_w, err_w, nproc)
        os.close(out_w)
        os.close(err_w)
        pidfd = pidfd_open(pid)
        col = Collector(out_r, err_r, int(limits["max_output_bytes"]))
        try:
            _, _, timed_out = self.supervise(pid, pidfd, col, start + limits["wall_s"])
        finally:
            if pidfd is not None:
                os.close(pidfd)
        if pid not in self.exited:  # once reaped, the pid may belong to someone else
            kill(pid)  # stops it on timeout/overflow; harmless on a zombie
        status = self.wait(pid)
        duration = time.monotonic() - start
        # The sweep (a kill(-1) helper and a /proc scan, ~1.4 ms) is needed only if something
        # of the call outlived it; with no session alive, "no child left" proves nothing did.
        if not self.subreaper or self.has_children():
            self.sweep(uid, pid, set())
        col.drain(DRAIN_S)
        self.clean_tmp()
        return self.result(col, status, timed_out, duration, "")

    @staticmethod
    def result(col: Collector, status: int, timed_out: bool, duration: float, note: str) -> dict:
        return {
            "stdout": col.text(0),
            "stderr": col.text(1),
            "exit_status": status,
            "timed_out": timed_out,
            "truncated": col.overflow,
            "duration_s": duration,
            "note": note,
        }

    # -- sessions ---------------------------------------------------------------------------

    def start_session(self, sid: str, limits: dict) -> Session:
        if len(self.sessions) >= self.max_sessions:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used)
            self.close_session(oldest.sid)
            self.lost.add(oldest.sid)  # evicted: its next call starts afresh, and is told so
        used = {s.slot for s in self.sessions.values()}
        slot = self.next_slot
        while slot in used:  # max_sessions < UID_SLOTS - 1, so a free slot exists
            slot = slot % (UID_SLOTS - 1) + 1
        self.next_slot = slot % (UID_SLOTS - 1) + 1
        uid = self.uid_for(slot)
        workdir = self.prepare_dir(f"{SESSION_DIR}{slot}", uid)
        nproc = self.nproc_budget(limits, uid)
        parent_sock, child_sock = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            session_child(child_sock.fileno(), limits, uid, workdir, nproc)
        child_sock.close()
        session = Session(sid, slot, pid, parent_sock, uid, workdir)
        self.sessions[sid] = session
        return session

    def close_session(self, sid: str) -> int:
        """Kill a session's process and everything it started; return its exit status."""
        self.lost.discard(sid)
        session = self.sessions.pop(sid, None)
        if session is None:
            return 0
        session.signal(signal.SIGKILL)
        status = self.wait(session.pid)
        session.sock.close()
        if session.pidfd is not None:
            os.close(session.pidfd)
        self.sweep(session.uid, session.pid, set())
        self.remove(session.workdir)
        return status

    def session_alive(self, session: Session) -> bool:
        self.reap()
        return session.pid not in self.exited

    def run_session(self, sid: str, code: str, limits: dict) -> dict:
        note = ""
        session = self.sessions.get(sid)
        if session is not None and not self.session_alive(session):
            self.close_session(sid)
            session = None
            note = "session state was lost (its process had died); started a new session"
        if sid in self.lost:
            self.lost.discard(sid)
            note = "session state was lost (an earlier call failed); started a new session"
        if session is None:
            session = self.start_session(sid, limits)
        session.last_used = time.monotonic()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        col = Collector(out_r, err_r, int(limits["max_output_bytes"]))
        start = time.monotonic()
        deadline = start + limits["wall_s"]
        session.signal(signal.SIGCONT)
        sent = self.send_session_request(session, code, limits, (out_w, err_w), deadline)
        os.close(out_w)
        os.close(err_w)
        msg, exited, timed_out = (None, False, False)
        if sent:
            msg, exited, timed_out = self.supervise(
                session.pid, session.pidfd, col, deadline, sock=session.sock
            )
        else:
            timed_out = time.monotonic() >= deadline
        duration = time.monotonic() - start
        healthy = msg is not None and isinstance(msg.get("status"), int)
        if healthy:
            status = msg["status"]
            self.sweep(session.uid, session.pid, {session.pid})
            session.signal(signal.SIGSTOP)  # nothing of the session runs between calls
        else:
            status = self.close_session(sid)
            if len(self.lost) < 4096:
                self.lost.add(sid)
            what = "exited" if exited else "was stopped"
            note = f"the session's process {what}; its state is lost"
        col.drain(DRAIN_S)
        return self.result(col, status, timed_out, duration, note)

    @staticmethod
    def send_session_request(session: Session, code: str, limits: dict, fds, deadline) -> bool:
        payload = json.dumps({"code": code, "cpu_s": limits["cpu_s"]}).encode()
        try:
            session.sock.settimeout(max(0.05, deadline - time.monotonic()))
            socket.send_fds(session.sock, [HEADER.pack(len(payload))], list(fds))
            session.sock.sendall(payload)
            return True
        except OSError:
            return False
        finally:
            session.sock.setblocking(True)

    # -- the loop ---------------------------------------------------------------------------

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "run":
            sid = req.get("session")
            if sid is None:
                return self.run_stateless(req["code"], req["limits"])
            return self.run_session(str(sid), req["code"], req["limits"])
        if op == "close":
            self.close_session(str(req.get("session")))
            return {"closed": True}
        if op == "ping":
            return {"pong": True, "sessions": len(self.sessions)}
        return {"error": f"unknown op {op!r}"}


def harden(cfg: dict) -> list[str]:
    """Protections the worker applies to itself (inherited by every child)."""
    problems = []
    if not prctl(PR_SET_NO_NEW_PRIVS, 1):
        problems.append("no_new_privs")
    # Die with the host process, and adopt orphans so that they can be reaped.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if not prctl(PR_SET_CHILD_SUBREAPER, 1):
        problems.append("subreaper")  # then every call is swept in full (Worker.has_children)
    # Non-dumpable: a child running as the same uid cannot ptrace or read the worker's memory.
    prctl(PR_SET_DUMPABLE, 0)
    program = bytes.fromhex(cfg.get("seccomp", ""))
    if program and not install_seccomp(program):
        problems.append("seccomp")
    return problems


def preload(modules: list[str]) -> list[str]:
    """Import modules once in the worker so that every forked call gets them for free."""
    failed = []
    for name in modules:
        try:
            __import__(name)
        except Exception:
            failed.append(name)
    return failed


def main() -> None:
    cfg = json.loads(sys.argv[1])
    # Private copies of the protocol pipes; fds 0/1 point at /dev/null so that a stray print in
    # the worker can never corrupt the protocol.
    req_fd, resp_fd = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.umask(0o077)
    os.environ.clear()
    os.environ.update(cfg.get("env", {}))
    if sys.path and sys.path[0] == "":  # `python -c` puts the working folder first (no -I)
        del sys.path[0]
    sys.path.extend(cfg.get("sys_path", []))
    failed = preload(cfg.get("preload", []))
    problems = harden(cfg)
    worker = Worker(cfg, subreaper="subreaper" not in problems)
    worker.clean_tmp()
    write_all(
        resp_fd,
        encode_frame(
            {
                "ready": True,
                "pid": os.getpid(),
                "uid": os.getuid(),
                "preload_failed": failed,
                "problems": problems,
            }
        ),
    )
    while True:
        req = read_frame(req_fd)
        if req is None:
            break
        try:
            resp = worker.handle(req)
        except Exception as e:  # a worker bug must not hang the host: report it
            resp = {"error": f"{type(e).__name__}: {e}"}
        write_all(resp_fd, encode_frame(resp))
    for sid in list(worker.sessions):
        worker.close_session(sid)


if __name__ == "__main__":
    main()
