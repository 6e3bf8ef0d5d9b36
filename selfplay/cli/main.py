"""``selfplay`` command line: run, resume, list, bench (and more as loops land).

Bad input never shows a traceback: a ``UserError`` (or a role/game error) prints one line and
exits with code 2; so does a run its machine stopped (``RunStopped``: a full disk, a dead learner
rank). A run stopped by SIGINT or SIGTERM prints one line and exits with 128 + the signal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from selfplay.cli.parsing import OneLineParser
from selfplay.core.errors import RunInterrupted, UserError

# OpenMP threads that wait passively do not steal cores from the rest of the run (or the
# machine); libgomp reads this once, when torch is first imported, so it is set before any
# command imports torch, and inherited by Ray actors and learner ranks (docs/speed.md#threads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _quiet_libraries() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import warnings

    warnings.filterwarnings("ignore", message=".*should not be contained in the prefix.*")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def cmd_run(args) -> int:
    from selfplay.analysis.summary import print_summary
    from selfplay.loops import load_experiment
    from selfplay.running.runner import start

    config = load_experiment(args.experiment, args.overrides)
    _quiet_libraries()
    run_dir, rows = start(config)
    print_summary(run_dir, rows)
    return 0


def cmd_resume(args) -> int:
    from selfplay.analysis.summary import print_summary
    from selfplay.running.runner import resume

    run_dir = Path(args.run)
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist")
    _quiet_libraries()
    run_dir, rows = resume(run_dir, args.overrides)
    print_summary(run_dir, rows)
    return 0


def cmd_list(args) -> int:
    listing = _listing(args.what, (args.filter or "").lower())
    if args.json:
        print(json.dumps(listing, indent=1))
        return 0
    for section, rows in listing.items():
        if section == "games":
            print(f"games:  {'id':44s} {'legal moves':12s} {'invalid rate':13s} "
                  f"{'information':12s} random game (moves)")
            for row in rows:
                moves = row["random_moves"]
                print(f"  {row['id']:50s} {row['legal_moves']:12s} {row['invalid_rate']:13s} "
                      f"{row['information']:12s} {'-' if moves is None else moves}")
        elif section == "experiments":
            print("experiments:")
            for row in rows:
                print(f"  {row['name']:24s} {row['description']}")
        else:
            print("roles:")
            for name in rows:
                print(f"  {name}")
    return 0


def _listing(what: str, needle: str) -> dict[str, list]:
    """What ``selfplay list`` shows, names containing ``needle`` only (case-insensitive)."""
    from roles import list_roles
    from selfplay.config_files import find_experiment, list_experiments, read_yaml

    listing: dict[str, list] = {}
    if what in ("experiments", "all"):
        listing["experiments"] = [
            {"name": name, "description": read_yaml(find_experiment(name)).get("description", "")}
            for name in list_experiments()
            if needle in name.lower()
        ]
    if what in ("roles", "all"):
        listing["roles"] = [name for name in list_roles() if needle in name.lower()]
    if what in ("games", "all"):
        from games.registry import game_kind, legal_moves_summary, list_games

        listing["games"] = []
        for name in list_games():
            if needle in name.lower():
                legal, invalid = legal_moves_summary(name)
                information, moves = game_kind(name)
                listing["games"].append({
                    "id": name,
                    "legal_moves": legal,
                    "invalid_rate": invalid,
                    "information": information,  # perfect | imperfect | - (not known)
                    "random_moves": moves,  # mean moves of a random game (OpenSpiel), or None
                })
    return listing


def cmd_eval(args) -> int:
    from selfplay.running.runner import evaluate_run

    _quiet_libraries()
    evaluate_run(Path(args.run), args.overrides)
    return 0


def cmd_evaluate(args) -> int:
    if args.suite is None:  # the loop's own evaluation, as during training
        if args.overrides is None:
            args.overrides = []
        return cmd_eval(args)
    if args.overrides:
        raise UserError(f"evaluate --suite takes no overrides, got {args.overrides[0]!r}")
    from selfplay.evaluation.evaluate import evaluate, print_rows

    try:
        ks = tuple(int(k) for k in (args.k or "1,4,8").split(","))
    except ValueError as exc:
        raise UserError(f"--k {args.k!r}: give comma-separated integers, e.g. 1,4,8") from exc
    too_many = [k for k in ks if k > args.samples or k < 1]
    if args.k is not None and too_many:  # pass@k needs k of the n samples per problem
        raise UserError(f"--k {too_many[0]}: pass@k needs 1 <= k <= --samples ({args.samples})")
    _quiet_libraries()
    rows = evaluate(Path(args.run), args.suite, size=args.size, samples=args.samples, ks=ks,
                    tool=args.tool, step=args.step, temperature=args.temperature,
                    judge=Path(args.judge) if args.judge else None)
    return _show(rows, args.json, print_rows)


def cmd_plan(args) -> int:
    from selfplay.loops import load_experiment
    from selfplay.running.plan import plan, print_plan

    config = load_experiment(args.experiment, args.overrides)
    result = plan(config, args.gpus, args.gpu_memory, args.prompt_tokens)
    print_plan(result)
    return 0 if result.fits else 1


def cmd_export(args) -> int:
    from selfplay.evaluation.export import export

    _quiet_libraries()
    folders = export(Path(args.run), Path(args.out), step=args.step, merge=args.merge)
    for folder in folders:
        print(folder)
    return 0


def cmd_crossplay(args) -> int:
    from selfplay.evaluation.crossplay import crossplay

    _quiet_libraries()
    result, page = crossplay(Path(args.run), games=args.games, tasks=args.tasks,
                             samples=args.samples, max_snapshots=args.max_snapshots)
    steps = result["snapshots"]
    print(f"{result['kind']} cross-play of snapshots at steps {steps} (row vs column):")
    for step, row in zip(steps, result["matrix"], strict=True):
        print(f"  step {step:>6}: " + " ".join("   –  " if v is None else f"{v:6.3f}" for v in row))
    for rating in result.get("ratings", []):
        print(f"  {rating['snapshot']:>12}: ordinal {rating['ordinal']:7.2f} "
              f"(mu {rating['mu']:.2f}, sigma {rating['sigma']:.2f})")
    print(f"page: {page}")
    return 0


def cmd_strategy(args) -> int:
    from selfplay.evaluation.strategy import measure_run, print_strategy

    if args.average:  # the run's measured strategies: no model
        from selfplay.evaluation.average_strategy import average_run, print_average

        if args.scored or args.seed is not None:
            raise UserError("--average reads the strategies the run measured (strategies.jsonl); "
                            "--scored and --seed measure the model, which it does not ask")
        result = average_run(Path(args.run), args.game, step=args.step, state=args.state)
        return _show(result, args.json, print_average)
    _quiet_libraries()
    result = measure_run(Path(args.run), args.game, samples=args.samples, scored=args.scored,
                         step=args.step, state=args.state, seed=args.seed)
    return _show(result, args.json, print_strategy)


def _show(result, as_json: bool, show) -> int:
    """A command's result as one JSON line (``--json``) or for people; exit code 0."""
    if as_json:
        print(json.dumps(result))
    else:
        show(result)
    return 0


