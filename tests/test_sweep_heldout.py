"""``selfplay sweep ... --suite S`` (docs/sweeps.md#held-out-suite): a tiny sweep of two arms × 2
seeds, each run's base model and final policy on a 4-problem suite, paired per problem and
across seeds.

- the base model is evaluated once (greedy answers: the seed does not matter), each final
  policy once, and a second pass evaluates nothing again;
- the table's gains are ``paired_gain`` of the records, the difference from the first arm
  pairs final with final on the same seeds; the sweep page shows the table;
- a bad suite is one line, exit 2, before any sweep folder exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from selfplay.cli.main import main
from selfplay.evaluation.heldout import Measures, read_records, scores
from selfplay.evaluation.sweep_heldout import evaluate_sweep
from selfplay.running import sweep as sweeps
from selfplay.stats.paired import paired_gain
from tests.conftest import tiny_config


def experiment(folder: Path) -> str:
    """Tiny SPIRAL: its games' rewards vary where the random model's rlvr answers are all
    wrong (and would leave the adapters at zero), so the arms' final policies differ."""
    data = tiny_config(folder, name="tiny-sweep", train={"steps": 1, "lr": 5e-2})
    del data["rlvr"]
    data |= {"loop": "spiral", "roles": {"player": {"prompt": "player"}},
             "advantage": {"estimator": "rae"},
             "spiral": {"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
                        "games_per_step": 2, "eval_games": 0, "lenient": True}}
    path = folder / "tiny-sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, tiny_model_path):
    folder = tmp_path_factory.mktemp("sweep-heldout")
    out = folder / "sweep"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("selfplay.running.runner.write_report", lambda *args, **kwargs: None)
        patch.setattr(sweeps, "_in_child", sweeps._here)  # each run in this process
        code = main(["sweep", experiment(folder), "--seeds", "2", "--grid", "train.lr=0.05,0.1",
                     "--out", str(out), "--suite", "rg:chain_sum", "--suite-size", "4"])
    assert code == 0
    return out


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_base_once_finals_once_and_nothing_twice(swept):
    evaluations = rows(swept / "heldout" / "evaluations.jsonl")
    assert [e["which"] for e in evaluations].count("base") == 1
    finals = sorted((e["arm"], e["seed"]) for e in evaluations if e["which"] == "final")
    assert finals == [("train.lr=0.05", 0), ("train.lr=0.05", 1), ("train.lr=0.1", 0),
                      ("train.lr=0.1", 1)]
    assert all(e["step"] == 1 for e in evaluations if e["which"] == "final")
    evaluate_sweep(swept, Measures("rg:chain_sum", 4))
    assert rows(swept / "heldout" / "evaluations.jsonl") == evaluations  # nothing again


def test_the_table_is_the_paired_analysis_of_the_records(swept):
    evaluations = rows(swept / "heldout" / "evaluations.jsonl")
    base = next(e for e in evaluations if e["which"] == "base")
    final = {(e["arm"], e["seed"]): e for e in evaluations if e["which"] == "final"}

    def measured(row: dict, measure: str) -> list[float]:
        return scores(read_records(swept / "heldout" / row["records"]), measure)

    table = json.loads((swept / "heldout" / "heldout.json").read_text())
    assert [(r["arm"], r["measure"]) for r in table] == [
        ("train.lr=0.05", "greedy"), ("train.lr=0.05", "logprob"),
        ("train.lr=0.1", "greedy"), ("train.lr=0.1", "logprob")]
    for row in table:
        arm, measure = row["arm"], row["measure"]
        expected = paired_gain([measured(base, measure)] * 2,
                               [measured(final[(arm, s)], measure) for s in (0, 1)])
        assert row["gain"] == pytest.approx(expected.as_dict())
        assert row["seeds"] == 2 and row["problems"] == 4
    versus = paired_gain([measured(final[("train.lr=0.05", s)], "logprob") for s in (0, 1)],
                         [measured(final[("train.lr=0.1", s)], "logprob") for s in (0, 1)])
    assert table[3]["vs_first"] == pytest.approx(versus.as_dict())
    assert versus.gain != 0 and table[3]["gain"]["gain"] != 0  # the arms trained apart
    assert table[0]["vs_first"] is None
    page = (swept / "report" / "index.html").read_text()
    assert "Held-out suite, paired per problem and across seeds" in page


def test_a_bad_suite_is_one_line_before_the_sweep(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", experiment(tmp_path), "--seeds", "1", "--out", str(out),
                 "--suite", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown suite 'nope'" in err
    assert not out.exists()
