"""``selfplay compare`` (docs/compare.md) on the tiny random model: two experiments (rlvr and
SPIRAL with its exploitability) × 2 seeds under one token budget, evaluated on a 6-problem suite
at 3 points of the budget (the points before the last on its first 3 problems), greedy + 2
samples + the reference's likelihood.

- its table holds, per experiment, what the run folders wrote (tokens, steps, the curve's points
  at the steps the budget's thirds were reached, the exploitability before and after);
- the base model is evaluated once per (model, suite, seed) and reused by both experiments;
- the gain, its interval and its MDE are ``paired_gain`` of planted per-problem records, and
  the difference from the first experiment pairs final with final on the same seeds;
- a re-invocation skips finished runs and evaluations and redoes only a missing one;
- bad input (an unknown experiment, a fully fine-tuned one, fewer than 3 curve points, a suite
  too small for --mde, a suite without reference answers, --plan of an unknown experiment) is
  one line, exit 2, no folder;
- --plan prints the MDE of the suite and the CPU time;
- the page opens in headless Chromium with its two plots and without an error.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from selfplay.cli.main import main
from selfplay.evaluation.compare import EVALUATIONS, CompareSpec, compare
from selfplay.evaluation.compare_page import curve_points, exploitability, fit, summarize
from selfplay.stats.paired import paired_gain
from selfplay.stats.power import mcnemar_mde
from tests.conftest import tiny_config

# tokens: rlvr spends 36 a step (2 prompts x 3 samples x 6; the random model rarely stops
# early), so it passes the budget's thirds (33, 67, 100) at steps 0, 1, 2; SPIRAL spends 12 a
# step (2 games x 6) and stops at train.steps = 6 (72 tokens): budget not reached, 2 points
BUDGET = 100
SUITE = "rg:chain_sum"


def experiments(folder: Path) -> list[str]:
    rlvr = tiny_config(folder, name="tiny-rlvr", train={"steps": 4, "lr": 5e-2})
    rlvr["rlvr"]["eval_size"] = 0
    spiral = tiny_config(folder, name="tiny-spiral", train={"steps": 6, "lr": 5e-2})
    del spiral["rlvr"]
    kuhn = {"id": "kuhn_poker", "kwargs": {"rounds": 1}}
    spiral |= {"loop": "spiral", "roles": {"player": {"prompt": "player"}},
               "advantage": {"estimator": "rae"},
               "spiral": {"games": [kuhn], "games_per_step": 2, "eval_games": 0,
                          "lenient": True, "eval_exploitability": [kuhn],
                          "exploitability_samples": 2}}
    paths = []
    for data in (rlvr, spiral):
        path = folder / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data))
        paths.append(str(path))
    return paths


def spec(paths: list[str], **changes) -> CompareSpec:
    return CompareSpec(tuple(paths), seeds=2, budget=BUDGET, suite=SUITE, suite_size=6,
                       samples=2, points=3, curve_size=3, **changes)


@pytest.fixture(scope="module")
def compared(tmp_path_factory, tiny_model_path):
    folder = tmp_path_factory.mktemp("compare")
    paths = experiments(folder)
    with pytest.MonkeyPatch.context() as patch:  # each run's own page: not under test here
        patch.setattr("selfplay.running.runner.write_report", lambda *args, **kwargs: None)
        out = compare(spec(paths), folder / "out", processes=False)
    return paths, out


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_the_table_holds_what_the_run_folders_wrote(compared):
    _, out = compared
    table = json.loads((out / "results.json").read_text())
    assert [r["experiment"] for r in table] == ["tiny-rlvr", "tiny-spiral"]
    assert [r["loop"] for r in table] == ["rlvr", "spiral"]
    evaluations = rows(out / EVALUATIONS)
    for row, steps_expected, reached in ((table[0], [1, 2, 3], "2/2"), (table[1], [3, 6], "0/2")):
        assert row["seeds"] == "2/2" and row["budget_reached"] == reached
        for seed, per_seed in zip((0, 1), row["per_seed"], strict=True):
            run_dir = out / row["experiment"] / f"base-seed{seed}"
            metrics = [m for m in rows(run_dir / "metrics.jsonl") if not m.get("final")]
            totals = [m["rollout/tokens_total"] for m in metrics]
            # the points: after the first step reaching 1/3, 2/3 of the budget, and the last
            points = [p["step"] for p in curve_points(run_dir, BUDGET, 3)]
            assert points == steps_expected
            for step in points:
                assert totals[step - 1] == [p["tokens"] for p in per_seed["curve"]
                                            if p["step"] == step][0]
            evaluated = sorted((e["step"], e["problems"]) for e in evaluations
                               if e["which"] == "point" and e["folder"] == f"base-seed{seed}"
                               and e["experiment"] == row["experiment"])
            # the last point on the whole suite, the earlier ones on its first 3 problems
            assert evaluated == [(p, 3) for p in points[:-1]] + [(points[-1], 6)]
            assert all(p["problems"] == 3 for p in per_seed["curve"])
            # archived weights: only the points' are kept once evaluated
            archive = sorted(int(p.name[5:]) for p in (run_dir / "checkpoints" / "archive")
                             .iterdir())
            assert archive == points
            assert per_seed["tokens"] == totals[-1] and per_seed["steps"] == len(totals)
        assert row["run_cpu_seconds"] > 0 and row["eval_cpu_seconds"] > 0
        assert row["validity"] is None and row["difficulty"] is None  # no tasks.jsonl: null
    assert table[0]["trained_on_suite"] == ["chain_sum"]  # trained on it, kept, and said so
    # SPIRAL's own measure: its exploitability before the first step and at the end
    game = table[1]["exploitability"]["kuhn_poker"]
    for seed in (0, 1):
        metrics = rows(out / "tiny-spiral" / f"base-seed{seed}" / "metrics.jsonl")
        values = [m["eval/exploitability/kuhn_poker"] for m in metrics
                  if "eval/exploitability/kuhn_poker" in m]
        assert table[1]["per_seed"][seed]["exploitability"]["kuhn_poker"] == {
            "before": values[0], "after": values[-1]}
    assert game["after"]["mean"] == pytest.approx(
        sum(s["exploitability"]["kuhn_poker"]["after"] for s in table[1]["per_seed"]) / 2,
        abs=1e-12)
    assert table[0]["exploitability"] == {}
    # 2 points a SPIRAL run: no fit, and the table says why; rlvr's 3 points: no fit either
    assert table[1]["fit"]["why"].startswith("no fit: 2 point(s)")
    markdown = (out / "results.md").read_text()
    assert markdown.count("\n") == 2 + 2 and "| tiny-rlvr | rlvr | 2/2 |" in markdown
    assert "kuhn_poker: " in markdown and "no fit" in markdown
    assert (out / "report" / "gain.png").stat().st_size > 1000
    assert (out / "report" / "curves.png").stat().st_size > 1000


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_the_base_model_is_evaluated_once_per_model_suite_and_seed(compared):
    """Both experiments use the tiny model on the same engine: their seed-k runs share one
    base evaluation (sampled answers depend on the seed, so one per seed, not one in all)."""
    _, out = compared
    bases = [e for e in rows(out / EVALUATIONS) if e["which"] == "base"]
    assert sorted(e["seed"] for e in bases) == [0, 1]
    points = [e for e in rows(out / EVALUATIONS) if e["which"] == "point"]
    assert {e["key"] for e in points} == {e["key"] for e in bases}
    records = rows(out / bases[0]["records"])
    assert [(r["index"], r["id"]) for r in records] == [(i, f"chain_sum/{i}") for i in range(6)]
    assert all({"greedy", "n", "c", "logprob", "reference_tokens"} <= set(r) for r in records)
    assert all(r["n"] == 2 and r["logprob"] < 0 for r in records)
    table = json.loads((out / "results.json").read_text())
    # the base point of every seed's curve is that seed's shared base evaluation, read on the
    # 3 problems every point answered
    for row in table:
        for per_seed in row["per_seed"]:
            base = rows(out / next(b for b in bases if b["seed"] == per_seed["seed"])["records"])
            assert per_seed["curve"][0] == pytest.approx({
                "step": 0, "tokens": 0.0, "problems": 3,
                "greedy": sum(r["greedy"] for r in base[:3]) / 3,
                "logprob": sum(r["logprob"] for r in base[:3]) / 3,
                "pass@1": sum(r["c"] / 2 for r in base[:3]) / 3,
                "pass@2": sum(r["c"] > 0 for r in base[:3]) / 3})


def plant(copy: Path, greedy: dict[str, list[int]], logprob: dict[str, list[float]]) -> None:
    """Replace the records of the base models (``base/seed<k>``) and of every point of a run
    (``<experiment>/<folder>``): problem i's planted values, for the problems it answered."""
    for row in rows(copy / EVALUATIONS):
        name = (f"base/seed{row['seed']}" if row["which"] == "base"
                else f"{row['experiment']}/{row['folder']}")
        records = rows(copy / row["records"])  # a point before the last: the first 3 problems
        for record in records:
            i = record["index"]
            record["greedy"], record["logprob"] = greedy[name][i], logprob[name][i]
        (copy / row["records"]).write_text("".join(json.dumps(r) + "\n" for r in records))


