"""A pool of warm sandboxed workers, thread-safe, with an asyncio entry and sessions."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .isolation import DEFAULT_PRELOAD, Interpreter, Mode, WorkerSettings, resolve_mode
from .types import ExecResult, SandboxLimits
from .worker import WorkerError, WorkerHandle, failure_result


@dataclass
class _Slot:
    index: int
    handle: WorkerHandle | None = None
    busy: bool = False
    generation: int = 0  # bumped on every (re)start: sessions of an older generation are gone
    sessions: set[str] = field(default_factory=set)


def _shutdown(slots: list[_Slot]) -> None:
    for slot in slots:
        if slot.handle is not None:
            slot.handle.kill()
            slot.handle = None


class SandboxPool:
    """``size`` warm workers; each call runs in a fresh forked child of one of them.

    ``run`` is thread-safe and never raises because of what the code does; ``arun`` is the
    asyncio form. Calls with a ``session_id`` (or through ``pool.session()``) share variables:
    they go to the worker that holds the session's persistent process.
    """

    def __init__(
        self,
        size: int = 2,
        limits: SandboxLimits | None = None,
        *,
        python: str | None = None,
        site_packages: Sequence[str] = (),
        preload: Sequence[str] = DEFAULT_PRELOAD,
        isolation: str = "auto",
        max_sessions_per_worker: int = 16,
    ) -> None:
        if size < 1:
            raise ValueError("SandboxPool size must be >= 1")
        self.limits = limits or SandboxLimits()
        interp = Interpreter.from_executable(python) if python else Interpreter.default()
        self.settings = WorkerSettings(
            interpreter=interp,
            site_packages=tuple(site_packages),
            preload=tuple(preload),
            limits=self.limits,
            max_sessions=max_sessions_per_worker,
            isolation=isolation,
        )
        self.mode: Mode = resolve_mode(self.settings)
        self._cond = threading.Condition()
        self._slots = [_Slot(i) for i in range(size)]
        self._sessions: dict[str, tuple[int, int]] = {}  # id -> (slot index, generation)
        self._closed = False
        self._executor = ThreadPoolExecutor(
            max_workers=max(8, 4 * size), thread_name_prefix="sandbox-call"
        )
        self._finalizer = weakref.finalize(self, _shutdown, self._slots)
        self._start_all()

    @property
    def isolated(self) -> bool:
        """True when the workers run under bubblewrap."""
        return self.mode.isolated

    @property
    def size(self) -> int:
        return len(self._slots)

    # -- workers ----------------------------------------------------------------------------

    def _start_all(self) -> None:
        errors: list[BaseException] = []

        def start(slot: _Slot) -> None:
            try:
                self._restart(slot)
            except BaseException as e:  # reported below, in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=start, args=(s,)) for s in self._slots]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.close()
            raise errors[0]

    def _restart(self, slot: _Slot) -> None:
        """Replace the slot's worker by a fresh one (its sessions are lost)."""
        if slot.handle is not None:
            slot.handle.kill()
            slot.handle = None
        slot.generation += 1
        slot.sessions.clear()
        handle = WorkerHandle(self.settings, self.mode)
        handle.start()
        slot.handle = handle

    def _checkout(self, session_id: str | None) -> _Slot:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("SandboxPool is closed")
                slot = self._pick(session_id)
                if slot is not None:
                    slot.busy = True
                    return slot
                self._cond.wait()

    def _pick(self, session_id: str | None) -> _Slot | None:
        if session_id is not None and session_id in self._sessions:
            slot = self._slots[self._sessions[session_id][0]]
            return None if slot.busy else slot
        free = [s for s in self._slots if not s.busy]
        if not free:
            return None
        if session_id is not None:  # a new session goes where there are fewest
            return min(free, key=lambda s: len(s.sessions))
        return free[0]

    def _release(self, slot: _Slot) -> None:
        with self._cond:
            slot.busy = False
            self._cond.notify_all()

    # -- calls --------------------------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        limits: SandboxLimits | None = None,
        session_id: str | None = None,
    ) -> ExecResult:
        """Run ``code`` and return what it printed; never raises because of the code."""
        limits = limits or self.limits
        slot = self._checkout(session_id)
        try:
            return self._run_on(slot, code, limits, session_id)
        finally:
            self._release(slot)

    async def arun(
        self,
        code: str,
        *,
        limits: SandboxLimits | None = None,
        session_id: str | None = None,
    ) -> ExecResult:
        """``run`` for asyncio callers (the call waits on a thread, the loop stays free)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(self.run, code, limits=limits, session_id=session_id)
        return await loop.run_in_executor(self._executor, call)

    def _run_on(
        self, slot: _Slot, code: str, limits: SandboxLimits, session_id: str | None,
        retry: bool = True,
    ) -> ExecResult:
        started = time.monotonic()
        note = ""
        if slot.handle is None or not slot.handle.alive():
            try:
                self._restart(slot)
            except WorkerError as e:
                return failure_result(str(e), started, limits)
            note = "a dead worker was replaced before this call"
        if session_id is not None:
            note = self._bind_session(slot, session_id) or note
        assert slot.handle is not None
        try:
            result = slot.handle.run(code, limits, session_id)
        except WorkerError as e:
            died = not slot.handle.alive()  # dead, not wedged past the wall limit
            if self._closed:
                return failure_result(str(e), started, limits)
            # stopped now, replaced when the slot is next used: the failed call returns without
            # waiting for a new worker to start (seconds on a busy machine)
            self._discard(slot)
            if died and retry and session_id is None:
                # The worker died under the call (killed from outside, out of memory): the
                # program never finished, so it runs again, once, on the fresh worker and the
                # batch gets the result it would have had. A session's state died with the
                # worker, so a session call is not rerun.
                again = self._run_on(slot, code, limits, None, retry=False)
                note = f"its sandbox worker died ({e}) and it ran again on a new one"
                return ExecResult(**{**again.__dict__, "note": again.note or note})
            return failure_result(str(e), started, limits)
        if note and not result.note:
            result = ExecResult(**{**result.__dict__, "note": note})
        return result

    def _bind_session(self, slot: _Slot, session_id: str) -> str:
        """Pin the session to ``slot``; returns a note when its earlier state was lost."""
        with self._cond:
            known = self._sessions.get(session_id)
            self._sessions[session_id] = (slot.index, slot.generation)
        slot.sessions.add(session_id)
        if known is not None and known[1] != slot.generation:
            return "session state was lost (its worker was replaced); started a new session"
        return ""

    # -- sessions -----------------------------------------------------------------------------

    def session(self, session_id: str | None = None) -> Session:
        """A handle whose calls share one namespace; use it as a (async) context manager."""
        return Session(self, session_id or uuid.uuid4().hex)

    def close_session(self, session_id: str) -> None:
        """Forget a session and kill its process (a no-op for unknown ids)."""
        with self._cond:
            if session_id not in self._sessions:
                return
        slot = self._checkout(session_id)
        try:
            with self._cond:
                index, generation = self._sessions.pop(session_id, (slot.index, -1))
            slot.sessions.discard(session_id)
            if slot.handle is not None and generation == slot.generation:
                try:
                    slot.handle.close_session(session_id)
                except WorkerError:
                    self._restart_quietly(slot)
        finally:
            self._release(slot)

    def _discard(self, slot: _Slot) -> None:
        """Stop the slot's worker; ``_run_on`` starts a new one at the slot's next call."""
        if slot.handle is not None:
            slot.handle.kill()
            slot.handle = None
        slot.generation += 1
        slot.sessions.clear()

    def _restart_quietly(self, slot: _Slot) -> None:
        with contextlib.suppress(WorkerError):
            self._restart(slot)

    # -- teardown -----------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every worker. Calls in flight return a failure result; later calls raise."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._finalizer()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Session:
    """Calls that share variables (one persistent sandboxed process); close it when done."""

    def __init__(self, pool: SandboxPool, session_id: str) -> None:
        self.pool = pool
        self.id = session_id

    def run(self, code: str, *, limits: SandboxLimits | None = None) -> ExecResult:
        return self.pool.run(code, limits=limits, session_id=self.id)

    async def arun(self, code: str, *, limits: SandboxLimits | None = None) -> ExecResult:
        return await self.pool.arun(code, limits=limits, session_id=self.id)

    def close(self) -> None:
        self.pool.close_session(self.id)

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.pool._executor, self.close)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
