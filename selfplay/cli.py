"""``selfplay`` command line: run, resume, list, bench (and more as loops land).

Bad input never shows a traceback: a ``UserError`` (or a role/game error) prints one line and
exits with code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from selfplay.errors import UserError


def _quiet_libraries() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import warnings

    warnings.filterwarnings("ignore", message=".*should not be contained in the prefix.*")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def cmd_run(args) -> int:
    from selfplay.config import load_experiment
    from selfplay.runner import start
    from selfplay.summary import print_summary

    config = load_experiment(args.experiment, args.overrides)
    _quiet_libraries()
    run_dir, rows = start(config)
    print_summary(run_dir, rows)
    return 0


def cmd_resume(args) -> int:
    from selfplay.runner import resume
    from selfplay.summary import print_summary

    run_dir = Path(args.run)
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist")
    _quiet_libraries()
    run_dir, rows = resume(run_dir)
    print_summary(run_dir, rows)
    return 0


def cmd_list(args) -> int:
    from roles import list_roles
    from selfplay.config import find_experiment, list_experiments, read_yaml

    what = args.what
    if what in ("experiments", "all"):
        print("experiments:")
        for name in list_experiments():
            description = read_yaml(find_experiment(name)).get("description", "")
            print(f"  {name:24s} {description}")
    if what in ("roles", "all"):
        print("roles:")
        for name in list_roles():
            print(f"  {name}")
    if what in ("games", "all"):
        try:
            from games import list_games
        except ImportError:
            list_games = lambda: []  # noqa: E731
        print("games:")
        for name in list_games():
            print(f"  {name}")
    return 0


def cmd_eval(args) -> int:
    from selfplay.runner import evaluate_run

    _quiet_libraries()
    evaluate_run(Path(args.run), args.overrides)
    return 0


def cmd_play(args) -> int:
    from selfplay.play import play

    _quiet_libraries()
    play(args.game, run=args.run, model=args.model, seat=args.seat, seed=args.seed)
    return 0


def cmd_analyze(args) -> int:
    from selfplay.report import write_report
    from selfplay.summary import print_summary
    from selfplay.tracking import read_metrics

    run_dir = Path(args.run)
    rows = read_metrics(run_dir)
    if not rows:
        raise UserError(f"{run_dir} has no metrics.jsonl rows")
    print_summary(run_dir, rows)
    print(f"report: {write_report(run_dir, rows)}/index.html")
    return 0


def cmd_corpus(args) -> int:
    from selfplay import corpus_cli

    _quiet_libraries()
    return corpus_cli.run(args)


def cmd_bench(args) -> int:
    _quiet_libraries()
    if args.what == "corpus":
        from selfplay.bench.corpus import bench_corpus

        bench_corpus(
            vectors=args.vectors,
            queries=args.queries,
            texts=args.texts,
            batch_size=args.embed_batch,
            indexes=args.indexes,
            data=args.data,
            spread=args.spread,
        )
    elif args.what == "engine":
        from selfplay.bench.engine import bench_engine

        bench_engine(
            backend=args.backend, prompts=args.prompts, new_tokens=args.new_tokens, model=args.model
        )
    elif args.what == "learner":
        from selfplay.bench.learner import bench_learner

        bench_learner(model=args.model, batch=args.batch, seq_len=args.seq_len)
    elif args.what == "sandbox":
        from sandbox.bench import run_benchmark

        run_benchmark(calls=args.calls)
    elif args.what == "rewards":
        from selfplay.bench.rewards import bench_rewards

        bench_rewards(count=args.questions)
    elif args.what == "step":
        from selfplay.bench.step import bench_step

        bench_step(
            experiment=args.experiment,
            steps=args.steps,
            staleness=args.staleness,
            overrides=args.overrides,
        )
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="selfplay", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a named experiment (or a YAML path)")
    run.add_argument("experiment")
    run.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=1e-5")
    run.set_defaults(func=cmd_run)

    res = sub.add_parser("resume", help="continue a run from its last checkpoint")
    res.add_argument("run")
    res.set_defaults(func=cmd_resume)

    lst = sub.add_parser("list", help="list experiments, roles and games")
    lst.add_argument(
        "what", nargs="?", default="all", choices=["all", "experiments", "roles", "games"]
    )
    lst.set_defaults(func=cmd_list)

    ev = sub.add_parser("eval", help="evaluate a saved run (same evaluation as in training)")
    ev.add_argument("run")
    ev.add_argument("overrides", nargs="*", help="e.g. spiral.eval_games=32")
    ev.set_defaults(func=cmd_eval)

    pl = sub.add_parser("play", help="play a game against a model in the terminal")
    pl.add_argument("game", help="a game id, e.g. kuhn_poker or textarena:Nim-v0")
    pl.add_argument("--run", help="a run folder: play its latest checkpoint")
    pl.add_argument("--model", default="embedded")
    pl.add_argument("--seat", type=int, default=0, choices=[0, 1])
    pl.add_argument("--seed", type=int)
    pl.set_defaults(func=cmd_play)

    an = sub.add_parser("analyze", help="summary table, plots and HTML report of a run")
    an.add_argument("run")
    an.set_defaults(func=cmd_analyze)

    from selfplay.corpus_cli import add_parser as add_corpus_parser

    add_corpus_parser(sub).set_defaults(func=cmd_corpus)

    bench = sub.add_parser("bench", help="benchmarks with a baseline measured in the same run")
    bench.add_argument(
        "what", choices=["engine", "learner", "sandbox", "step", "corpus", "rewards"]
    )
    bench.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    bench.add_argument("--model", default="embedded")
    bench.add_argument("--prompts", type=int, default=32)
    bench.add_argument("--new-tokens", type=int, default=128)
    bench.add_argument("--batch", type=int, default=16)
    bench.add_argument("--seq-len", type=int, default=256)
    bench.add_argument("--calls", type=int, default=200)
    bench.add_argument("--questions", type=int, default=512, help="rewards: questions to cluster")
    bench.add_argument("--experiment", default="rlvr-sanity", help="step: the experiment to time")
    bench.add_argument("--steps", type=int, default=6, help="step: steps per mode (first: warm-up)")
    bench.add_argument("--staleness", type=int, default=1, help="step: async max staleness")
    bench.add_argument("--vectors", type=int, default=1_000_000, help="corpus: index size")
    bench.add_argument("--queries", type=int, default=200, help="corpus: timed searches")
    bench.add_argument("--texts", type=int, default=256, help="corpus: chunks to embed")
    bench.add_argument("--embed-batch", type=int, help="corpus: batch size (default: settings)")
    bench.add_argument(
        "--indexes", default="ivf,hnsw", help="corpus: approximate indexes to time (ivf,hnsw)"
    )
    bench.add_argument("--data", default="clustered", help="corpus: clustered | uniform vectors")
    bench.add_argument("--spread", type=float, default=3.0, help="corpus: clustered noise norm")
    bench.add_argument("overrides", nargs="*", help="step: key=value overrides of the experiment")
    bench.set_defaults(func=cmd_bench)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"selfplay: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early
        return 0
    except KeyboardInterrupt:
        print("selfplay: interrupted; `selfplay resume RUN` continues", file=sys.stderr)
        return 130
    except Exception as exc:  # known input errors from the leaf packages
        if type(exc).__name__ in ("RolePromptError", "UnknownGameError"):
            print(f"selfplay: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
