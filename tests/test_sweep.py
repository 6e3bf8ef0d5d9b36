"""``selfplay sweep`` and ``selfplay analyze SWEEP`` (docs/sweeps.md).

- the sweep page from hand-made sweep folders (a planted difference, a single arm, unfinished
  runs), and in headless Chromium without a JavaScript error (the statistics themselves:
  tests/test_sweep_stats.py);
- real tiny sweeps: identical arms (a grid value that changes nothing) give intervals covering
  0; a Ray sweep on a local 2-CPU cluster gives the sequential sweep's results; a sweep killed
  mid-run resumes without touching its finished run;
- bad input (an unknown grid key, zero seeds, a folder that is not a sweep): exit 2, one line,
  no folder.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from selfplay.analysis.sweep_page import final_tables, write_sweep_page
from selfplay.analysis.sweepdata import MANIFEST, SweepData
from selfplay.cli.main import main
from tests.conftest import tiny_config
from tests.processes import kill_after_rows, metric_rows

CLOCK_WORDS = ("seconds", "per_s", "per_minute", "time", "sync/share", "async/", "rss", "memory")


# ------------------------------------------------------------------ the page, hand-made sweeps
def make_sweep(root: Path, arms: dict[str, dict[int, list[float]]], unfinished=()) -> Path:
    """A sweep folder with runs whose metrics are given: arm → seed → reward per step (the
    final row repeats the last reward as eval/accuracy)."""
    root.mkdir(parents=True)
    entries, arm_list = [], []
    for index, (arm, by_seed) in enumerate(arms.items()):
        arm_list.append({"name": arm, "overrides": [arm]})
        for seed, rewards in by_seed.items():
            folder = f"arm{index}-seed{seed}"
            run = root / folder
            run.mkdir()
            (run / "config.yaml").write_text(
                yaml.safe_dump(
                    {"name": "synthetic", "loop": "rlvr", "seed": seed, "train": {"steps": 3}}
                )
            )
            rows = [
                {"step": s, "reward/solver": r, "rollout/seconds": 9.0 * s}
                for s, r in enumerate(rewards)
            ]
            if (arm, seed) not in unfinished:
                rows.append({"step": len(rewards), "final": 1.0, "eval/accuracy": rewards[-1]})
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            entries.append(
                {"folder": folder, "arm": arm, "seed": seed, "status": "finished", "error": None}
            )
    manifest = {
        "experiment": "synthetic",
        "overrides": [],
        "seeds": 3,
        "ray": None,
        "grid": {"train.lr": [a.split("=")[1] for a in arms]},
        "arms": arm_list,
        "runs": entries,
    }
    (root / MANIFEST).write_text(json.dumps(manifest))
    return root


PLANTED = {  # reward per step; train.lr=2 is train.lr=1 + 0.3 at every step of every seed
    "train.lr=1": {0: [0.1, 0.2, 0.3], 1: [0.2, 0.25, 0.35], 2: [0.0, 0.15, 0.2]},
    "train.lr=2": {0: [0.4, 0.5, 0.6], 1: [0.5, 0.55, 0.65], 2: [0.3, 0.45, 0.5]},
    "train.lr=3": {0: [0.1, 0.2, 0.3], 1: [0.2, 0.25, 0.35], 2: [0.0, 0.15, 0.2]},
}


def _rows(table) -> list[dict]:
    return [dict(zip(table.headers, row, strict=True)) for row in table.rows]


def test_three_small_positive_differences_are_not_called_a_difference(tmp_path):
    """All three seeds a little better (+0.04, +0.21, +0.04): the bootstrap interval alone
    excludes 0, the paired t-interval does not, and the page says "no"."""
    arms = {
        "train.lr=1": {0: [0.1, 0.3], 1: [0.1, 0.35], 2: [0.1, 0.2]},
        "train.lr=2": {0: [0.1, 0.34], 1: [0.1, 0.56], 2: [0.1, 0.24]},
    }
    _, diff = final_tables(SweepData.open(make_sweep(tmp_path / "sweep", arms)))
    row = {(r["metric"], r["arm"]): r for r in _rows(diff)}[("reward/solver", "train.lr=2")]
    low, high = (float(x) for x in row["95% interval"].strip("[]").split(","))
    t_low, t_high = (float(x) for x in row["paired t-interval"].strip("[]").split(","))
    assert low > 0 and t_low < 0 < t_high and row["excludes 0"] == "no"


def test_sweep_page_finds_the_planted_difference(tmp_path):
    sweep = SweepData.open(make_sweep(tmp_path / "sweep", PLANTED))
    per_arm, diff = final_tables(sweep)
    rows = {(r["metric"], r["arm"]): r for r in _rows(diff)}
    shifted = rows[("reward/solver", "train.lr=2")]
    assert shifted["difference"] == "0.3000" and shifted["excludes 0"] == "yes"
    assert shifted["resampling"] == "paired by seed" and shifted["95% interval"] == "[0.3, 0.3]"
    same = rows[("reward/solver", "train.lr=3")]
    assert same["difference"] == "0.0000" and same["excludes 0"] == "no"
    assert ("eval/accuracy", "train.lr=2") in rows
    assert not any("seconds" in metric for metric, _ in rows)  # machine figures are left out
    means = {(r["metric"], r["arm"]): r["mean"] for r in _rows(per_arm)}
    assert means[("reward/solver", "train.lr=1")] == "0.2833"  # (0.3 + 0.35 + 0.2) / 3
    page = write_sweep_page(sweep, pngs=False)
    text = page.read_text()
    assert "Student-t" in text and "bootstrap" in text
    figures = json.loads(text.split("id='figures-data'>")[1].split("</script>")[0])
    curve = figures["plot-sweep-reward-solver"]
    assert curve["x"] == [0, 1, 2] and len(curve["series"]) == 3
    first = curve["series"][0]
    assert first["y"] == pytest.approx([0.1, 0.2, 0.2833333], abs=1e-6)  # means per step
    # each arm's band (its 95% interval per step) around its mean, in the arm's colour
    assert all(lo < y < hi for lo, y, hi in zip(first["low"], first["y"], first["high"],
                                                strict=True))
    assert len({s["color"] for s in curve["series"]}) == 3


def test_unfinished_runs_are_left_out_of_the_final_table(tmp_path):
    sweep = SweepData.open(make_sweep(tmp_path / "sweep", PLANTED, unfinished={("train.lr=2", 2)}))
    per_arm, diff = final_tables(sweep)
    row = next(
        r for r in _rows(per_arm) if r["metric"] == "reward/solver" and r["arm"] == "train.lr=2"
    )
    assert row["seeds"] == 2
    paired = next(
        r for r in _rows(diff) if r["metric"] == "reward/solver" and r["arm"] == "train.lr=2"
    )
    assert paired["seeds"] == 2  # the seeds both arms finished


def test_a_single_arm_sweep_has_means_and_no_differences(tmp_path):
    sweep = SweepData.open(make_sweep(tmp_path / "sweep", {"train.lr=1": PLANTED["train.lr=1"]}))
    per_arm, diff = final_tables(sweep)
    assert diff is None and {r["arm"] for r in _rows(per_arm)} == {"train.lr=1"}
    text = write_sweep_page(sweep, pngs=False).read_text()
    assert "difference from the first arm" not in text and "plot-sweep-reward-solver" in text


def test_a_sweep_page_opens_in_chromium_without_errors(tmp_path):
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists():
        pytest.skip("chromium is not installed (make setup installs it with apt-get)")
    from tests.browser import Browser, chart_pixels

    page = write_sweep_page(SweepData.open(make_sweep(tmp_path / "sweep", PLANTED)))
    with Browser() as browser:
        browser.open(page)
        expected = browser.evaluate(
            "Object.keys(JSON.parse(document.getElementById('figures-data').textContent)).length"
        )
        assert expected >= 2
        assert browser.wait_for("document.body.dataset.plotsRendered") == str(expected)
        # every arm's line and every band not identical to another arm's is on the canvas
        # (train.lr=3 repeats train.lr=1, so their bands blend: the lr=2 band is checked)
        charts = chart_pixels(browser)
        assert len(charts) == expected
        for name, chart in charts.items():
            assert chart is not None and chart["legend"] == 1 + 3, name  # x + three arms
            assert chart["series"] and all(n > 5 for n in chart["series"].values()), (name, chart)
            assert chart["bands"] and all(n > 20 for n in chart["bands"].values()), (name, chart)
        assert (
            browser.wait_for(
                "Array.from(document.images).every(i => i.complete) && document.images.length"
            )
            == expected
        )
        assert (
            browser.evaluate("Array.from(document.images).filter(i => i.naturalWidth === 0).length")
            == 0
        )
        assert browser.errors == []


def test_analyze_cli_on_a_sweep_and_on_a_run_beside_it(tmp_path, capsys):
    root = make_sweep(tmp_path / "sweep", PLANTED)
    assert main(["analyze", str(root), "--no-png"]) == 0
    out = capsys.readouterr().out
    assert "report:" in out and (root / "report" / "index.html").exists()
    assert main(["analyze", str(root), str(root / "arm0-seed0")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# ------------------------------------------------------------------ real tiny sweeps
def spiral_experiment(folder: Path, steps: int = 2) -> Path:
    """A tiny SPIRAL experiment: the random model's replies (game/response_chars) differ from
    seed to seed, so the seeds give different numbers."""
    folder.mkdir(parents=True, exist_ok=True)
    data = tiny_config(
        folder,
        train={"steps": steps, "lr": 5e-2},
        sampling={"max_new_tokens": 8},
        checkpoint={"every": 1, "keep": 1},
    )
    del data["rlvr"]
    data |= {
        "loop": "spiral",
        "roles": {"player": {"prompt": "player"}},
        "advantage": {"estimator": "rae"},
        "spiral": {
            "games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
            "games_per_step": 2,
            "eval_games": 0,
            "lenient": True,
        },
    }
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def essence(run_dir: Path) -> tuple[list, list]:
    """What a run computed: metrics without clock figures, and every completion's tokens."""
    metrics = [
        {k: v for k, v in row.items() if not any(w in k for w in CLOCK_WORDS)}
        for row in metric_rows(run_dir)
    ]
    tokens = [
        [turn["completion_ids"] for turn in json.loads(line)["turns"]]
        for path in sorted((run_dir / "episodes").glob("step-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    return metrics, tokens


@pytest.fixture(scope="module")
def sequential(tmp_path_factory, tiny_model_path):
    """Two arms that behave the same (checkpoint.keep changes no result) × 2 seeds, one run
    after another in this process."""
    from selfplay.running.sweep import sweep

    folder = tmp_path_factory.mktemp("sweep")
    experiment = spiral_experiment(folder)
    with pytest.MonkeyPatch.context() as patch:  # each run's own page: not under test here
        patch.setattr("selfplay.running.runner.write_report", lambda *args, **kwargs: None)
        sweep_dir, entries = sweep(
            str(experiment), [], ["checkpoint.keep=1,2"], 2, folder / "sequential", processes=False
        )
    assert [e["status"] for e in entries] == ["finished"] * 4
    return experiment, sweep_dir


def test_identical_arms_intervals_cover_zero(sequential):
    _, sweep_dir = sequential
    sweep = SweepData.open(sweep_dir)
    assert sweep.arms == ["checkpoint.keep=1", "checkpoint.keep=2"]
    per_arm, diff = final_tables(sweep)
    per_seed: dict[str, dict[str, list[str]]] = {}
    for row in _rows(per_arm):
        per_seed.setdefault(row["metric"], {})[row["arm"]] = row["per seed"].split()
    # a metric on which the two seeds differ (not a trivial check), the same in both arms
    varied = [m for m, arms in per_seed.items()
              if len(arms["checkpoint.keep=1"]) == 2 and len(set(arms["checkpoint.keep=1"])) == 2]
    assert varied, "no metric differs between the seeds"
    for metric in per_seed:
        assert per_seed[metric]["checkpoint.keep=2"] == per_seed[metric]["checkpoint.keep=1"]
    rows = _rows(diff)
    assert rows and all(r["excludes 0"] == "no" for r in rows), rows
    assert all(r["resampling"] == "paired by seed" for r in rows)
    assert (sweep_dir / "report" / "index.html").exists()


def test_sweep_runs_are_self_contained(sequential):
    """Each run of a sweep keeps its inputs as `selfplay run` does (prompts, versions)."""
    _, sweep_dir = sequential
    for run_dir in sorted(p.parent for p in sweep_dir.glob("*/config.yaml")):
        assert (run_dir / "inputs" / "environment.json").is_file()
        assert list((run_dir / "inputs" / "prompts").glob("*.yaml"))


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_ray_sweep_gives_the_sequential_results(sequential, tmp_path):
    ray = pytest.importorskip("ray")
    from selfplay.running.sweep import sweep

    experiment, sequential_dir = sequential
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 2**20)
    try:
        sweep_dir, entries = sweep(
            str(experiment), [], ["checkpoint.keep=1"], 2, tmp_path / "on-ray", ray="auto"
        )
    finally:
        ray.shutdown()
    assert [e["status"] for e in entries] == ["finished"] * 2
    assert json.loads((sweep_dir / MANIFEST).read_text())["ray"] == "auto"
    for entry in entries:
        assert essence(sweep_dir / entry["folder"]) == essence(sequential_dir / entry["folder"])


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_killed_sweep_resumes_without_rerunning_finished_runs(tmp_path, tiny_model_path, capsys):
    config = tiny_config(tmp_path, train={"steps": 5}, checkpoint={"every": 1, "keep": 1})
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(yaml.safe_dump(config))
    sweep_dir = tmp_path / "sweep"
    killed = kill_after_rows(
        ["sweep", str(experiment), "--seeds", "2", "--out", str(sweep_dir)],
        sweep_dir,
        "base-seed1",
        rows=2,
        group=True,
    )
    assert 2 <= len(metric_rows(killed)) < 5, "the second run must be killed mid-way"
    first = sweep_dir / "base-seed0"
    assert any(row.get("final") for row in metric_rows(first))
    files = [p for p in first.rglob("*") if p.is_file()]
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    manifest = json.loads((sweep_dir / MANIFEST).read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished", "running"]

    capsys.readouterr()
    assert main(["sweep", "--resume", str(sweep_dir)]) == 0  # the run itself: a child process
    said = "".join(capsys.readouterr().err.split())  # without the spaces rich wraps lines at
    assert "1of2runsfinished,1torun" in said
    assert re.search(f"resume{re.escape(str(killed))}atstep[1-4]", said)  # the runner's resume
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    assert after == before  # the finished run was not touched
    assert sorted(p for p in first.rglob("*") if p.is_file()) == sorted(files)
    steps = [row["step"] for row in metric_rows(killed) if not row.get("final")]
    assert steps == list(range(5))  # each step once
    manifest = json.loads((sweep_dir / MANIFEST).read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished", "finished"]
    # the same command again on the same folder: nothing left to do, nothing touched
    assert main(["sweep", str(experiment), "--seeds", "2", "--out", str(sweep_dir)]) == 0
    assert "2 of 2 runs finished, 0 to run" in " ".join(capsys.readouterr().err.split())
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files} == before
    # a different sweep on that folder is refused
    assert main(["sweep", str(experiment), "--seeds", "3", "--out", str(sweep_dir)]) == 2
    assert "holds a different sweep" in capsys.readouterr().err


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "2", "--grid", "train.no_such_key=1,2"], "unknown key 'train.no_such_key'"),
        (["--seeds", "2", "--grid", "rlvr.group_size=3,oops"], "arm rlvr.group_size=oops"),
        (["--seeds", "0"], "at least one seed"),
        (["--seeds", "2", "--grid", "seed=1,2"], "seeds come from --seeds"),
        (["--seeds", "2", "--grid", "train.lr"], "key=value1,value2"),
        ([], "--seeds N is required"),
    ],
)
def test_bad_sweep_input_is_one_line_and_leaves_no_folder(tmp_path, capsys, args, message):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(yaml.safe_dump(tiny_config(tmp_path)))
    out = tmp_path / "sweep"
    assert main(["sweep", str(experiment), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists() and not (tmp_path / "runs").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["exp.yaml"]


def test_a_folder_that_is_not_a_sweep_is_one_line(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    for args in (
        ["sweep", "--resume", str(tmp_path / "plain")],
        ["sweep", "--resume", str(tmp_path / "missing")],
        ["analyze", str(tmp_path / "plain")],
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / MANIFEST).write_text('{"experiment": "x"}')
    assert main(["sweep", "--resume", str(broken)]) == 2
    assert "malformed 'grid'" in capsys.readouterr().err


def test_a_loops_own_metrics_are_compared_and_bookkeeping_is_not():
    from selfplay.analysis.sweep_page import compared_keys

    rows = [
        {"step": 0, "time": 1.0, "spice/challenger/valid_rate": 0.25,
         "agent0/pool/kept_share": 0.5,
         "drill/win_rate": 1.0, "agent0/phase": 1.0, "sync/bytes": 9.0, "staleness/max": 0.0,
         "rollout/seconds": 3.0, "reward/solver": 0.1},
    ]
    assert compared_keys(rows) == [
        "agent0/pool/kept_share", "drill/win_rate", "reward/solver", "spice/challenger/valid_rate"
    ]
