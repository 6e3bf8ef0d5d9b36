"""What ties a verifiers v1 environment to our policy (docs/verifiers.md).

verifiers runs every agent through a *harness* whose model calls reach an *interception
server*, which asks a client (verifiers' ``Client``) for each reply and records it on the
agent's ``Trace``. Two pieces of ours plug in there:

- ``PolicyClient``: the client the interception server uses for our runs. Its
  ``get_response`` turns the OpenAI-style request into one of our ``Request``s (the agent's
  role: its prompt settings, sampling and adapter), awaits our ``BatchingPolicy`` (so every
  live episode's calls share engine batches) and answers with response tokens made of the
  engine's own ids and log-probs: the trace never re-tokenises. It keeps the same call as our
  ``Turn`` under the trace's id, which is what the learner trains on.
- ``ChatHarness`` (harness id ``selfplay_chat``): a chat harness that runs in-process (the
  harness contract allows it: "the interception is the contract, not the process"): one model
  call per segment, posted to the interception endpoint. verifiers' own chat harnesses
  (``null``, ``bash``) launch a uv script in a subprocess, which needs uv and a download per
  run; agents that leave their harness unset or pin one of those get this one instead.

``load_env`` builds the environment from its name (a verifiers id or an import path) with our
agents' settings, and turns verifiers' loading errors into one line.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import verifiers.v1 as vf
from verifiers.v1.clients.train import serialize_completion
from verifiers.v1.interception import server as interception_server
from verifiers.v1.utils import loaders
from verifiers.v1.utils.generic import concrete_type

from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.types import Request, SamplingParams, Turn

HARNESS_ID = "selfplay_chat"
CHAT_HARNESSES = (None, "null", "bash", HARNESS_ID)  # harnesses we run as ChatHarness

# --------------------------------------------------------------------- the client


class PolicyClientConfig(vf.EvalClientConfig):
    """Names the live ``PolicyClient`` a run registered (configs must stay plain data)."""

    api_key_var: str = "SELFPLAY_POLICY_CLIENT"  # not the Prime default: no Prime lookups
    selfplay_client: str


_CLIENTS: dict[str, PolicyClient] = {}
_ids = itertools.count()


def _resolve_client(config: Any, _original=interception_server.resolve_client) -> vf.Client:
    if isinstance(config, PolicyClientConfig):
        return _CLIENTS[config.selfplay_client]
    return _original(config)


# the interception server builds its clients through this name; ours resolve to the live client
interception_server.resolve_client = _resolve_client


class PolicyClient(vf.Client):
    """Answers verifiers' model calls with our policy; records each call as a ``Turn``.

    ``request_for(role, messages)`` builds the role's ``Request`` (the loop owns prompt
    settings and sampling); ``turn_for(request, completion)`` the ``Turn`` it trains on.
    """

    def __init__(
        self,
        policy: BatchingPolicy,
        request_for: Callable[[str, list[dict[str, str]], int | None, str], Request],
        turn_for: Callable[[Request, Any], Turn],
    ) -> None:
        self.policy = policy
        self.request_for = request_for
        self.turn_for = turn_for
        self.turns: dict[str, list[Turn]] = defaultdict(list)  # by trace id
        # trace id → where the trace sits in the step ("s3-t5-1/0": episode, agent run), so a
        # call's sampling seed depends on what it is, not on which call reached us first
        self.origins: dict[str, str] = {}
        self.key = f"selfplay-{next(_ids)}"
        _CLIENTS[self.key] = self

    def watch(self, episode: str) -> Callable[[vf.Trace], None]:
        """An ``on_trace`` hook naming the traces of ``episode`` in the order they start."""
        started = itertools.count()

        def minted(trace: vf.Trace) -> None:
            self.origins[trace.id] = f"{episode}/{next(started)}"

        return minted

    def config(self) -> PolicyClientConfig:
        return PolicyClientConfig(selfplay_client=self.key)

    def forget(self) -> None:
        _CLIENTS.pop(self.key, None)

    async def get_response(self, dialect, body, sampling, session_id=None, turn=None,
                           headers=None) -> vf.Response:
        role = str(body.get("model", ""))
        messages = [wire_message(m) for m in body.get("messages", [])]
        trace = session_id or ""
        origin = f"{self.origins.get(trace, trace)}/{len(self.turns[trace])}"
        request = self.request_for(role, messages, sampling.max_tokens, origin)
        # queued by origin: the batch's order is the same every run (calls reach us through
        # verifiers' HTTP interception server, in whatever order its sockets deliver them)
        completion = await self.policy.ordered(request, origin)
        self.turns[trace].append(self.turn_for(request, completion))
        response = vf.Response(
            id=f"selfplay-{origin}",
            created=int(time.time()),
            model=role,
            message=vf.AssistantMessage(content=completion.reply),
            finish_reason="length" if completion.finish_reason == "length" else "stop",
            usage=vf.Usage(prompt_tokens=len(completion.prompt_ids),
                           completion_tokens=len(completion.token_ids)),
            tokens=vf.TurnTokens(
                prompt_ids=list(completion.prompt_ids),
                completion_ids=list(completion.token_ids),
                completion_logprobs=list(completion.logprobs),
            ),
        )
        response.raw = serialize_completion(response, role)  # what the harness reads back
        return response


def wire_message(message: Mapping[str, Any]) -> dict[str, str]:
    """An OpenAI chat message as our ``{"role", "content"}`` (text parts joined)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return {"role": str(message.get("role", "user")), "content": str(content)}