def cmd_play(args) -> int:
    from selfplay.cli.play import play

    _quiet_libraries()
    play(args.game, run=args.run, model=args.model, seat=args.seat, seed=args.seed)
    return 0


def cmd_analyze(args) -> int:
    from selfplay.analysis.report import analyze
    from selfplay.analysis.rundata import RunData
    from selfplay.analysis.summary import print_summary
    from selfplay.analysis.sweepdata import is_sweep

    if any(is_sweep(r) for r in args.runs):
        from selfplay.analysis.sweep_page import analyze_command

        return analyze_command(args.runs, args.out, pngs=not args.no_png)
    pages = analyze(
        [Path(r) for r in args.runs],
        Path(args.out) if args.out else None,
        embeddings=not args.no_embeddings,
        pngs=not args.no_png,
    )
    for run in args.runs:
        print_summary(Path(run), RunData.open(run).metrics, report=False)
    for page in pages:
        print(f"report: {page}")
    return 0


def cmd_sweep(args) -> int:
    from selfplay.running.sweep import print_entries, sweep

    _quiet_libraries()
    measures = _sweep_suite(args)
    sweep_dir, entries = sweep(
        args.experiment, args.overrides, args.grid, args.seeds,
        Path(args.out) if args.out else None, Path(args.resume) if args.resume else None,
        args.ray, args.cpus_per_run, args.gpus_per_run,
    )
    print_entries(sweep_dir, entries)
    if measures is not None:
        from selfplay.analysis.sweep_page import analyze_sweep
        from selfplay.evaluation.sweep_heldout import evaluate_sweep

        print(f"held-out: {evaluate_sweep(sweep_dir, measures)}")
        print(f"sweep page: {analyze_sweep(sweep_dir, pngs=False)}")
    return 0 if all(e["status"] == "finished" for e in entries) else 1


