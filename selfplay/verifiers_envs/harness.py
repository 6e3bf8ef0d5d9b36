"""A one-reply chat harness that runs in-process: the agent's program for our environments.

verifiers' own tool-less harness (``null``) launches a PEP 723 chat program in a runtime, which
first installs ``uv`` and its dependencies; our games and SPICE need one plain chat reply per
turn, with no tools. verifiers' harness contract (the launch method of its Harness class)
lets a harness run its loop in-process "as long as every model call goes through
``endpoint`` + ``secret``", so this one posts the conversation to the rollout's interception
endpoint and returns a synthetic ``ProgramResult``. The interception server records the call
on the trace exactly as it records the chat program's calls (tokens, log-probs, branches).
"""

from __future__ import annotations

import aiohttp
import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

LOCAL = SubprocessConfig()  # the runtime our agents ask for: nothing runs in it



class ReplyHarnessConfig(vf.HarnessConfig):
    pass


class ReplyHarness(vf.Harness[ReplyHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True  # the system prompt goes as its own message
    SUPPORTS_RESUME = True  # a later turn relaunches on the accumulated conversation
    EXECUTES_CODE = False  # no tools: nothing runs on the host
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_):
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [m if isinstance(m, dict) else message_to_wire(m) for m in prompt]
        body = {"model": ctx.model, "messages": messages}
        headers = {"Authorization": f"Bearer {secret}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{endpoint}/chat/completions", json=body, headers=headers) as reply,
        ):
            text = await reply.text()
        if reply.status >= 400:  # the trace already holds the interception's error
            return ProgramResult(exit_code=1, stdout="", stderr=text)
        return ProgramResult(exit_code=0, stdout="", stderr="")
