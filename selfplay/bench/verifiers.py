"""``selfplay bench verifiers``: episodes per second of one of our verifiers environments run
here (every episode in one ``BatchingPolicy.gather``, the model behind a
verifiers ``Client`` in this process) against the same environment run by verifiers' own
evaluation (``vf-eval``'s runner, ``EvalClient`` over HTTP to the same engine served
OpenAI-style). Goal: the ratio here / vf-eval within 10% of 1, or above it
(docs/verifiers.md).

Both sides play the same tasks with the same engine (one ``HFEngine``, its prefix cache emptied
before each side) and greedy sampling, so they ask the model the same prompts and get the same
replies: the same work. Each side plays a few episodes untimed first (thread pools, first
allocations), then the timed set, ``--repeats`` times alternating which side goes first; the
table shows the median.

- **here**: the episodes run concurrently under ``env.serving()``; every model call awaits the
  ``BatchingPolicy``, which sends the engine one batch whenever every live episode waits on it.
  The client is the bridge's ``PolicyClient`` (``loop: verifiers``) when that module is
  installed, else ``EngineClient`` below, which does the same without recording turns.
- **vf-eval**: ``run_eval`` with ``max_concurrent`` episodes, its client an ``EvalClient`` on an
  OpenAI-compatible endpoint that serves the engine the way a model server does: whatever is
  queued when the engine is free is the next batch (no joining a batch in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import verifiers.v1 as vf
from aiohttp import web
from rich.console import Console
from rich.table import Table
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.clients.train import serialize_completion
from verifiers.v1.configs.cli.eval import EvalConfig
from verifiers.v1.interception import server as interception_server
from verifiers.v1.utils.loaders import load_environment, resolve_env_config

from selfplay.engines.base import Engine
from selfplay.engines.policy import BatchingPolicy
from selfplay.types import Completion, Request, SamplingParams
from selfplay.verifiers_envs.stub import chat_completions_server

KEY_VAR = "SELFPLAY_BENCH_KEY"  # the endpoint's API-key variable (any value: it is ours)
WARMUP_EPISODES = 4
DOCUMENTS = [  # SPICE's chunks for the benchmark: short, factual, one question each
    "The Eiffel Tower in Paris was completed in 1889 and is about 330 metres tall.",
    "Water boils at 100 degrees Celsius at sea level and freezes at 0 degrees.",
    "The Pacific is the largest ocean on Earth and covers about a third of its surface.",
    "Honey bees live in colonies with one queen, thousands of workers and some drones.",
    "Mount Everest, at 8,849 metres, is the highest mountain above sea level.",
    "The human heart has four chambers: two atria and two ventricles.",
    "Light from the Sun takes about eight minutes to reach the Earth.",
    "A chess board has 64 squares, and each player starts with 16 pieces.",
]


def env_spec(name: str, folder: Path, tasks: int = len(DOCUMENTS)) -> dict:
    """The env config of benchmark environment ``name`` (kuhn, negotiation, spice) with at least
    ``tasks`` tasks (SPICE's chunks repeat, under their own ids, to make up the number)."""
    if name == "kuhn":
        # lenient: a reply's last [move] counts without \boxed{}, so a small model's games
        # last more than one move (more calls per episode: what batching across episodes is for)
        return {"taskset": {"id": "selfplay_games", "kwargs": {"rounds": 1}}, "lenient": True}
    if name == "negotiation":  # any bracketed text is a message: games of several moves
        return {"taskset": {"id": "selfplay_games", "game": "simple_negotiation"},
                "lenient": True}
    documents = folder / "documents.jsonl"
    count = max(tasks, len(DOCUMENTS))
    documents.write_text("".join(json.dumps({"id": f"d{i}", "text": DOCUMENTS[i % len(DOCUMENTS)]})
                                 + "\n" for i in range(count)))
    return {"taskset": {"id": "selfplay_spice", "documents_file": str(documents)},
            "reasoner_samples": 4}


def engine_request(messages: list[dict], max_new_tokens: int) -> Request:
    """One model call as our ``Request``: greedy, so both sides get the same reply."""
    chat = [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in messages]
    return Request(role="policy", messages=chat,
                   sampling=SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))


