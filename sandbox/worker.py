"""Host side of one sandboxed worker process: start it, talk to it, kill it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from .isolation import LaunchPlan, Mode, WorkerSettings, kill_uids, plan_launch
from .types import ExecResult, SandboxLimits

log = logging.getLogger(__name__)

HEADER = struct.Struct(">I")
MAX_RESPONSE = 64 << 20
START_TIMEOUT_S = 60.0
GRACE_S = 0.8
"""How long past the wall limit the host waits for the worker before killing it."""

# bwrap --die-with-parent and the fallback worker use PR_SET_PDEATHSIG, which fires when the
# *thread* that forked them exits. Popen therefore always runs on this one long-lived thread.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")


class WorkerError(RuntimeError):
    """The worker died, hung or broke the protocol (never caused by a normal program)."""


class Scrubber:
    """Replaces host paths in program output by placeholders (<tmp>, <python>, <home>, ...)."""

    def __init__(self, pairs: tuple[tuple[str, str], ...], tmp_root: str) -> None:
        names = dict(pairs)
        session_dirs = re.escape(tmp_root.rstrip("/")) + r"/sbx-s\d+"
        alternatives = [session_dirs] + [re.escape(p) for p, _ in pairs]
        self._names = names
        self._re = re.compile("|".join(f"(?:{a})" for a in alternatives))

    def __call__(self, text: str) -> str:
        return self._re.sub(lambda m: self._names.get(m.group(0), "<tmp>"), text)


class WorkerHandle:
    """One long-lived sandboxed worker. Not thread-safe: the pool lends it to one caller at once."""

    def __init__(self, settings: WorkerSettings, mode: Mode) -> None:
        self.settings = settings
        self.mode = mode
        self.proc: subprocess.Popen[bytes] | None = None
        self.plan: LaunchPlan | None = None
        self.info: dict = {}
        self.scrub: Scrubber | None = None
        self._buf = bytearray()
        self._stderr = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        plan = plan_launch(self.settings, self.mode)
        self.plan = plan
        self.scrub = Scrubber(plan.scrub_paths, plan.tmp_root)
        # The worker's own stderr only carries crash reports: a file never blocks it.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        try:
            self.proc = _spawner.submit(self._popen, plan).result()
        finally:
            plan.close_fds()
        try:
            self.info = self._read(time.monotonic() + timeout)
        except WorkerError as e:
            detail = self._stderr_tail()
            self.kill()
            raise WorkerError(f"sandbox worker failed to start: {e}; {detail}") from None
        if not self.info.get("ready"):
            self.kill()
            raise WorkerError(f"sandbox worker sent {self.info!r} instead of ready")
        if self.info.get("preload_failed"):
            log.warning("sandbox: could not preload %s", ", ".join(self.info["preload_failed"]))
        if self.info.get("problems"):
            log.warning("sandbox: worker hardening incomplete: %s", self.info["problems"])

    def _popen(self, plan: LaunchPlan) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            plan.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=plan.env,
            cwd=plan.cwd,
            pass_fds=plan.pass_fds,
            start_new_session=True,  # its own process group: killable as a whole
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker (under bwrap this tears down its whole PID namespace)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            for target in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
                with contextlib.suppress(OSError):
                    target()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            plan = self.plan
            if plan is not None and plan.uid_base is not None and not self.mode.isolated:
                kill_uids(plan.uid_base)  # no PID namespace to take the calls' processes along
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self.plan is not None and self.plan.host_tmp:
            shutil.rmtree(self.plan.host_tmp, ignore_errors=True)
        self._buf.clear()

    def stop(self, timeout: float = 2.0) -> None:
        """Polite shutdown (EOF on its input closes sessions), then kill."""
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-2000:].decode(errors="replace").strip()
        except OSError:
            return ""

    # -- protocol -------------------------------------------------------------------------------

    def call(self, request: dict, timeout: float) -> dict:
        """Send one request and wait for its answer; WorkerError if none comes in ``timeout``."""
        if not self.alive():
            raise WorkerError("worker is not running")
        deadline = time.monotonic() + timeout
        data = json.dumps(request).encode()
        try:
            self._write(HEADER.pack(len(data)) + data, deadline)
            return self._read(deadline)
        except (OSError, ValueError, AttributeError) as e:  # killed under our feet (pool closed)
            raise WorkerError(f"worker connection lost: {e}") from None

    def _write(self, data: bytes, deadline: float) -> None:
        fd = self.proc.stdin.fileno()  # type: ignore[union-attr]
        view = memoryview(data)
        os.set_blocking(fd, False)
        try:
            while view:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerError("timed out sending the request")
                _, ready, _ = select.select([], [fd], [], left)
                if ready:
                    try:
                        view = view[os.write(fd, view) :]
                    except BlockingIOError:
                        continue
                    except OSError as e:
                        raise WorkerError(f"worker input closed: {e}") from None
        finally:
            os.set_blocking(fd, True)

    def _read(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            if len(self._buf) >= HEADER.size:
                (n,) = HEADER.unpack(self._buf[: HEADER.size])
                if n > MAX_RESPONSE:
                    raise WorkerError("oversized response")
                if len(self._buf) >= HEADER.size + n:
                    body = bytes(self._buf[HEADER.size : HEADER.size + n])
                    del self._buf[: HEADER.size + n]
                    try:
                        return json.loads(body)
                    except ValueError:
                        raise WorkerError("malformed response") from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError("no answer before the deadline")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise WorkerError("worker exited")
                self._buf += chunk

    # -- calls ------------------------------------------------------------------------------

    def run(self, code: str, limits: SandboxLimits, session_id: str | None = None) -> ExecResult:
        """Run code; WorkerError when the worker itself failed (the caller replaces it)."""
        request = {"op": "run", "code": code, "limits": limits.to_wire(), "session": session_id}
        response = self.call(request, limits.wall_s + GRACE_S)
        if "error" in response:
            raise WorkerError(f"worker error: {response['error']}")
        return self.to_result(response)

    def to_result(self, r: dict) -> ExecResult:
        scrub = self.scrub or (lambda s: s)
        try:
            return ExecResult(
                stdout=scrub(str(r["stdout"])),
                stderr=scrub(str(r["stderr"])),
                exit_status=int(r["exit_status"]),
                timed_out=bool(r["timed_out"]),
                truncated=bool(r["truncated"]),
                duration_s=float(r["duration_s"]),
                note=str(r.get("note", "")),
            )
        except (KeyError, TypeError, ValueError):
            raise WorkerError(f"malformed result {str(r)[:200]!r}") from None

    def close_session(self, session_id: str, timeout: float = 5.0) -> None:
        self.call({"op": "close", "session": session_id}, timeout)


def failure_result(message: str, started: float, limits: SandboxLimits) -> ExecResult:
    """The result reported when the worker (not the program) failed."""
    elapsed = time.monotonic() - started
    return ExecResult(
        stdout="",
        stderr="",
        exit_status=-int(signal.SIGKILL),
        timed_out=elapsed >= limits.wall_s,
        duration_s=elapsed,
        note=f"sandbox worker failed and was replaced: {message}",
    )