def _sweep_suite(args):
    """``--suite``: the held-out measures, checked before any run (a bad suite: one line)."""
    if args.suite is None:
        return None
    from selfplay.analysis.sweepdata import read_manifest
    from selfplay.evaluation.heldout import Measures
    from selfplay.evaluation.sweep_heldout import check_suite
    from selfplay.loops import load_experiment

    measures = Measures(args.suite, args.suite_size, args.samples, args.eval_tokens,
                        not args.no_likelihood)
    if args.resume:
        manifest = read_manifest(Path(args.resume))
        config = load_experiment(manifest["experiment"], [*manifest["overrides"], "seed=0"])
    elif args.experiment:
        config = load_experiment(args.experiment, [*args.overrides, "seed=0"])
    else:
        return measures  # sweep() says what is missing
    check_suite(measures, config)
    return measures


def cmd_compare(args) -> int:
    from selfplay.evaluation.compare import CompareSpec, PowerAsk, compare
    from selfplay.evaluation.compare_plan import plan

    _quiet_libraries()
    spec = CompareSpec(tuple(args.experiments), args.seeds, args.budget, args.suite,
                       args.suite_size, args.samples, args.first_seed, args.eval_tokens,
                       tuple(args.set), args.points, not args.no_likelihood, args.curve_size)
    power = PowerAsk(args.mde, args.flip_rate, args.base_accuracy)
    if args.plan:
        if args.out:
            raise UserError("--plan runs nothing and writes no folder: give no --out")
        result = plan(spec, power, Path(args.costs) if args.costs else None, args.hours)
        print("\n".join(result.lines))
        return 0
    if args.costs or args.hours is not None:
        raise UserError("--costs and --hours belong to --plan")
    folder = compare(spec, Path(args.out) if args.out else None, power=power)
    print(f"compare: {folder / 'results.md'}, page {folder / 'report' / 'index.html'}")
    return 0


def cmd_corpus(args) -> int:
    import selfplay.cli.corpus as corpus_cli

    _quiet_libraries()
    return corpus_cli.run(args)


def cmd_bench(args) -> int:
    from selfplay.cli.bench import parse

    benchmark, options = parse(args)  # an unknown name or option: one line, nothing imported
    _quiet_libraries()
    return benchmark.run(options) or 0