def response(completion: Completion, model: str, number: int) -> vf.Response:
    """The engine's completion as verifiers' ``Response``, its own token ids and log-probs."""
    reply = vf.Response(
        id=f"selfplay-{number}", created=int(time.time()), model=model,
        message=vf.AssistantMessage(content=completion.reply),
        finish_reason="length" if completion.finish_reason == "length" else "stop",
        usage=vf.Usage(prompt_tokens=len(completion.prompt_ids),
                       completion_tokens=len(completion.token_ids)),
        tokens=vf.TurnTokens(prompt_ids=list(completion.prompt_ids),
                             completion_ids=list(completion.token_ids),
                             completion_logprobs=list(completion.logprobs)),
    )
    reply.raw = serialize_completion(reply, model)  # what the harness reads back
    return reply


class EngineClientConfig(vf.EvalClientConfig):
    api_key_var: str = KEY_VAR  # not the Prime default: no Prime lookups


class EngineClient(vf.Client):
    """Our policy as the verifiers ``Client`` of every agent (no HTTP in between)."""

    def __init__(self, policy: BatchingPolicy, max_new_tokens: int) -> None:
        self.policy, self.max_new_tokens, self.calls = policy, max_new_tokens, 0

    async def get_response(self, dialect, body, sampling, session_id=None, turn=None,
                           headers=None) -> vf.Response:
        completion = await self.policy(engine_request(body["messages"], self.max_new_tokens))
        self.calls += 1
        return response(completion, str(body.get("model", "")), self.calls)


@contextlib.contextmanager
def resolving(client: vf.Client) -> Iterator[EngineClientConfig]:
    """The interception server builds its clients from configs (``resolve_client``): for the
    length of the block the config this yields resolves to ``client``."""
    original = interception_server.resolve_client
    config = EngineClientConfig()
    interception_server.resolve_client = (
        lambda c: client if isinstance(c, EngineClientConfig) else original(c))
    try:
        yield config
    finally:
        interception_server.resolve_client = original


