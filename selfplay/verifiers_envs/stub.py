"""A scripted OpenAI-compatible chat server: the stub model our environments are tested with.

verifiers' evaluation path reaches a model only through a client config (``EvalClientConfig``:
an OpenAI-compatible ``base_url``), so the stub is a real HTTP endpoint on localhost that
answers ``/v1/chat/completions`` with the reply a script picks for the conversation. Every
request it saw is kept (``requests``) so a test can read the prompts verifiers sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

from aiohttp import web

Script = Callable[[list[dict]], str]  # the conversation so far -> the model's reply


def cycle(replies: list[str]) -> Script:
    """A script answering with ``replies`` in turn, whatever is asked."""
    feed = itertools.cycle(replies)
    return lambda _messages: next(feed)


class StubModel:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.base_url = ""

    async def completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if body.get("stream"):  # the one-reply harness never streams; say so plainly
            return web.json_response({"error": {"message": "stub: no streaming"}}, status=400)
        reply = self.script(body["messages"])
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        return web.json_response({
            "id": f"stub-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(reply.split()),
                "total_tokens": prompt_tokens + len(reply.split()),
            },
        })


@contextlib.asynccontextmanager
async def chat_completions_server(handler) -> AsyncIterator[str]:
    """An OpenAI-compatible ``/v1/chat/completions`` route served by ``handler`` on a free
    localhost port for the length of the block; yields its base URL (``.../v1``). The stub
    model and ``selfplay bench verifiers``' engine server both serve through it."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve(script: Script) -> AsyncIterator[StubModel]:
    """The stub on a free localhost port for the length of the block (``StubModel`` holds its
    base URL)."""
    stub = StubModel(script)
    async with chat_completions_server(stub.completions) as base_url:
        stub.base_url = base_url
        yield stub


@contextlib.contextmanager
def serve_in_thread(script: Script) -> Iterator[StubModel]:
    """The stub on its own event loop in a daemon thread: for a caller that runs its own
    ``asyncio.run`` (verifiers' ``vf-eval`` entry point)."""
    ready: queue.Queue = queue.Queue()
    stop = threading.Event()

    async def host() -> None:
        async with serve(script) as stub:
            ready.put(stub)
            while not stop.is_set():
                await asyncio.sleep(0.02)

    thread = threading.Thread(target=asyncio.run, args=(host(),), daemon=True)
    thread.start()
    try:
        yield ready.get(timeout=30)
    finally:
        stop.set()
        thread.join(timeout=10)
