"""Tool-integrated rollouts (docs/algorithms.md#agent0): the model may run Python while it answers.

The model writes reasoning and a ```` ```python ```` block, then opens an ```` ```output ````
block; generation stops on that stop string, the sandbox runs the code, its stdout/stderr and a
closing fence are appended, and generation resumes on everything so far. The whole exchange is
ONE ``Turn``: model tokens are trained on (``loss_mask`` 1), tool-output tokens are only
conditioned on (``loss_mask`` 0, engine log-prob 0.0). See ``docs/tools.md``.

The token ids are kept exactly as the engine produced them and as we fed them back (never
re-tokenised from text), so the learner scores the very sequence the engine sampled.

``multi_turn_rollout`` is that machinery for any ``RolloutTool`` (a stop string and what to
append); the Python tool here and the search tool (``selfplay/engines/search_tool.py``) use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import Field

from sandbox import ExecResult, SandboxLimits, SandboxPool
from selfplay.config import Strict
from selfplay.engines.base import encode_request
from selfplay.types import Completion, Request, Turn

STOP = "```output"  # the model opens an output block: time to run its code
CLOSE_FENCE = "```\n"  # appended after the tool output, so the model continues in prose
TRUNCATION_MARKER = "\n... [output truncated]\n"
NO_CODE = "(no ```python code block to run)\n"

# An opening fence for Python: ```python, ```python3 or ```py (any case), code may follow on
# the same line. \b keeps ```pyth... or ```pytorch from matching.
_OPEN_FENCE = re.compile(r"```[ \t]*(?:python3?|py)\b[ \t]*\n?", re.IGNORECASE)


class ToolSettings(Strict):
    """The Python tool of a loop's settings (``rlvr.tool``, ``agent0.tool``): fenced code runs in
    the sandbox."""

    max_tool_turns: int = Field(4, ge=1)
    max_observation_tokens: int = Field(512, ge=16)
    wall_s: float = Field(10.0, gt=0)
    pool_size: int = Field(2, ge=1)
    sessions: bool = False  # variables persist between the tool calls of one episode


class SandboxRunner(Protocol):
    """What a tool rollout needs from ``sandbox.SandboxPool``."""

    async def arun(
        self, code: str, *, limits: SandboxLimits | None = None, session_id: str | None = None
    ) -> ExecResult: ...


@dataclass
class ToolCall:
    """One execution: the code, what the model was shown, and how it ended."""

    code: str
    observation: str
    exit_status: int
    timed_out: bool = False
    truncated: bool = False  # the observation was cut (by tokens here, or by the sandbox)

    @property
    def error(self) -> bool:
        return self.exit_status != 0 or self.timed_out


@dataclass
class ToolRollout:
    """A finished tool-integrated rollout: one Turn plus what the tool did along the way.

    ``finish_reason``: "stop" (the model finished), "length" (token budget spent), "tool_budget"
    (the model asked for another tool call after ``max_tool_turns``).
    """

    turn: Turn
    # the tool's call records: ``ToolCall`` (Python) or ``search_tool.SearchCall``; both have
    # ``error``, ``timed_out`` and ``truncated``, which the counts below read
    calls: list[Any] = field(default_factory=list)
    model_calls: int = 0
    finish_reason: str = "stop"

    @property
    def tool_calls(self) -> int:
        return len(self.calls)

    @property
    def tool_errors(self) -> int:
        return sum(c.error for c in self.calls)

    @property
    def timeouts(self) -> int:
        return sum(c.timed_out for c in self.calls)

    @property
    def truncated_observations(self) -> int:
        return sum(c.truncated for c in self.calls)

    def info(self) -> dict[str, Any]:
        """The counts an Episode records."""
        return {
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "tool_timeouts": self.timeouts,
            "tool_truncated": self.truncated_observations,
            "tool_finish": self.finish_reason,
        }


# ---------------------------------------------------------------------- text helpers
def extract_code(segment: str) -> str | None:
    """The code of the last ```python (or ```py) block of ``segment``, or None.

    The block may be closed by its own fence or left open right before the ```output stop
    string (small models often skip the closing fence).
    """
    end = segment.rfind(STOP)
    text = segment[:end] if end >= 0 else segment
    opens = list(_OPEN_FENCE.finditer(text))
    if not opens:
        return None
    body = text[opens[-1].end() :]
    close = body.find("```")
    if close >= 0:
        body = body[:close]
    code = textwrap.dedent(body).strip("\n")
    return code if code.strip() else None


def hit_stop(completion: Completion) -> bool:
    """Did generation stop because the model opened an output block?"""
    return hit(completion, STOP)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids if text else []