def sampling_for(base: SamplingParams, vf_max_tokens: int | None) -> SamplingParams:
    """The role's sampling, with the environment's own token cap when that is smaller."""
    if vf_max_tokens is None or vf_max_tokens >= base.max_new_tokens:
        return base
    return SamplingParams(base.temperature, base.top_p, vf_max_tokens, base.stop, base.seed)


# --------------------------------------------------------------------- the harness


class ChatHarnessConfig(vf.HarnessConfig):
    id: str = HARNESS_ID


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    """One model call per segment, in-process, through the interception endpoint."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data,
                     **_: Any) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [m.model_dump(exclude_none=True) for m in prompt]
        async with aiohttp.ClientSession() as session, session.post(
            f"{endpoint.rstrip('/')}/chat/completions",
            json={"model": ctx.model, "messages": messages},
            headers={"Authorization": f"Bearer {secret}"},
        ) as reply:
            text = await reply.text()
        return vf.ProgramResult(exit_code=0 if reply.status == 200 else 1, stdout="",
                                stderr="" if reply.status == 200 else text)


# verifiers imports a harness id as ``verifiers.v1.harnesses.<id>`` (or a top-level module):
# register this module under that name so ``selfplay_chat`` resolves without a new package
sys.modules.setdefault(f"verifiers.v1.harnesses.{HARNESS_ID}", sys.modules[__name__])
__all__ = ["ChatHarness"]  # what verifiers' loader reads: the one Harness subclass here


# --------------------------------------------------------------------- loading an environment


def taskset_id(name: str) -> str:
    """The verifiers id of ``name``: an installed id as is; an import path (dots: a module path) is
    imported and registered as ``verifiers.v1.tasksets.<last part>`` (verifiers' loader
    imports ids as that or as a top-level module, never a dotted path)."""
    if "." not in name or "/" in name:
        return name
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise UserError(f"verifiers.env: cannot import {name!r} ({exc})") from None
    short = name.rsplit(".", 1)[-1].lower()
    alias = f"verifiers.v1.tasksets.{short}"
    if sys.modules.setdefault(alias, module) is not module:
        raise UserError(f"verifiers.env: {name!r} clashes with the installed id {short!r}")
    return short


def env_class(env_id: str) -> type[vf.Env]:
    """The environment class ``env_id`` names; not installed or malformed → one line."""
    try:
        loaders.import_taskset(env_id)
        return loaders.environment_class(env_id)
    except (ImportError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"verifiers.env: {env_id!r}: {one_line(exc)}") from None


def agent_names(cls: type[vf.Env]) -> list[str]:
    """The agents an environment class declares (its config's ``AgentConfig`` fields)."""
    config_cls = concrete_type(cls, vf.EnvConfig, origin=vf.Env) or vf.EnvConfig
    return [
        name for name, field in config_cls.model_fields.items()
        if isinstance(field.default, vf.AgentConfig)
    ]


def load_env(env_id: str, args: Mapping[str, Any], agents: Mapping[str, dict]) -> vf.Env:
    """The environment: taskset ``env_id`` with ``args`` as its taskset settings, every agent
    on our chat harness and a local runtime, plus ``agents``' per-agent settings."""
    cls = env_class(env_id)
    config_cls = concrete_type(cls, vf.EnvConfig, origin=vf.Env) or vf.EnvConfig
    data: dict[str, Any] = {"taskset": {"id": env_id, **args}}
    for name, field in config_cls.model_fields.items():
        default = field.default
        if not isinstance(default, vf.AgentConfig):
            continue
        pinned = default.harness.id if default.harness is not None else None
        if pinned not in CHAT_HARNESSES:
            raise UserError(
                f"verifiers.env: agent `{name}` runs harness {pinned!r}, a program in a "
                "runtime; `loop: verifiers` plays chat agents only (harness unset, null "
                "or bash)"
            )
        data[name] = {
            "harness": {"id": HARNESS_ID},
            "runtime": {"type": "subprocess"},
            **agents.get(name, {}),
        }
    try:
        return cls(config_cls.model_validate(data))
    except Exception as exc:  # noqa: BLE001 - any construction failure is a config problem
        raise UserError(f"verifiers.env: {env_id!r}: {one_line(exc)}") from None


def read_tasks(env: vf.Env, limit: int, name: str) -> list[vf.Task]:
    """The taskset's first ``limit`` tasks; a taskset that cannot load (missing data, a
    download this machine cannot make) → one line."""
    try:
        return list(env.taskset.take(limit))
    except Exception as exc:  # noqa: BLE001 - the taskset's own code: any failure is its input
        raise UserError(f"verifiers.env: {name!r}: its taskset failed to load: "
                        f"{one_line(exc)}") from None


def one_line(exc: BaseException) -> str:
    """An exception as one line (verifiers' messages can span several)."""
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
