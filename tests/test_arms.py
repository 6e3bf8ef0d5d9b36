"""Arms read across sweeps (``python -m selfplay.analysis.arms``): curves with seed intervals,
final values paired by seed against a reference arm."""

import pytest

from selfplay.analysis.arms import curve_plot, curve_rows, difference_rows, main, read_arms
from selfplay.core.errors import UserError
from tests.test_sweep import PLANTED, make_sweep


def test_arms_of_two_sweeps_keep_their_curves_and_the_planted_difference(tmp_path):
    grid = make_sweep(tmp_path / "grid", {k: PLANTED[k] for k in ("train.lr=1", "train.lr=2")})
    alone = make_sweep(tmp_path / "alone", {"train.lr=3": PLANTED["train.lr=3"]},
                       unfinished=[("train.lr=3", 2)])
    # a one-arm sweep is named by its folder; its unfinished seed is left out
    arms = read_arms([grid, alone], "reward/solver")
    assert [(a.name, sorted(a.curves)) for a in arms] == [
        ("train.lr=1", [0, 1, 2]), ("train.lr=2", [0, 1, 2]), ("alone", [0, 1])]
    rows = curve_rows(arms)
    assert rows[0] == ["arm (seeds)", "0", "1", "2"]
    assert rows[1][2].startswith("0.200 [")  # step 1 of lr=1: (0.2 + 0.25 + 0.15) / 3
    assert rows[3][1].startswith("0.150 [")  # lr=3, seeds 0 and 1 only: (0.1 + 0.2) / 2
    diffs = {row[0]: row for row in difference_rows(arms, "train.lr=1")[1:]}
    assert diffs["train.lr=2"][1] == "+0.300"  # +0.3 at every seed: no spread at all
    assert diffs["train.lr=2"][2] == "[+0.300, +0.300]"
    assert diffs["alone"][1] == "+0.000" and diffs["alone"][4] == "2"
    plot = curve_plot(arms, "reward/solver", "arms")
    assert [s.label for s in plot.series] == [
        "train.lr=1 (3 seeds)", "train.lr=2 (3 seeds)", "alone (2 seeds)"]
    low, high = plot.series[1].band
    assert plot.series[1].y[2] == pytest.approx(0.5833, abs=1e-4)  # (0.6 + 0.65 + 0.5) / 3
    assert low[2] < plot.series[1].y[2] < high[2]
    assert (tmp_path / "arms.png").exists() is False
    assert plot.save_png(tmp_path).name == "arms.png"


def test_an_unknown_reference_is_one_line(tmp_path, capsys):
    grid = make_sweep(tmp_path / "grid", {k: PLANTED[k] for k in ("train.lr=1", "train.lr=2")})
    with pytest.raises(UserError, match="--reference 'mirror' is no arm: train.lr=1, train.lr=2"):
        difference_rows(read_arms([grid], "reward/solver"), "mirror")
    assert main([str(grid), "--metric", "reward/solver", "--reference", "mirror"]) == 2
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("error: --reference")