def observation_ids(
    tokenizer, result: ExecResult, max_tokens: int, lead: str, wall_s: float
) -> tuple[list[int], str, bool]:
    """Token ids of what follows ```output: (ids, shown output, truncated).

    Pieces are tokenised separately so the output body is cut at exactly ``max_tokens`` tokens.
    """
    output = result.output
    if result.out_of_time:  # say why the output stops, as a Python traceback would
        output += f"TimeoutError: the code ran longer than {wall_s:g} s\n"
    if output and not output.endswith("\n"):
        output += "\n"
    body = _ids(tokenizer, output)
    truncated = result.truncated
    if len(body) > max_tokens:
        body, truncated = body[:max_tokens], True
    marker = _ids(tokenizer, TRUNCATION_MARKER) if truncated else []
    ids = _ids(tokenizer, lead) + body + marker + _ids(tokenizer, CLOSE_FENCE)
    return ids, tokenizer.decode(body, skip_special_tokens=True), truncated


# ---------------------------------------------------------------------- the rollout
class _Transcript:
    """Completion tokens so far, with the loss mask and engine log-probs kept in step."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.mask: list[int] = []
        self.model_tokens = 0
        self.oldest_version = sys.maxsize

    def add_model(self, completion: Completion) -> None:
        self.ids += completion.token_ids
        self.logprobs += completion.logprobs
        self.mask += [1] * len(completion.token_ids)
        self.model_tokens += len(completion.token_ids)
        if completion.policy_version is not None:  # the oldest weights in the turn bound staleness
            self.oldest_version = min(self.oldest_version, completion.policy_version)

    def add_tool(self, ids: list[int]) -> None:
        self.ids += ids
        self.logprobs += [0.0] * len(ids)
        self.mask += [0] * len(ids)


async def _run_tool(
    code: str | None,
    pool: SandboxRunner,
    policy,
    settings: ToolSettings,
    session_id: str | None,
) -> ExecResult:
    if code is None:  # the model opened an output block without code: tell it so, as an error
        return ExecResult(stdout="", stderr=NO_CODE, exit_status=1)
    base = getattr(pool, "limits", None) or SandboxLimits()
    limits = dataclasses.replace(base, wall_s=settings.wall_s)
    # Let the scheduler serve other episodes while this one waits on the sandbox.
    async with policy.elsewhere():
        return await pool.arun(code, limits=limits, session_id=session_id)


class RolloutTool(Protocol):
    """One tool of a multi-turn rollout: the stop string that asks for it, and what it appends.

    ``call`` gets the segment the model just wrote (ending at ``stop``) and the whole reply so
    far (the prefill and every segment and observation), and returns the call's record and the
    token ids of its observation (trained on with ``loss_mask`` 0). The Python tool here and
    the search tool (``selfplay/engines/search_tool.py``) are the two."""

    stop: str

    async def call(self, segment: str, reply: str, policy, tokenizer) -> tuple[Any, list[int]]: ...


def hit(completion: Completion, stop: str) -> bool:
    """Did generation stop on ``stop``?"""
    if completion.stop_string is not None:
        return completion.stop_string == stop
    # An engine that does not report which stop string fired: look at the text's end.
    return completion.finish_reason == "stop" and completion.text.rstrip().endswith(stop)


async def multi_turn_rollout(
    policy, request: Request, tokenizer, tool: RolloutTool, max_calls: int
) -> ToolRollout:
    """Sample ``request``, pausing for ``tool`` whenever the model writes its stop string; one
    Turn covers every segment, with the tool's observations masked from the loss.

    ``request.sampling.max_new_tokens`` bounds the model tokens of all segments together;
    observations do not count against it. After ``max_calls`` calls another request for the
    tool ends the rollout (``finish_reason`` "tool_budget")."""
    stops = request.sampling.stop
    if tool.stop not in stops:
        stops = (*stops, tool.stop)
    budget = request.sampling.max_new_tokens
    transcript = _Transcript()
    calls: list[Any] = []
    prompt_ids: list[int] | None = request.prompt_ids
    model_calls, finish = 0, "stop"
    if prompt_ids is None and request.prefill.rstrip().endswith(tool.stop):
        # the prompt's prefill makes the first call (a reply started with a whole search): run
        # it before the model writes anything; its observation follows the prefill
        prompt_ids = encode_request(tokenizer, request)
        call, ids = await tool.call(request.prefill, request.prefill, policy, tokenizer)
        calls.append(call)
        transcript.add_tool(ids)
    while True:
        sampling = dataclasses.replace(
            request.sampling, stop=stops, max_new_tokens=budget - transcript.model_tokens
        )
        segment_request = (
            dataclasses.replace(request, sampling=sampling)
            if prompt_ids is None  # first segment: let the engine apply the chat template
            else dataclasses.replace(  # the prefill is in prompt_ids already
                request,
                messages=None,
                prompt_ids=prompt_ids + transcript.ids,
                sampling=sampling,
                prefill="",
            )
        )
        completion = await policy(segment_request)
        model_calls += 1
        if prompt_ids is None:
            prompt_ids = list(completion.prompt_ids)
        transcript.add_model(completion)
        if not hit(completion, tool.stop):
            finish = completion.finish_reason
            break
        if len(calls) >= max_calls:
            finish = "tool_budget"
            break
        if transcript.model_tokens >= budget:
            finish = "length"
            break
        reply = request.prefill + tokenizer.decode(transcript.ids, skip_special_tokens=True)
        call, ids = await tool.call(completion.text, reply, policy, tokenizer)
        calls.append(call)
        transcript.add_tool(ids)
    turn = Turn(
        role=request.role,
        prompt_ids=prompt_ids or [],
        completion_ids=transcript.ids,
        engine_logprobs=transcript.logprobs,
        loss_mask=transcript.mask,
        text=tokenizer.decode(transcript.ids, skip_special_tokens=True),
        prefill=request.prefill,
        adapter=request.adapter,
        prompt_text=request.messages[-1]["content"] if request.messages else "",
        policy_version=min(transcript.oldest_version, policy.version),
        temperature=request.sampling.temperature,
        top_p=request.sampling.top_p,
        finish_reason=finish,
    )
    return ToolRollout(turn=turn, calls=calls, model_calls=model_calls, finish_reason=finish)


@dataclass
class _PythonCalls:
    """The Python tool as a ``RolloutTool``: the segment's last code block, run in the sandbox."""

    pool: SandboxRunner
    settings: ToolSettings
    session_id: str | None
    stop: str = STOP

    async def call(self, segment: str, reply: str, policy, tokenizer) -> tuple[ToolCall, list[int]]:
        return await _tool_turn(
            segment, self.pool, policy, tokenizer, self.settings, self.session_id
        )


