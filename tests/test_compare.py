"""``selfplay compare`` (docs/compare.md) on the tiny random model: two experiments (rlvr and
SPIRAL) x 2 seeds under one token budget, evaluated on a 4-problem suite.

- its table holds, per experiment, the numbers the run folders wrote (tokens, steps, each
  seed's gain read from the runs' own evaluations.jsonl);
- the gain and its interval are the hand-computed t-interval of planted accuracies;
- a re-invocation skips finished runs and evaluations, and redoes only a missing one;
- bad input (an unknown experiment, a fully fine-tuned one) is one line, exit 2, no folder;
- the page opens in headless Chromium with its plot and without an error.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from selfplay.cli.main import main
from selfplay.evaluation.compare import EVALUATIONS, CompareSpec, compare
from selfplay.evaluation.compare_page import summarize
from tests.conftest import tiny_config

# tokens: rlvr spends 36 a step (2 prompts x 3 samples x 6; the random model rarely stops
# early), so it stops after one step; SPIRAL 12 (2 games x 6), so after two
BUDGET = 20
SUITE = "rg:chain_sum"


def experiments(folder: Path) -> list[str]:
    rlvr = tiny_config(folder, name="tiny-rlvr", train={"steps": 4, "lr": 5e-2},
                       checkpoint={"every": 1, "keep": 1})
    rlvr["rlvr"]["eval_size"] = 0
    spiral = tiny_config(folder, name="tiny-spiral", train={"steps": 6, "lr": 5e-2},
                         checkpoint={"every": 1, "keep": 1})
    del spiral["rlvr"]
    spiral |= {"loop": "spiral", "roles": {"player": {"prompt": "player"}},
               "advantage": {"estimator": "rae"},
               "spiral": {"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
                          "games_per_step": 2, "eval_games": 0, "lenient": True}}
    paths = []
    for data in (rlvr, spiral):
        path = folder / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data))
        paths.append(str(path))
    return paths


def spec(paths: list[str]) -> CompareSpec:
    return CompareSpec(tuple(paths), seeds=2, budget=BUDGET, suite=SUITE, suite_size=4,
                       samples=1)


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


def test_the_table_holds_what_the_run_folders_wrote(compared):
    _, out = compared
    table = json.loads((out / "results.json").read_text())
    assert [r["experiment"] for r in table] == ["tiny-rlvr", "tiny-spiral"]
    assert [r["loop"] for r in table] == ["rlvr", "spiral"]
    for row in table:
        assert row["seeds"] == "2/2"
        tokens, steps, gains = [], [], []
        for seed in (0, 1):
            run_dir = out / row["experiment"] / f"base-seed{seed}"
            metrics = rows(run_dir / "metrics.jsonl")
            trained = [m for m in metrics if not m.get("final")]
            assert trained[-1]["rollout/tokens_total"] >= BUDGET  # stopped by the budget
            tokens.append(trained[-1]["rollout/tokens_total"])
            steps.append(len(trained))
            greedy = {e["step"]: e["accuracy"] for e in rows(run_dir / "evaluations.jsonl")
                      if e["setting"] == "greedy" and e["suite"] == SUITE}
            assert set(greedy) == {0, len(trained)}  # the base and the final policy
            gains.append(greedy[len(trained)] - greedy[0])
        assert row["tokens"] == pytest.approx(sum(tokens) / 2, abs=1e-9)  # means of integers
        assert row["steps"] == pytest.approx(sum(steps) / 2, abs=1e-9)
        assert [s["gain_greedy"] for s in row["per_seed"]] == gains
        assert row["budget_reached"] == "2/2"
        assert row["run_seconds"] > 0 and row["eval_seconds"] > 0
        assert row["run_cpu_seconds"] > 0 and row["eval_cpu_seconds"] > 0
        # neither tiny loop writes tasks.jsonl: its curriculum cells are null, not made up
        assert row["validity"] is None and row["difficulty"] is None
    rlvr = table[0]
    assert rlvr["trained_on_suite"] == ["chain_sum"]  # trained on it, kept, and said so
    markdown = (out / "results.md").read_text()
    assert markdown.count("\n") == 2 + 2 and "| tiny-rlvr | rlvr | 2/2 |" in markdown
    assert (out / "report" / "gain.png").stat().st_size > 1000


def test_gain_and_interval_are_the_t_interval_of_planted_accuracies(compared, tmp_path):
    _, out = compared
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    planted = {("base-seed0", "base"): 0.25, ("base-seed0", "final"): 0.5,
               ("base-seed1", "base"): 0.25, ("base-seed1", "final"): 0.75}
    lines = []
    for row in rows(copy / EVALUATIONS):
        row["greedy"] = planted[(row["folder"], row["which"])]
        lines.append(json.dumps(row) + "\n")
    (copy / EVALUATIONS).write_text("".join(lines))
    gain = summarize(copy)[0]["gain_greedy"]
    # gains 0.25 and 0.5: mean 0.375, s = 0.25/sqrt(2), half = t(0.975, 1) s / sqrt(2)
    # = 12.7062 x 0.125 = 1.58828 (t to 4 decimals: 1e-4 x 0.125 of slack)
    assert gain["mean"] == pytest.approx(0.375, abs=1e-12)
    assert gain["high"] - gain["mean"] == pytest.approx(1.58828, abs=2e-5)
    assert gain["mean"] - gain["low"] == pytest.approx(1.58828, abs=2e-5)


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
    assert len(redone) == len(evaluations) == 8
    assert redone[-1]["folder"] == evaluations[-1]["folder"]
    assert redone[-1]["which"] == evaluations[-1]["which"]
    assert said.count("evaluation") == 1, said  # only the missing one
    # a different comparison on the same folder: one line
    assert main(["compare", *paths, "--seeds", "3", "--budget", str(BUDGET), "--suite", SUITE,
                 "--suite-size", "4", "--out", str(out)]) == 2
    assert "holds a different comparison" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    ("unknown", "unknown experiment"),
    ("full", "needs train.finetune: lora"),
    ("elsewhere", "nope is not one of the experiments compared"),
])
def test_bad_input_is_one_line_and_leaves_no_folder(tmp_path, capsys, change, message):
    paths = experiments(tmp_path)
    if change == "unknown":
        paths[1] = "no-such-experiment"
    elif change == "full":
        data = yaml.safe_load(Path(paths[1]).read_text())
        data["train"]["finetune"] = "full"
        Path(paths[1]).write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    extra = ["--set", "nope:train.lr=1"] if change == "elsewhere" else []
    assert main(["compare", *paths, "--seeds", "2", "--budget", "20", "--out", str(out),
                 *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_the_page_opens_in_chromium_with_its_plot(compared):
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists():
        pytest.skip("chromium is not installed (make setup installs it with apt-get)")
    from tests.browser import Browser

    _, out = compared
    with Browser() as browser:
        browser.open(out / "report" / "index.html")
        assert browser.evaluate("document.querySelectorAll('#results tbody tr').length") == 2
        assert browser.wait_for("Array.from(document.images).every(i => i.complete) && "
                                "document.images.length") == 1
        assert browser.evaluate("document.images[0].naturalWidth") > 100
        assert browser.errors == []
