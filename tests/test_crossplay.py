"""``selfplay crossplay``: win-rate matrix and openskill ratings on hand-made games; real
cross-play of the archived snapshots of tiny runs (SPIRAL games, and a solver on the prompts
of each snapshot's step range)."""

from __future__ import annotations

import json

import pytest

from selfplay.cli.main import main
from selfplay.evaluation.crossplay import (
    GameResult,
    crossplay,
    gold,
    ratings,
    task_ranges,
    win_matrix,
)
from tests.tiny_run import make_tiny_run


def test_win_matrix_counts_draws_half_and_is_complementary():
    results = [GameResult(0, 1, 1.0), GameResult(1, 0, 0.0), GameResult(1, 0, -1.0),
               GameResult(2, 0, 1.0)]
    matrix = win_matrix(results, 3)
    # 0 vs 1: won, drew, won (as seat 1 when 1 lost) → 2.5 / 3
    assert matrix[0][1] == pytest.approx(2.5 / 3) and matrix[1][0] == pytest.approx(0.5 / 3)
    assert matrix[2][0] == 1.0 and matrix[0][2] == 0.0
    assert matrix[1][2] is None and matrix[0][0] is None


def test_openskill_ratings_order_a_transitive_tournament():
    results = [GameResult(a, b, 1.0) for a, b in [(0, 1), (1, 2), (0, 2)] for _ in range(6)]
    ranked = ratings(results, ["strong", "middle", "weak"])
    assert [r["snapshot"] for r in ranked] == ["strong", "middle", "weak"]
    assert ranked[0]["ordinal"] > ranked[1]["ordinal"] > ranked[2]["ordinal"]


def test_task_ranges_and_gold():
    tasks = [{"step": s, "answer": str(s)} for s in (0, 1, 2, 3, 5)]
    assert [[t["step"] for t in r] for r in task_ranges(tasks, [0, 2, 4])] == [[0, 1], [2, 3], [5]]
    assert gold({"answer": " ", "pseudo_label": "7"}) == "7"
    assert gold({"answer": None, "pseudo_label": None}) is None


def test_game_crossplay_on_tiny_spiral_snapshots(tmp_path):
    run_dir, _ = make_tiny_run(tmp_path, loop="spiral")
    result, page = crossplay(run_dir, games=2)
    assert result["kind"] == "games" and result["snapshots"] == [0, 1, 2]
    matrix = result["matrix"]
    for i in range(3):
        assert matrix[i][i] is None
        for j in range(3):
            if i != j:  # every pair met, and each game scores 1 between the two
                assert matrix[i][j] + matrix[j][i] == pytest.approx(1.0)
    assert {r["snapshot"] for r in result["ratings"]} == {"step 0", "step 1", "step 2"}
    saved = json.loads((run_dir / "crossplay" / "crossplay.json").read_text())
    assert saved["matrix"] == matrix
    assert (run_dir / "crossplay" / "crossplay-matrix.png").stat().st_size > 1000
    assert "openskill" in page.read_text()


def test_solver_crossplay_on_tiny_rlvr_snapshots(tmp_path, capsys):
    run_dir, _ = make_tiny_run(tmp_path, loop="rlvr")
    assert main(["crossplay", str(run_dir), "--tasks", "2", "--samples", "2"]) == 0
    assert "solver cross-play of snapshots at steps [0, 1, 2]" in capsys.readouterr().out
    result = json.loads((run_dir / "crossplay" / "crossplay.json").read_text())
    assert result["source"].startswith("episodes")
    assert result["tasks_per_snapshot"] == [2, 2, 0]  # no episodes at step 2: the run ended
    assert all(0 <= v <= 1 for row in result["matrix"][:2] for v in row)
    assert result["matrix"][2] == [None, None, None]


def test_crossplay_refuses_runs_without_snapshots(tmp_path, capsys):
    assert main(["crossplay", str(tmp_path / "missing")]) == 2
    assert "not a run folder" in capsys.readouterr().err
