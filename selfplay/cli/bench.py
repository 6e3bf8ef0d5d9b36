"""``selfplay bench NAME [options]``: the benchmarks as a table.

One entry per benchmark (``BENCHMARKS``): the function that runs it (``selfplay.bench.*``,
imported only when it runs), its one-line help and the options it takes. The ``bench``
sub-parser and its ``--help`` are built from the table, and so is each benchmark's own parser
(``selfplay bench NAME --help``); ``selfplay bench NAME`` runs the entry it names. A name not in
the table, or an option its benchmark does not take, is one line and exit 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from selfplay.cli.parsing import OneLineParser
from selfplay.core.errors import UserError

Option = tuple[tuple[str, ...], dict]


def option(*flags: str, **settings) -> Option:
    """One ``add_argument`` call, for the benchmarks that take it."""
    return flags, settings


@dataclass(frozen=True)
class Benchmark:
    run: Callable[[argparse.Namespace], int | None]  # its parsed options → exit code (None: 0)
    help: str  # one line, shown by `selfplay bench --help`
    options: tuple[Option, ...] = ()

    def parser(self, name: str) -> argparse.ArgumentParser:
        parser = OneLineParser(prog=f"selfplay bench {name}", description=self.help)
        for flags, settings in self.options:
            parser.add_argument(*flags, **settings)
        return parser


# ---------------------------------------------------------------- each benchmark's call
def _engine(o) -> None:
    from selfplay.bench.engine import bench_engine

    bench_engine(backend=o.backend, prompts=o.prompts, new_tokens=o.new_tokens, model=o.model)


def _learner(o) -> None:
    if o.ranks > 1:
        from selfplay.bench.ranks import bench_ranks

        bench_ranks(model=o.model, ranks=o.ranks)
    else:
        from selfplay.bench.learner import bench_learner

        bench_learner(model=o.model, batch=o.batch, seq_len=o.seq_len)


def _sandbox(o) -> None:
    from selfplay.bench.sandbox import run_benchmark

    run_benchmark(calls=o.calls)


def _azr(o) -> None:
    from selfplay.bench.azr import bench_azr

    bench_azr(programs=o.programs, baseline=o.baseline)


def _step(o) -> None:
    from selfplay.bench.step import bench_prefix, bench_step

    # `bench step EXPERIMENT key=value ...`: the first word without `=` names the experiment
    # (--experiment still works)
    experiment, overrides = o.experiment, list(o.overrides)
    if overrides and "=" not in overrides[0]:
        experiment, overrides = overrides[0], overrides[1:]
    if o.compare == "async":
        bench_step(experiment, o.steps, o.staleness, overrides)
    elif o.compare == "trees":
        from selfplay.bench.trees import bench_trees

        bench_trees(experiment, o.steps, overrides, o.before)
    else:
        bench_prefix(experiment, o.steps, overrides)


def _oracle(o) -> int | None:
    if o.invalid:  # the random player's invalid-move endings over every offline id
        from selfplay.bench.oracle import main as oracle_main

        return oracle_main(["--invalid", f"--games={o.games}"])
    from selfplay.bench.oracle import bench_oracle

    bench_oracle(games=o.games)
    return None


def _openspiel(o) -> None:
    from selfplay.bench.openspiel import DEFAULT_IDS, bench_openspiel

    bench_openspiel(ids=tuple(o.ids or DEFAULT_IDS), games=o.games)


def _exploitability(o) -> None:
    from selfplay.bench.exploitability import bench_exploitability

    bench_exploitability(model=o.model, samples=o.samples, repeats=o.repeats)


def _corpus(o) -> None:
    from selfplay.bench.corpus import bench_corpus

    bench_corpus(vectors=o.vectors, queries=o.queries, texts=o.texts, batch_size=o.embed_batch,
                 indexes=o.indexes, data=o.data, spread=o.spread)


def _rewards(o) -> None:
    from selfplay.bench.rewards import bench_rewards

    bench_rewards(count=o.questions)


def _curriculum(o) -> None:
    from selfplay.bench.curriculum import bench_curriculum

    bench_curriculum(seeds=o.seeds, out=o.out, max_steps=o.max_steps)


def _sync(o) -> None:
    from selfplay.bench.sync import bench_sync

    bench_sync(model=o.model)


def _threads(o) -> None:
    from selfplay.bench.threads import bench_threads

    bench_threads()


def _verifiers(o) -> None:
    from selfplay.bench.verifiers import bench_verifiers

    bench_verifiers(model=o.model, env=o.env, episodes=o.episodes, concurrency=o.concurrency,
                    new_tokens=o.new_tokens, repeats=o.repeats)


def _gpu(o) -> None:
    from pathlib import Path

    from selfplay.bench.gpu import SHAPES, bench_gpu

    bench_gpu(tuple(o.shapes or SHAPES), Path(o.out))


def _peer(o) -> None:
    from selfplay.bench.peer import bench_peer

    bench_peer(experiment=o.experiment, steps=o.steps, overrides=o.overrides)


# ---------------------------------------------------------------- the table
MODEL = option("--model", default="embedded",
               help="a model path or hub id (default: embedded, SmolLM2-135M-Instruct)")
EXPERIMENT = option("--experiment", default="rlvr-sanity", help="the experiment to time")
OVERRIDES = option("overrides", nargs="*", metavar="key=value",
                   help="dotted overrides of the experiment")

BENCHMARKS: dict[str, Benchmark] = {
    "engine": Benchmark(_engine, "tokens/s of an engine against model.generate, and the roofline", (
        option("--backend", default="hf", choices=["hf", "vllm"]),
        MODEL,
        option("--prompts", type=int, default=32),
        option("--new-tokens", type=int, default=128),
    )),
    "learner": Benchmark(_learner, "train tokens/s and peak memory, chunked vs naive log-probs", (
        MODEL,
        option("--batch", type=int, default=16),
        option("--seq-len", type=int, default=256),
        option("--ranks", type=int, default=1,
               help="N FSDP2 ranks against one (memory and s/step)"),
    )),
    "gpu": Benchmark(_gpu, "the GPU path: hf engine, learner, FSDP2 on NCCL, DCP, sync + probe", (
        option("--shapes", nargs="*", help="model shapes (default: smollm2-135m qwen3-1.7b)"),
        option("--out", default="bench-gpu.jsonl", help="JSON lines, one per stage"),
    )),
    "sandbox": Benchmark(_sandbox, "a warm sandbox pool vs a fresh interpreter per call", (
        option("--calls", type=int, default=200),
    )),
    "azr": Benchmark(_azr, "AZR program checks/s: the warm sandbox pool vs a fresh process each", (
        option("--programs", type=int, default=200, help="programs through the pool"),
        option("--baseline", type=int, default=40, help="programs through fresh processes"),
    )),
    "step": Benchmark(_step, "where a step's time goes: prefix reuse off vs on, sync vs async, "
                      "or the learner's prefix trees (hands per minute)", (
        EXPERIMENT,
        option("--steps", type=int, default=6, help="steps per mode (first: warm-up)"),
        option("--staleness", type=int, default=1, help="async max staleness"),
        option("--compare", default="prefix", choices=["prefix", "async", "trees"],
               help="the engine's prefix reuse off vs on (default), sync vs async rollouts, "
                    "or the learner sharing repeated prompts only vs common prefixes"),
        option("--before", default=None, metavar="EXPERIMENT",
               help="--compare trees: also run this experiment as it ran before prefix trees "
                    "(e.g. spiral-kuhn-text-cpu) and compare hands per minute"),
        option("overrides", nargs="*", metavar="EXPERIMENT key=value",
               help="the experiment (instead of --experiment), then dotted overrides of it"),
    )),
    "oracle": Benchmark(_oracle, "the legal-move oracle's cost against one real move", (
        option("--games", type=int, default=3, help="random games per game id"),
        option("--invalid", action="store_true",
               help="the random player's invalid-move endings over every offline id"),
    )),
    "openspiel": Benchmark(_openspiel, "random games/s, the OpenSpiel adapter vs OpenSpiel alone", (
        option("--games", type=int, default=300, help="random games per way and game"),
        option("--ids", nargs="*", help="OpenSpiel game strings (default: six games)"),
    )),
    "exploitability": Benchmark(_exploitability,
                                "seconds per exploitability evaluation, sampled vs scored", (
        option("--model", default="embedded"),
        option("--samples", type=int, default=16, help="sampled replies per information state"),
        option("--repeats", type=int, default=2, help="interleaved rounds (median counts)"),
    )),
    "corpus": Benchmark(_corpus, "embedding throughput and FAISS index trade-offs", (
        option("--vectors", type=int, default=1_000_000, help="index size"),
        option("--queries", type=int, default=200, help="timed searches"),
        option("--texts", type=int, default=256, help="chunks to embed"),
        option("--embed-batch", type=int, help="batch size (default: settings)"),
        option("--indexes", default="ivf,hnsw", help="approximate indexes to time (ivf,hnsw)"),
        option("--data", default="clustered", help="clustered | uniform vectors"),
        option("--spread", type=float, default=3.0, help="clustered noise norm"),
    )),
    "rewards": Benchmark(_rewards, "the repetition penalty's BLEU clustering, ours vs NLTK's", (
        option("--questions", type=int, default=512, help="questions to cluster"),
    )),
    "curriculum": Benchmark(_curriculum, "every task sampler on a simulated student (no model)", (
        option("--seeds", type=int, default=5, help="students per sampler"),
        option("--max-steps", type=int, default=1500, help="step budget"),
        option("--out", default="runs/bench-curriculum", help="plot folder"),
    )),
    "sync": Benchmark(_sync, "seconds and bytes per weight sync for each transport", (MODEL,)),
    "threads": Benchmark(_threads, "OpenMP's wait policy on a quiet and on a busy machine"),
    "peer": Benchmark(_peer, "TRL's GRPOTrainer and our rlvr loop on the same work (needs TRL)", (
        EXPERIMENT,
        option("--steps", type=int, default=6, help="steps per side (first: warm-up)"),
        OVERRIDES,
    )),
    "verifiers": Benchmark(_verifiers,
                           "episodes/s of our verifiers envs run here vs by verifiers' vf-eval", (
        option("--model", default="embedded"),
        option("--env", default="kuhn", choices=("kuhn", "negotiation", "spice"),
               help="which environment"),
        option("--episodes", type=int, default=32, help="timed episodes per side"),
        option("--concurrency", type=int, default=32, help="vf-eval's max concurrent episodes"),
        option("--new-tokens", type=int, default=48, help="token budget of each reply"),
        option("--repeats", type=int, default=2, help="timed runs per side (median shown)"),
    )),
}


def add_parser(sub) -> argparse.ArgumentParser:
    """``selfplay bench``: NAME and the rest of the line, which NAME's own parser reads."""
    width = max(map(len, BENCHMARKS))
    listing = "\n".join(f"  {name:{width}}  {b.help}" for name, b in BENCHMARKS.items())
    bench = sub.add_parser(
        "bench",
        help="benchmarks with a baseline measured in the same run",
        description="Benchmarks, each printing a ratio against a baseline measured in the same "
        "run.",
        epilog=f"benchmarks:\n{listing}\n\n`selfplay bench NAME --help`: the options of one.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("name", metavar="NAME", help="one of: " + ", ".join(BENCHMARKS))
    rest = bench.add_argument("options", nargs=argparse.REMAINDER, metavar="...",
                              help="NAME's options (`selfplay bench NAME --help`)")
    rest.required = False  # none is fine; a missing NAME is the error (argparse says both)
    return bench


def parse(args: argparse.Namespace) -> tuple[Benchmark, argparse.Namespace]:
    """The benchmark ``selfplay bench NAME`` names and its options, parsed: an unknown name or a
    bad option stops here, before anything heavy is imported."""
    benchmark = BENCHMARKS.get(args.name)
    if benchmark is None:
        raise UserError(f"unknown bench {args.name!r}; choose one of: {', '.join(BENCHMARKS)}")
    return benchmark, benchmark.parser(args.name).parse_args(args.options)