def parser() -> argparse.ArgumentParser:
    top = OneLineParser(prog="selfplay", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a named experiment (or a YAML path)")
    run.add_argument("experiment")
    run.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=1e-5")
    run.set_defaults(func=cmd_run)

    res = sub.add_parser("resume", help="continue a run from its last checkpoint")
    res.add_argument("run")
    res.add_argument("overrides", nargs="*",
                     help="e.g. train.parallel.ranks=1 (a learner resumes on any rank count)")
    res.set_defaults(func=cmd_resume)

    pln = sub.add_parser("plan", help="memory per device of an experiment, and whether it fits")
    pln.add_argument("experiment")
    pln.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.parallel.ranks=8")
    pln.add_argument("--gpus", type=int, help="plan for this many GPUs (default: this machine)")
    pln.add_argument("--gpu-memory", type=float, help="GiB per GPU (default: 80, or as seen)")
    pln.add_argument("--prompt-tokens", type=int, default=512, help="prompt length per sequence")
    pln.set_defaults(func=cmd_plan)

    exp = sub.add_parser("export", help="a run's policy as a Hugging Face folder")
    exp.add_argument("run")
    exp.add_argument("--out", required=True, help="the folder to write")
    exp.add_argument("--step", type=int, help="a saved or archived step (default: the latest)")
    exp.add_argument("--merge", action="store_true",
                     help="merge LoRA into the base weights (one folder per adapter)")
    exp.set_defaults(func=cmd_export)

    lst = sub.add_parser("list", help="list experiments, roles and games")
    lst.add_argument(
        "what", nargs="?", default="all", choices=["all", "experiments", "roles", "games"]
    )
    lst.add_argument("--filter", help="only names containing this text (case-insensitive)")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    lst.set_defaults(func=cmd_list)

    ev = sub.add_parser(
        "eval", help="the same as `evaluate RUN` without --suite (kept for older scripts)"
    )
    ev.add_argument("run")
    ev.add_argument("overrides", nargs="*", help="e.g. spiral.eval_games=32")
    ev.set_defaults(func=cmd_eval)

    ho = sub.add_parser(
        "evaluate",
        help="evaluate a saved run: the loop's own evaluation (as in training), or with --suite "
        "held-out suites (greedy, sampled pass@k, with and without the tool)",
    )
    ho.add_argument("run")
    ho.add_argument("overrides", nargs="*", help="without --suite: e.g. spiral.eval_games=32")
    ho.add_argument("--suite",
                    help="reasoning-gym | rg:<family>[,...] | FILE.jsonl | hf:<dataset>[@split]")
    ho.add_argument("--size", type=int, default=32, help="problems (at most)")
    ho.add_argument("--samples", type=int, default=8, help="sampled answers per problem (n)")
    ho.add_argument("--json", action="store_true", help="the result rows as JSON")
    ho.add_argument("--k", help="pass@k for these k, each ≤ --samples (default: 1,4,8 up to it)")
    ho.add_argument("--tool", action="store_true", help="also evaluate with the Python tool")
    ho.add_argument("--step", type=int, help="a saved or archived step (default: the latest)")
    ho.add_argument("--temperature", type=float, default=1.0)
    ho.add_argument("--judge", metavar="CALIBRATION.jsonl",
                    help="also judge the greedy answers with the model, bias-corrected with this "
                    "labelled set (question, reference, response, label)")
    ho.set_defaults(func=cmd_evaluate)

    cp = sub.add_parser("crossplay", help="a run's snapshots against each other")
    cp.add_argument("run")
    cp.add_argument("--games", type=int, default=8, help="games: games per pair of snapshots")
    cp.add_argument("--tasks", type=int, default=16, help="solver loops: questions per snapshot")
    cp.add_argument("--samples", type=int, default=4, help="solver loops: answers per question")
    cp.add_argument("--max-snapshots", type=int, default=8, help="evenly spaced, first and last")
    cp.set_defaults(func=cmd_crossplay)

    st = sub.add_parser("strategy", help="a game run's action distribution at every "
                        "information state, and its exploitability")
    st.add_argument("run")
    st.add_argument("--game", help="openspiel:kuhn_poker, openspiel:leduc_poker (default: the "
                    "run's game, if it has an exact best response)")
    st.add_argument("--samples", type=int, default=16, help="sampled replies per state")
    st.add_argument("--scored", action="store_true",
                    help="the probability of each move's reply instead of sampling")
    st.add_argument("--state", help="only this information state (e.g. 1b)")
    st.add_argument("--step", type=int, help="a saved step (default: the latest)")
    st.add_argument("--seed", type=int, help="the sampler's seed (default: the run's)")
    st.add_argument("--average", action="store_true",
                    help="the average of the strategies the run's evaluations measured "
                    "(strategies.jsonl; with --step: those up to it), no model asked")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_strategy)

    pl = sub.add_parser("play", help="play a game against a model in the terminal")
    pl.add_argument("game", help="a game id, e.g. kuhn_poker or textarena:Nim-v0")
    pl.add_argument("--run", help="a run folder: play its latest checkpoint")
    pl.add_argument("--model", default="embedded")
    pl.add_argument("--seat", type=int, default=0, choices=[0, 1])
    pl.add_argument("--seed", type=int)
    pl.set_defaults(func=cmd_play)

    an = sub.add_parser(
        "analyze", help="analysis pages of runs (difficulty, diversity, games, compute curve)"
    )
    an.add_argument("runs", nargs="+", metavar="RUN", help="run folders; two or more: compared")
    an.add_argument("--out", help="folder of the comparison page (default: next to the first run)")
    an.add_argument("--no-embeddings", action="store_true",
                    help="skip the MiniLM embeddings (dispersion, clusters, near-duplicates)")
    an.add_argument("--no-png", action="store_true", help="only the HTML page, no PNG files")
    an.set_defaults(func=cmd_analyze)

    sw = sub.add_parser("sweep", help="a grid of configs x seeds as run folders under one sweep "
                        "folder (docs/sweeps.md)")
    sw.add_argument("experiment", nargs="?", help="a named experiment or a YAML path")
    sw.add_argument("overrides", nargs="*", help="dotted overrides for every run")
    sw.add_argument("--seeds", type=int, help="runs per arm, with seed = 0..N-1")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="values of one config key (repeat for more keys: every combination)")
    sw.add_argument("--out", help="the sweep folder (default: runs/<name>-sweep-<time>)")
    sw.add_argument("--resume", metavar="SWEEP", help="finish the unfinished runs of a sweep")
    sw.add_argument("--ray", metavar="ADDRESS",
                    help="runs as parallel Ray tasks: auto | host:port | local")
    sw.add_argument("--cpus-per-run", type=float, default=1.0, help="Ray: CPUs each run holds")
    sw.add_argument("--gpus-per-run", type=float,
                    help="Ray: GPUs each run holds (default: 1 if the cluster has GPUs, else 0)")
    sw.add_argument("--suite", help="after the runs, evaluate each run's base model and final "
                    "policy on this held-out suite, paired (compare, rg:<family>,..., a .jsonl)")
    sw.add_argument("--suite-size", type=int, default=720, help="--suite: problems")
    sw.add_argument("--samples", type=int, default=0,
                    help="--suite: sampled answers a problem besides the greedy one (pass@k)")
    sw.add_argument("--eval-tokens", type=int, default=16, help="--suite: max new tokens")
    sw.add_argument("--no-likelihood", action="store_true",
                    help="--suite: leave out the reference answer's log-probability")
    sw.set_defaults(func=cmd_sweep)

    cp = sub.add_parser("compare", help="every experiment at equal generated tokens, evaluated "
                        "on one held-out suite (docs/compare.md)")
    cp.add_argument("experiments", nargs="+", metavar="EXPERIMENT",
                    help="named experiments or YAML paths")
    cp.add_argument("--seeds", type=int, required=True, help="runs per experiment")
    cp.add_argument("--budget", type=int, required=True, metavar="TOKENS",
                    help="generated tokens per run (train.token_budget)")
    cp.add_argument("--suite", default="compare",
                    help="held-out suite: compare (default), rg:<family>,..., a .jsonl, hf:<set>")
    cp.add_argument("--suite-size", type=int, default=720,
                    help="problems in the suite (default 720: MDE 0.05 at flip rate 0.23)")
    cp.add_argument("--samples", type=int, default=0,
                    help="sampled answers per problem besides the greedy one, for pass@k "
                    "(default 0: greedy and the reference's likelihood only)")
    cp.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. +N-1")
    cp.add_argument("--eval-tokens", type=int, default=16,
                    help="max new tokens of every evaluation answer (the same for every loop)")
    cp.add_argument("--points", type=int, default=4,
                    help="evaluations along each run's budget, the final one included (>= 3)")
    cp.add_argument("--curve-size", type=int, default=160,
                    help="problems the points before the last answer (the first of each family; "
                    "default 160); the last point and the base model answer the whole suite")
    cp.add_argument("--no-likelihood", action="store_true",
                    help="leave out the reference answer's log-probability")
    cp.add_argument("--plan", action="store_true",
                    help="print the MDE and the CPU time the comparison will take; run nothing")
    cp.add_argument("--mde", type=float,
                    help="the gain the comparison must detect: a suite too small is refused")
    cp.add_argument("--flip-rate", type=float,
                    help="share of answers that change, for the MDE (default: from a phi "
                    "correlation of 0.5 at the base accuracy)")
    cp.add_argument("--base-accuracy", type=float,
                    help="--plan: the base model's accuracy (default: measured on a pilot)")
    cp.add_argument("--costs", metavar="COMPARE",
                    help="--plan: take run and evaluation costs from a finished comparison")
    cp.add_argument("--hours", type=float,
                    help="--plan: also print the largest budget that fits this many CPU hours")
    cp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every run, e.g. train.steps=100, or for one "
                    "experiment's: EXPERIMENT:spiral.eval_games=0 (repeat for more)")
    cp.add_argument("--out", help="the comparison folder (default: runs/compare-<time>); the "
                    "same command with the same --out finishes what is unfinished")
    cp.set_defaults(func=cmd_compare)

    from selfplay.cli.corpus import add_parser as add_corpus_parser

    add_corpus_parser(sub).set_defaults(func=cmd_corpus)

    from selfplay.cli.bench import add_parser as add_bench_parser

    add_bench_parser(sub).set_defaults(func=cmd_bench)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if _learner_rank_under_torchrun(args):
            from selfplay.training.placement import serve_rank

            return serve_rank()
        return args.func(args)
    except UserError as exc:
        print(f"selfplay: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early
        return 0
    except RunInterrupted as exc:  # SIGINT/SIGTERM: the run stopped at the end of a stage
        print(f"selfplay: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("selfplay: interrupted; `selfplay resume RUN` continues", file=sys.stderr)
        return 130
    except Exception as exc:  # known input errors from the leaf packages
        if type(exc).__name__ in ("RolePromptError", "UnknownGameError", "UnplayableGameError"):
            print(f"selfplay: error: {exc}", file=sys.stderr)
            return 2
        raise


def _learner_rank_under_torchrun(args) -> bool:
    """``torchrun --nproc-per-node N -m selfplay run|resume ...``: rank 0 runs the command, the
    other ranks serve it as learner ranks (docs/scale.md)."""
    from selfplay.training.placement import launched_by_torchrun, torchrun_rank

    return args.func in (cmd_run, cmd_resume) and launched_by_torchrun() and torchrun_rank() > 0


if __name__ == "__main__":
    sys.exit(main())