def test_gain_interval_and_mde_are_the_paired_analysis_of_planted_records(compared, tmp_path):
    _, out = compared
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    base = {"base/seed0": [0, 0, 1, 0, 0, 0], "base/seed1": [0, 0, 1, 0, 0, 0]}
    final = {"tiny-rlvr/base-seed0": [1, 0, 1, 0, 0, 0],
             "tiny-rlvr/base-seed1": [1, 1, 1, 0, 0, 1],
             "tiny-spiral/base-seed0": [0, 0, 0, 0, 0, 0],
             "tiny-spiral/base-seed1": [1, 0, 1, 0, 0, 0]}
    logprob = {name: [-1.0 - 0.1 * i - 0.5 * g for i, g in enumerate(v)]
               for name, v in (base | final).items()}
    plant(copy, base | final, logprob)  # every point of a run gets the final's records
    table = summarize(copy)
    rlvr, spiral = table
    expected = paired_gain([base["base/seed0"], base["base/seed1"]],
                           [final["tiny-rlvr/base-seed0"], final["tiny-rlvr/base-seed1"]])
    assert rlvr["gain_greedy"] == pytest.approx(expected.as_dict())
    # by hand: differences [1,0,0,0,0,0] and [1,1,0,0,0,1]: mean 4/12, 4 flips of 12 pairs
    assert rlvr["gain_greedy"]["gain"] == pytest.approx(4 / 12, abs=1e-12)
    assert rlvr["flip_rate"] == pytest.approx(4 / 12) and rlvr["mde_greedy"] == expected.mde
    assert rlvr["mde_greedy"] >= mcnemar_mde(12, 0.0)  # never below what 12 pairs can show
    lp = paired_gain([logprob["base/seed0"], logprob["base/seed1"]],
                     [logprob["tiny-rlvr/base-seed0"], logprob["tiny-rlvr/base-seed1"]])
    assert rlvr["gain_logprob"]["gain"] == pytest.approx(lp.gain, abs=1e-12)
    assert rlvr["gain_logprob"]["gain"] == pytest.approx(-0.5 * 4 / 12, abs=1e-12)
    # SPIRAL − rlvr, final against final on seeds 0 and 1
    versus = paired_gain([final["tiny-rlvr/base-seed0"], final["tiny-rlvr/base-seed1"]],
                         [final["tiny-spiral/base-seed0"], final["tiny-spiral/base-seed1"]])
    assert spiral["vs_first"] == pytest.approx(versus.as_dict())
    assert spiral["vs_first"]["gain"] == pytest.approx(-4 / 12, abs=1e-12)  # 4 lost of 12
    # the curve: every point on the first 3 problems (rlvr seed 1's final: 1, 1, 1 there)
    assert rlvr["curve"][-1]["greedy"]["mean"] == pytest.approx((2 / 3 + 1) / 2, abs=1e-12)
    assert rlvr["vs_first"] is None