async def tool_rollout(
    policy,
    request: Request,
    sandbox_pool: SandboxRunner,
    tokenizer,
    settings: ToolSettings,
    session_id: str | None = None,
) -> ToolRollout:
    """Sample ``request`` with the Python tool; returns one Turn covering every segment.

    ``policy`` is a ``BatchingPolicy`` (``await policy(request)``, ``policy.elsewhere()``).
    ``request.sampling.max_new_tokens`` bounds the model tokens of all segments together; tool
    output does not count against it. With ``settings.sessions`` (and no ``session_id`` given)
    the episode's calls share one interpreter session, closed when the rollout ends.
    """
    own_session = session_id is None and settings.sessions
    if own_session:
        session_id = f"tool-{uuid.uuid4().hex}"
    try:
        return await multi_turn_rollout(
            policy, request, tokenizer, _PythonCalls(sandbox_pool, settings, session_id),
            settings.max_tool_turns,
        )
    finally:
        if own_session and hasattr(sandbox_pool, "close_session"):
            with contextlib.suppress(RuntimeError):  # the pool was closed under us
                await asyncio.to_thread(sandbox_pool.close_session, session_id)


async def _tool_turn(
    segment: str,
    pool: SandboxRunner,
    policy,
    tokenizer,
    settings: ToolSettings,
    session_id: str | None,
) -> tuple[ToolCall, list[int]]:
    """Run the segment's last code block; returns the call record and the tokens to append."""
    code = extract_code(segment)
    result = await _run_tool(code, pool, policy, settings, session_id)
    lead = "" if segment.endswith("\n") else "\n"  # the output starts on its own line
    ids, shown, truncated = observation_ids(
        tokenizer, result, settings.max_observation_tokens, lead, settings.wall_s
    )
    call = ToolCall(
        code=code or "",
        observation=shown,
        exit_status=result.exit_status,
        timed_out=result.out_of_time,
        truncated=truncated,
    )
    return call, ids


class ToolSandbox:
    """A loop's Python tool: the sandbox pool, started on the first call (not when the loop is
    built, so a run that never calls the tool never starts workers) and closed with the loop."""

    def __init__(self, settings: ToolSettings) -> None:
        self.settings = settings
        self._pool: SandboxPool | None = None

    @property
    def pool(self) -> SandboxPool:
        if self._pool is None:
            limits = SandboxLimits(wall_s=self.settings.wall_s, cpu_s=self.settings.wall_s)
            self._pool = SandboxPool(size=self.settings.pool_size, limits=limits)
        return self._pool

    async def rollout(self, policy, request: Request) -> ToolRollout:
        """``request`` answered with the tool (see ``tool_rollout``)."""
        return await tool_rollout(policy, request, self.pool, policy.tokenizer, self.settings)

    async def run(self, policy, code: str) -> ExecResult:
        """Run model-written ``code`` once (the policy serves other episodes meanwhile)."""
        return await _run_tool(code, self.pool, policy, self.settings, None)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit anything may be gone
            self.close()
