"""Shared helpers and fixtures of the sandbox tests: short limits, a module pool, host canaries."""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from sandbox import SandboxLimits, SandboxPool, isolation_available
from sandbox.isolation import UID_RANGE

MiB = 1 << 20
REPO = Path(__file__).resolve().parents[2]
SECRET_ENV = "SELFPLAY_SANDBOX_TEST_SECRET"

# Short limits keep the suite fast: a hostile program is stopped after 2 s.
TEST_LIMITS = SandboxLimits(
    wall_s=2.0,
    cpu_s=2.0,
    memory_bytes=256 * MiB,
    file_size_bytes=4 * MiB,
    tmp_bytes=32 * MiB,
    max_processes=8,
    max_open_files=64,
    max_output_bytes=16 * 1024,
)

BWRAP = isolation_available()
requires_bwrap = pytest.mark.skipif(
    not BWRAP, reason="bubblewrap isolation unavailable (apt-get install -y bubblewrap)"
)


@dataclass
class Host:
    """Things on the host that the sandboxed code must neither read nor change."""

    token: str
    home_canary: Path
    project_canary: Path
    tmp_canary: Path
    listener: socket.socket
    snapshots: dict[Path, tuple[bytes, int]] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def snapshot(self) -> None:
        for path in (self.home_canary, self.project_canary, self.tmp_canary):
            self.snapshots[path] = (path.read_bytes(), path.stat().st_mtime_ns)

    def unchanged(self) -> bool:
        return all(
            p.exists() and (p.read_bytes(), p.stat().st_mtime_ns) == snap
            for p, snap in self.snapshots.items()
        )

    def accepted_connection(self) -> bool:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def substitute(self, code: str) -> str:
        """Fill the placeholders of a hostile program with this host's paths."""
        return (
            code.replace("@HOME_CANARY@", str(self.home_canary))
            .replace("@PROJECT_CANARY@", str(self.project_canary))
            .replace("@TMP_CANARY@", str(self.tmp_canary))
            .replace("@REPO@", str(REPO))
            .replace("@HOME@", str(Path.home()))
            .replace("@PORT@", str(self.port))
        )


@pytest.fixture(scope="session")
def host() -> Iterator[Host]:
    token = "canary-" + secrets.token_hex(8)
    home_canary = Path.home() / f".selfplay-sandbox-{token}"
    project_canary = REPO / "tests" / "sandbox" / f".canary-{token}"
    fd, tmp_name = tempfile.mkstemp(prefix="selfplay-sandbox-canary-", dir="/tmp")
    os.close(fd)
    tmp_canary = Path(tmp_name)
    for path in (home_canary, project_canary, tmp_canary):
        path.write_text(f"{token}\n")
        path.chmod(0o644)  # world-readable: only the sandbox may stop a reader
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    # A host secret in the environment: workers must not inherit it.
    old = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = token
    h = Host(token, home_canary, project_canary, tmp_canary, listener)
    h.snapshot()
    try:
        yield h
    finally:
        listener.close()
        for path in (home_canary, project_canary, tmp_canary):
            path.unlink(missing_ok=True)
        if old is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = old


@pytest.fixture(scope="module")
def pool(host: Host) -> Iterator[SandboxPool]:
    with SandboxPool(size=2, limits=TEST_LIMITS) as p:
        yield p


def sandbox_processes() -> list[psutil.Process]:
    """Live host processes running as one of the sandbox's per-call uids."""
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            uid = proc.info["uids"].real
            if UID_RANGE[0] <= uid < UID_RANGE[1] and proc.info["status"] != "zombie":
                found.append(proc)
        except (psutil.Error, AttributeError):
            continue
    return found


def descendants() -> set[int]:
    """Live (non-zombie) descendants of the test process: the pool's workers, nothing else."""
    out = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.add(proc.pid)
        except psutil.Error:
            continue
    return out


def worker_pids(pool: SandboxPool) -> list[int | None]:
    return [s.handle.proc.pid if s.handle and s.handle.proc else None for s in pool._slots]