def test_a_second_invocation_skips_finished_work_and_redoes_a_missing_evaluation(compared,
                                                                                  capsys):
    paths, out = compared
    runs = [p for p in out.glob("*/base-seed*/metrics.jsonl")]
    before = {p: p.stat().st_mtime_ns for p in runs}
    evaluations = rows(out / EVALUATIONS)
    (out / EVALUATIONS).write_text("".join(json.dumps(r) + "\n" for r in evaluations[:-1]))
    capsys.readouterr()
    compare(spec(paths), out, processes=False)
    said = " ".join(capsys.readouterr().err.split())
    assert {p: p.stat().st_mtime_ns for p in runs} == before  # no run was touched
    redone = rows(out / EVALUATIONS)
    assert len(redone) == len(evaluations) == 2 + 2 * 3 + 2 * 2  # bases + rlvr + SPIRAL points
    assert {k: redone[-1][k] for k in ("folder", "which", "step")} == {
        k: evaluations[-1][k] for k in ("folder", "which", "step")}
    assert said.count("tokens)") == 1, said  # only the missing one
    # a different comparison on the same folder: one line
    assert main(["compare", *paths, "--seeds", "3", "--budget", str(BUDGET), "--suite", SUITE,
                 "--suite-size", "6", "--out", str(out)]) == 2
    assert "holds a different comparison" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    ("unknown", "unknown experiment"),
    ("full", "needs train.finetune: lora"),
    ("scored", "spiral.action is scored: its moves are scored, not generated"),
    ("elsewhere", "nope is not one of the experiments compared"),
    ("points", "--points 2: a learning curve needs at least 3 evaluation points"),
    ("small", "a gain of 0.05 needs 626 problems: --suite-size 626"),
    ("no reference", "problem 2 has no reference answer for the likelihood measure"),
    ("plan unknown", "unknown experiment"),
    ("twice", "experiments named twice: tiny-rlvr, tiny-rlvr"),
])
def test_bad_input_is_one_line_and_leaves_no_folder(tmp_path, capsys, change, message):
    paths = experiments(tmp_path)
    extra = []
    if change in ("unknown", "plan unknown"):
        paths[1] = "no-such-experiment"
        extra = ["--plan", "--base-accuracy", "0.3"] if change == "plan unknown" else []
    elif change == "full":
        data = yaml.safe_load(Path(paths[1]).read_text())
        data["train"]["finetune"] = "full"
        Path(paths[1]).write_text(yaml.safe_dump(data))
    elif change == "scored":  # scored moves generate no tokens: the budget would never bind
        extra = ["--set", f"{paths[1]}:spiral.action=scored"]
    elif change == "elsewhere":
        extra = ["--set", "nope:train.lr=1"]
    elif change == "twice":  # two folders of one name: the second run would overwrite the first
        paths[1] = paths[0]
    elif change == "points":
        extra = ["--points", "2"]
    elif change == "small":
        extra = ["--suite", SUITE, "--suite-size", "320", "--mde", "0.05", "--flip-rate", "0.2"]
    elif change == "no reference":
        suite = tmp_path / "suite.jsonl"
        suite.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n"
                         + json.dumps({"question": "2+2?", "answer": ""}) + "\n")
        extra = ["--suite", str(suite)]
    out = tmp_path / "out"
    args = ["compare", *paths, "--seeds", "2", "--budget", "20", *extra]
    assert main([*args] + ([] if "--plan" in extra else ["--out", str(out)])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_plan_prints_the_mde_and_the_cpu_time(tmp_path, capsys, tiny_model_path):
    paths = experiments(tmp_path)
    args = ["compare", *paths, "--seeds", "3", "--budget", "6000", "--suite", SUITE,
            "--suite-size", "4", "--plan"]
    assert main([*args, "--base-accuracy", "0.25", "--flip-rate", "0.2", "--hours", "4"]) == 0
    said = capsys.readouterr().out
    mde = mcnemar_mde(4, 0.2)
    assert f"MDE (α 0.05, power 0.8, paired): {mde:.3f} if the seeds flip the same" in said
    assert f"{mcnemar_mde(12, 0.2):.3f} if they flip independent ones (3 × 4 pairs)" in said
    assert "base accuracy 0.250 (given)" in said and "flip rate ψ 0.200 (given)" in said
    assert "tiny-rlvr: 3 ×" in said and "the largest budget within 4 h:" in said
    assert not (tmp_path / "runs").exists()  # nothing written
    # measured: the pilot evaluates the base model (the tiny one answers nothing right)
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "base accuracy 0.000 (measured: 4 problems greedy" in said
    assert "evaluations: 1 of the base model" in said  # greedy: one for every seed
    assert "s fixed + " in said and "the pilot, split as the shipped cost is" in said
    assert not (tmp_path / "runs").exists()
    # a budget its train.steps cannot reach (4 steps of the dearest shipped loop's 1,558
    # tokens): the run is costed at its steps, and the plan says how many steps would reach it
    assert main([*args[:6], "60000", *args[7:], "--base-accuracy", "0.25"]) == 0
    said = capsys.readouterr().out
    assert "tiny-rlvr: 3 ×" in said and "6,232 tokens, its 4 steps of 1558" in said
    assert ("warning: tiny-rlvr stops at train.steps 4, before the budget (6,232 of 60,000 "
            "tokens): --set tiny-rlvr:train.steps=39 lets it spend the budget") in said


def test_a_run_is_costed_at_the_budget_or_at_its_steps_whichever_ends_it():
    from selfplay.evaluation.compare_plan import RunCost

    cost = RunCost(25.0, 30.5, "shipped", 552)  # rlvr-curriculum-cpu's
    assert cost.tokens(4000) == cost.tokens(4000, 20) == 4276  # the budget and half a step
    assert cost.tokens(4000, 6) == 3312  # its 6 steps end it first
    assert cost.cpu(4000, 6) == pytest.approx(25.0 + 30.5 * 3.312)


def test_an_evaluations_cost_has_a_fixed_part_fitted_from_two_sizes():
    """An evaluation of 160 problems costs more a problem than one of 720 (2026-11-29: 0.34 s
    against 0.26): one figure a problem measured on the pilot's 64 overstated a comparison's
    evaluations by 68%. Two sizes give the line; one size (the pilot) keeps the shipped split."""
    from selfplay.evaluation import costs
    from selfplay.evaluation.compare_plan import evaluation_fit, scaled_shape

    line = [(n, 12.0 + 0.25 * n + wobble) for n in (160, 720) for wobble in (-1.0, 1.0)]
    fixed, per_problem = evaluation_fit(line)
    assert fixed == pytest.approx(12.0) and per_problem == pytest.approx(0.25)
    # one size: this machine's speed from it, the split from the shipped line
    _, shipped_fixed, shipped_per = costs.EVALUATION
    fixed, per_problem = evaluation_fit([(64, 40.0), (64, 42.0)])
    assert fixed + 64 * per_problem == pytest.approx(41.0)
    assert fixed / per_problem == pytest.approx(shipped_fixed / shipped_per)
    assert scaled_shape(41.0, 64) == pytest.approx((fixed, per_problem))
    # the shipped line against what it was fitted to: 160 problems 55.5 CPU s, 720 188.5
    assert shipped_fixed + 160 * shipped_per == pytest.approx(55.5 - 0.7, abs=2)
    assert shipped_fixed + 720 * shipped_per == pytest.approx(188.5 - 0.7, abs=2)


def test_curve_points_exploitability_and_fit_from_synthetic_runs(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    metrics = [{"step": s, "rollout/tokens_total": 30.0 * (s + 1)} for s in range(10)]
    metrics[0]["eval/exploitability/kuhn_poker"] = 0.46
    metrics[0]["eval/exploitability/kuhn_poker/low"] = 0.2  # an interval's end: not a game
    metrics.append({"step": 10, "final": 1.0, "eval/exploitability/kuhn_poker": 0.31,
                    "eval/exploitability/kuhn_poker/average": 0.25})
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    # budget 300 in 4 points: 75 → step 2 (90), 150 → step 4, 225 → step 7 (240), the last
    assert [(p["step"], p["tokens"]) for p in curve_points(run, 300, 4)] == [
        (3, 90.0), (5, 150.0), (8, 240.0), (10, 300.0)]
    assert exploitability(run) == {"kuhn_poker": {"before": 0.46, "after": 0.31},
                                   "kuhn_poker/average": {"before": None, "after": 0.25}}
    # a sigmoid through 3 seeds × 6 points, R0 = 0.2 → A = 0.5 at C_mid = 1000, B = 1.5
    tokens = [250.0, 500.0, 1000.0, 2000.0, 4000.0, 8000.0]
    seeds = []
    for wobble in (-0.004, 0.0, 0.004):
        curve = [{"tokens": 0.0, "greedy": 0.2}] + [
            {"tokens": c, "greedy": 0.2 + 0.3 / (1 + (1000 / c) ** 1.5) + wobble}
            for c in tokens]
        seeds.append({"curve": curve})
    fitted = fit(seeds)
    assert fitted["a"] == pytest.approx(0.5, abs=0.01)
    assert fitted["a_low"] < 0.5 < fitted["a_high"]
    assert fitted["c_mid"] == pytest.approx(1000, rel=0.1)
    three = fit([{"curve": s["curve"][:4]} for s in seeds])
    assert three == {"why": "no fit: 3 point(s) a run after the base; A, B and C_mid need at "
                            "least 4 (more --points, or a budget of more steps)"}
    flat = fit([{"curve": [{"tokens": c["tokens"], "greedy": 0.2 + 0.004 * ((i + j) % 3 - 1)}
                           for i, c in enumerate(s["curve"])]} for j, s in enumerate(seeds)])
    assert flat["why"].startswith("no fit:") and "a" not in flat  # A = R0 within its error
    # the 2026-11-29 RLVR curves (runs/compare-rlvr-points-5, 3 seeds × 5 points, docs/results.md):
    # a drop below the base before the first point, then flat; the sigmoid's rise lands at 7
    # tokens with B 9.06 ± 0: A is measured, B and C_mid are not
    measured = [[(1130, 0.175), (1680, 0.1625), (2807, 0.2), (3331, 0.1938), (4384, 0.2875)],
                [(1137, 0.1688), (1609, 0.1812), (2711, 0.175), (3268, 0.1812), (4303, 0.2125)],
                [(1095, 0.2188), (1672, 0.2188), (2781, 0.1625), (3354, 0.1688), (4505, 0.1938)]]
    early = fit([{"curve": [{"tokens": 0.0, "greedy": 0.2375}] + [
        {"tokens": float(c), "greedy": g} for c, g in points]} for points in measured])
    assert early["why"].startswith("no fit of B and C_mid: C_mid ") and "a" not in early, early
    assert "A 0.19" in early["why"], early
    assert math.isfinite(fitted["b"])


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_the_page_opens_in_chromium_with_its_plots(compared):
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists():
        pytest.skip("chromium is not installed (make setup installs it with apt-get)")
    from tests.browser import Browser

    _, out = compared
    with Browser() as browser:
        browser.open(out / "report" / "index.html")
        assert browser.evaluate("document.querySelectorAll('#results tbody tr').length") == 2
        assert browser.wait_for("Array.from(document.images).every(i => i.complete) && "
                                "document.images.length") == 2
        assert browser.evaluate("Math.min(...Array.from(document.images)"
                                ".map(i => i.naturalWidth))") > 100
        assert browser.errors == []


def test_regrade_grades_every_record_again_from_its_answer_into_a_copy(compared, tmp_path):
    """A record whose grade disagrees with its extracted answer (planted: flipped) is graded
    again; the others stay; the comparison's own folder is left as it was."""
    from selfplay.evaluation.heldout import read_records
    from selfplay.evaluation.regrade import main as regrade

    _, out = compared
    row = rows(out / EVALUATIONS)[0]
    records = read_records(out / row["records"])
    original = (out / row["records"]).read_text()
    planted = [dict(r) for r in records]
    planted[0]["greedy"] = 1 - planted[0]["greedy"]
    (out / row["records"]).write_text("".join(json.dumps(r) + "\n" for r in planted))
    try:
        assert regrade([str(out), str(tmp_path / "again")]) == 0
    finally:
        (out / row["records"]).write_text(original)
    again = read_records(tmp_path / "again" / row["records"])
    assert [r["greedy"] for r in again] == [r["greedy"] for r in records]
    assert (tmp_path / "again" / "results.md").is_file()
    assert regrade([str(out), str(tmp_path / "again")]) == 2  # the copy exists: one line


def test_more_experiments_join_a_finished_comparison_and_reuse_its_base(compared, tmp_path,
                                                                         capsys):
    """The command that made a comparison, with an experiment added after its own, runs and
    evaluates only the new experiment's runs (their base evaluation reused), and the table holds
    all three; the experiments in another order are refused in one line."""
    paths, out = compared
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    extra = yaml.safe_load(Path(paths[0]).read_text()) | {"name": "tiny-rlvr-b"}
    extra["train"] = extra["train"] | {"lr": 2e-2}
    extra_path = tmp_path / "tiny-rlvr-b.yaml"
    extra_path.write_text(yaml.safe_dump(extra))
    runs = list(copy.glob("*/base-seed*/metrics.jsonl"))
    before_runs = {p: p.stat().st_mtime_ns for p in runs}
    before = rows(copy / EVALUATIONS)
    compare(spec([*paths, str(extra_path)]), copy, processes=False)
    assert "added tiny-rlvr-b" in " ".join(capsys.readouterr().err.split())
    after = rows(copy / EVALUATIONS)
    assert after[:len(before)] == before and {p: p.stat().st_mtime_ns for p in runs} == before_runs
    added = after[len(before):]
    # its 2 seeds' 3 points each, and no base evaluation: the one there is reused
    assert [(r["experiment"], r["which"]) for r in added] == [("tiny-rlvr-b", "point")] * 6
    assert {r["key"] for r in added} == {r["key"] for r in before if r["which"] == "base"}
    table = json.loads((copy / "results.json").read_text())
    assert [r["experiment"] for r in table] == ["tiny-rlvr", "tiny-spiral", "tiny-rlvr-b"]
    assert json.loads((copy / "compare.json").read_text())["experiments"] == [
        *paths, str(extra_path)]
    # the new experiment first: a different comparison, one line, nothing added
    assert main(["compare", str(extra_path), *paths, "--seeds", "2", "--budget", str(BUDGET),
                 "--suite", SUITE, "--suite-size", "6", "--samples", "2", "--points", "3",
                 "--curve-size", "3", "--out", str(copy)]) == 2
    assert "its experiments" in capsys.readouterr().err


@pytest.mark.heavy  # two comparisons of their own, ~2 minutes (docs/testing.md#what-runs-where)
def test_a_rerun_on_the_seeds_after_pools_with_the_first_into_one_table(tmp_path, monkeypatch,
                                                                        capsys, tiny_model_path):
    """``python -m selfplay.evaluation.pool``: the comparison and its rerun on the next seeds
    are one comparison of 4 seeds, paired with the one base; a base whose records differ, or
    seeds that do not follow on, are refused in one line and nothing is written."""
    from selfplay.evaluation.pool import main as pool

    paths = experiments(tmp_path)
    monkeypatch.setattr("selfplay.running.runner.write_report", lambda *args, **kwargs: None)
    # greedy only, as the compare suite: the base model's answers are the same for every seed

    def greedy(first_seed: int) -> CompareSpec:
        return CompareSpec(tuple(paths), seeds=2, budget=BUDGET, suite=SUITE, suite_size=6,
                           samples=0, points=3, curve_size=3, first_seed=first_seed)

    out = compare(greedy(0), tmp_path / "first", processes=False)
    more = compare(greedy(2), tmp_path / "more", processes=False)
    untouched = {p: p.read_bytes() for p in (out / EVALUATIONS, more / EVALUATIONS)}
    pooled = tmp_path / "pooled"
    assert pool([str(out), str(more), str(pooled)]) == 0
    assert {p: p.read_bytes() for p in untouched} == untouched
    evaluations = rows(pooled / EVALUATIONS)
    bases = [r for r in evaluations if r["which"] == "base"]
    assert len(bases) == len({r["key"] for r in bases}) == 1  # one base: the same records
    base = sorted(rows(pooled / bases[0]["records"]), key=lambda r: r["id"])
    table = {r["experiment"]: r for r in json.loads((pooled / "results.json").read_text())}
    for name, row in table.items():
        assert row["seeds"] == "4/4" and [s["seed"] for s in row["per_seed"]] == [0, 1, 2, 3]
        finals = []
        for seed in row["per_seed"]:
            points = [r for r in evaluations if r["experiment"] == name and r["which"] == "point"
                      and r["folder"] == seed["folder"]]
            last = max(points, key=lambda r: (r["problems"], r["tokens"]))
            finals.append(sorted(rows(pooled / last["records"]), key=lambda r: r["id"]))
        for measure in ("greedy", "logprob"):  # the tiny model's log-probs move; its answers not
            expected = paired_gain([r[measure] for r in base],
                                   [[r[measure] for r in final] for final in finals])
            assert (row[f"gain_{measure}"]["gain"], row[f"gain_{measure}"]["low"],
                    row[f"gain_{measure}"]["seeds"]) == pytest.approx(
                (expected.gain, expected.low, 4))
    # a base evaluated otherwise (one answer graded differently): refused, nothing written
    other = tmp_path / "other"
    shutil.copytree(more, other)
    records = other / next(r for r in rows(other / EVALUATIONS) if r["which"] == "base")[
        "records"]
    flipped = rows(records)
    flipped[0]["greedy"] = 1 - flipped[0]["greedy"]
    records.write_text("".join(json.dumps(r) + "\n" for r in flipped))
    capsys.readouterr()
    for first, second, message in ((out, other, "base model's records"),
                                   (more, out, "pool seeds that follow on")):
        assert pool([str(first), str(second), str(tmp_path / "refused")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        assert not (tmp_path / "refused").exists()


def _published_and_rerun(compared, tmp_path: Path) -> tuple[Path, Path]:
    """The comparison with planted records (seeds 0, 1), and a copy as its rerun on seeds 2, 3.

    Published: rlvr gains +1/6 and +3/6 (spread 2/36 on 1 df); SPIRAL gains 0 and 0 (no spread
    of its own: the floor, pooled over both, 1/36 on 2 df, is wider). Rerun: rlvr gains 0,
    SPIRAL answers every problem, +5/6 on both seeds."""
    _, out = compared
    published, rerun = tmp_path / "published", tmp_path / "rerun"
    base = [0, 0, 1, 0, 0, 0]
    for folder, finals in ((published, {"tiny-rlvr": ([1, 0, 1, 0, 0, 0], [1, 1, 1, 0, 0, 1]),
                                        "tiny-spiral": (base, base)}),
                           (rerun, {"tiny-rlvr": (base, base),
                                    "tiny-spiral": ([1] * 6, [1] * 6)})):
        shutil.copytree(out, folder)
        greedy = {"base/seed0": base, "base/seed1": base}
        for name, (seed0, seed1) in finals.items():
            greedy |= {f"{name}/base-seed0": seed0, f"{name}/base-seed1": seed1}
        plant(folder, greedy, {k: [-1.0] * 6 for k in greedy})
    manifest = json.loads((rerun / "compare.json").read_text())
    (rerun / "compare.json").write_text(json.dumps(manifest | {"first_seed": 2}))
    return published, rerun


def test_a_rerun_is_checked_against_the_published_rerun_intervals(compared, tmp_path, capsys):
    """``python -m selfplay.evaluation.rerun``: each published experiment's rerun interval is
    ``rerun_interval`` of its own seeds' paired gains, floored by the spread pooled over the
    published experiments, and each rerun's gain is held by it or not."""
    from scipy import stats

    from selfplay.evaluation.rerun import main as rerun_main

    published, rerun = _published_and_rerun(compared, tmp_path)
    capsys.readouterr()
    assert rerun_main([str(published), "--rerun", str(rerun), "--json",
                       str(tmp_path / "check.json"), "--png", str(tmp_path / "check.png")]) == 0
    assert (tmp_path / "check.png").read_bytes()[:4] == b"\x89PNG"
    said = capsys.readouterr().out
    found = json.loads((tmp_path / "check.json").read_text())
    rows = {r["experiment"]: r for r in found["published"]}
    # rlvr: its own spread 2/36 on 1 df is wider than the floor (1/36 on 2 df)
    half = stats.t.ppf(0.975, 1) * math.sqrt(2 / 36 * (1 / 2 + 1 / 3))
    assert rows["tiny-rlvr"]["rerun"]["source"] == "its own seeds"
    assert rows["tiny-rlvr"]["rerun"]["high"] == pytest.approx(2 / 6 + half)
    # SPIRAL: no spread of its own, so the pooled one
    half = stats.t.ppf(0.975, 2) * math.sqrt(1 / 36 * (1 / 2 + 1 / 3))
    assert rows["tiny-spiral"]["rerun"]["source"] == "pooled over 2 experiments"
    assert (rows["tiny-spiral"]["rerun"]["low"], rows["tiny-spiral"]["rerun"]["high"]) == (
        pytest.approx(-half), pytest.approx(half))
    checked = {c["experiment"]: c for c in found["checked"]}
    assert checked["tiny-rlvr"]["gain"] == pytest.approx(0.0)
    assert checked["tiny-rlvr"]["in_rerun_interval"]
    # the rerun has 2 seeds, so its interval is for 2 new seeds: ± t(2) √(1/36 (1/2 + 1/2))
    assert checked["tiny-spiral"]["rerun_interval"]["high"] == pytest.approx(
        stats.t.ppf(0.975, 2) * math.sqrt(1 / 36))
    assert checked["tiny-spiral"]["gain"] == pytest.approx(5 / 6)
    assert not checked["tiny-spiral"]["in_rerun_interval"]
    assert "rerun intervals held 1 of 2 reruns" in said


@pytest.mark.parametrize(("which", "message"), [
    ("same seeds", "reruns seed(s) [0, 1] that the published figure already holds"),
    ("other budget", "is not a rerun of the published comparisons: its budget differ"),
    ("not a comparison", "is not a comparison folder"),
    ("other base", "the base model's records"),
])
def test_a_rerun_that_is_not_one_is_refused_in_one_line(compared, tmp_path, capsys, which,
                                                        message):
    from selfplay.evaluation.rerun import main as rerun_main

    published, rerun = _published_and_rerun(compared, tmp_path)
    if which == "same seeds":
        rerun = published
    elif which == "other budget":
        manifest = json.loads((rerun / "compare.json").read_text())
        (rerun / "compare.json").write_text(json.dumps(manifest | {"budget": 2 * BUDGET}))
    elif which == "other base":  # one base answer graded otherwise
        row = next(r for r in rows(rerun / EVALUATIONS) if r["which"] == "base")
        records = rows(rerun / row["records"])
        records[0]["greedy"] = 1 - records[0]["greedy"]
        (rerun / row["records"]).write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        rerun = tmp_path / "nothing"
    capsys.readouterr()
    out = tmp_path / "check.json"
    assert rerun_main([str(published), "--rerun", str(rerun), "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()