class EngineServer:
    """The engine behind ``/v1/chat/completions``: each batch is what was queued when the
    engine became free."""

    def __init__(self, engine: Engine, max_new_tokens: int) -> None:
        self.engine, self.max_new_tokens = engine, max_new_tokens
        self.pending: list[tuple[Request, asyncio.Future]] = []
        self.wake = asyncio.Event()
        self.batches = self.calls = 0

    async def completions(self, http: web.Request) -> web.Response:
        body = await http.json()
        future = asyncio.get_running_loop().create_future()
        self.pending.append((engine_request(body["messages"], self.max_new_tokens), future))
        self.wake.set()
        completion = await future
        self.calls += 1
        model = str(body.get("model", ""))
        return web.json_response(response(completion, model, self.calls).raw)

    async def batcher(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch, self.pending = self.pending, []
            if not batch:
                continue
            self.batches += 1
            completions = await asyncio.to_thread(self.engine.generate, [r for r, _ in batch])
            for (_, future), completion in zip(batch, completions, strict=True):
                future.set_result(completion)
            if self.pending:
                self.wake.set()

    @contextlib.asynccontextmanager
    async def serving(self):
        async with chat_completions_server(self.completions) as base_url:
            worker = asyncio.ensure_future(self.batcher())
            try:
                yield base_url
            finally:
                worker.cancel()


@dataclass
class Run:
    seconds: float
    episodes: int
    calls: int
    batches: int
    failed: int
    error: str = ""  # the first failed episode's first error: a failed run measures nothing

    @property
    def rate(self) -> float:
        return self.episodes / self.seconds


async def run_vf_eval(engine: Engine, spec: dict, episodes: int, concurrency: int,
                      new_tokens: int, out: Path) -> Run:
    """verifiers' evaluation of ``episodes`` tasks against the engine served over HTTP."""
    server = EngineServer(engine, new_tokens)
    async with server.serving() as base_url:
        config = EvalConfig.model_validate({
            "env": spec, "model": "selfplay", "num_rollouts": 1, "rich": None, "push": False,
            "client": {"base_url": base_url, "api_key_var": KEY_VAR},
            "select": {"limit": episodes}, "max_concurrent": concurrency,
            "output_dir": str(out),
        })
        start = time.perf_counter()
        played = await run_eval(config)
        seconds = time.perf_counter() - start
    return Run(seconds, len(played), server.calls, server.batches, *failures(played))


def bridge_installed() -> bool:
    return importlib.util.find_spec("selfplay.loops.verifiers") is not None


def bridge_client(policy: BatchingPolicy, new_tokens: int):
    """The bridge's ``PolicyClient`` (``loop: verifiers``) and its config, or None when that
    loop is not installed."""
    if not bridge_installed():
        return None
    from selfplay.loops.verifiers import bridge

    client = bridge.PolicyClient(  # request_for's later arguments (where the call sits) unused
        policy,
        lambda role, messages, cap, *_: engine_request(messages, min(cap or new_tokens,
                                                                     new_tokens)),
        lambda request, completion: None,
    )
    return client, client.config()


async def run_here(engine: Engine, spec: dict, episodes: int, new_tokens: int) -> Run:
    """Every episode at once in one ``BatchingPolicy.gather``, inside ``env.serving()``."""
    env = load_environment(resolve_env_config(spec))
    tasks = list(env.taskset.take(episodes))
    policy = BatchingPolicy(engine)
    found = bridge_client(policy, new_tokens)
    own = EngineClient(policy, new_tokens)
    with contextlib.ExitStack() as stack:
        client, config = found or (own, stack.enter_context(resolving(own)))
        ctx = vf.ModelContext(model="selfplay", client=config, sampling=vf.Sampling())
        start = time.perf_counter()
        async with env.serving():
            played = await policy.gather(env.run_episode(task, ctx) for task in tasks)
        seconds = time.perf_counter() - start
        if found:
            client.forget()
    return Run(seconds, len(played), policy.requests_served, policy.engine_calls,
               *failures(played))


def failures(played: list[vf.Episode]) -> tuple[int, str]:
    """How many episodes failed, and the first error among them."""
    failed = [e for e in played if not e.ok]
    errors = [x.message for e in failed for x in [*e.errors, *(y for t in e.traces
                                                                for y in t.errors)]]
    return len(failed), " ".join(errors[0].split())[:300] if errors else ""


async def measure(engine, spec, episodes, concurrency, new_tokens, repeats, folder):
    """(here runs, vf-eval runs), after one untimed warm-up of each."""
    async def side(name: str, count: int) -> Run:
        if engine.prefix_store is not None:  # neither side reuses the other's prefixes
            engine.prefix_store.clear()
        if name == "here":
            return await run_here(engine, spec, count, new_tokens)
        return await run_vf_eval(engine, spec, count, concurrency, new_tokens,
                                 Path(tempfile.mkdtemp(dir=folder)))

    for name in ("here", "vf-eval"):
        await side(name, WARMUP_EPISODES)
    runs: dict[str, list[Run]] = {"here": [], "vf-eval": []}
    for repeat in range(repeats):
        for name in (("here", "vf-eval") if repeat % 2 == 0 else ("vf-eval", "here")):
            runs[name].append(await side(name, episodes))
    return runs


def table(runs: dict[str, list[Run]], title: str) -> tuple[Table, float]:
    out = Table(title=title)
    for column in ("side", "episodes", "failed", "model calls", "engine batches",
                   "calls/batch", "seconds (median)", "episodes/s"):
        out.add_column(column, justify="right")
    rates = {}
    for name, side in runs.items():
        run = min(side, key=lambda r: abs(r.seconds - statistics.median(x.seconds for x in side)))
        rates[name] = run.rate
        out.add_row(name, str(run.episodes), str(run.failed), str(run.calls), str(run.batches),
                    f"{run.calls / max(run.batches, 1):.1f}", f"{run.seconds:.2f}",
                    f"{run.rate:.2f}")
    return out, rates["here"] / rates["vf-eval"]


def bench_verifiers(model: str = "embedded", env: str = "kuhn", episodes: int = 32,
                    concurrency: int = 32, new_tokens: int = 48, repeats: int = 2) -> float:
    """Print the table and the ratio here / vf-eval; returns the ratio."""
    from selfplay.engines.hf import HFEngine
    from selfplay.engines.models import resolve_model_path

    os.environ.setdefault(KEY_VAR, "selfplay")
    engine = HFEngine(resolve_model_path(model), max_batch_size=max(concurrency, 8))
    with tempfile.TemporaryDirectory() as folder:
        spec = env_spec(env, Path(folder), episodes)
        runs = asyncio.run(measure(engine, spec, episodes, concurrency, new_tokens, repeats,
                                   Path(folder)))
    bridge = "the bridge's PolicyClient" if bridge_installed() else "EngineClient (no bridge)"
    title = (f"{env} on {model}: {episodes} episodes, {new_tokens} new tokens, greedy; "
             f"here = {bridge}")
    out, ratio = table(runs, title)
    console = Console()
    console.print(out)
    console.print(f"here / vf-eval: {ratio:.2f}x episodes/s (goal: ≥ 0.90)")
    for name, side in runs.items():
        if any(run.failed for run in side):
            console.print(f"[red]{name}: episodes failed, the figures measure nothing: "
                          f"{next(run.error for run in side if run.failed)}[/red]")
    return ratio
