"""``selfplay analyze``: run pages from hand-made run folders (complete, half-written, games),
a comparison page, the real MiniLM embedder, and one-line errors for bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from selfplay.analysis.metric_sections import compute_points
from selfplay.analysis.page import build_sections
from selfplay.analysis.report import analyze
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import Options
from selfplay.cli.main import main
from tests.analysis_data import make_curriculum_run, make_game_run


def _figures(page) -> dict:
    text = page.read_text()
    start = text.index("<script type='application/json' id='figures-data'>") + len(
        "<script type='application/json' id='figures-data'>")
    return json.loads(text[start:text.index("</script>", start)])


def _sections(run, **options):
    return {s.anchor: s for s in build_sections(RunData.open(run), Options(**options))}


def test_curriculum_run_sections_have_the_known_values(tmp_path):
    sections = _sections(make_curriculum_run(tmp_path), embeddings=False)
    difficulty = sections["difficulty"]
    # every step: group a p̂ 3/4, group b all wrong → zero-variance share 1/2
    assert any("zero-variance share 0.500" in line for line in difficulty.lines)
    assert any("target p̂ 0.3–0.8 (agent0 config)" in line for line in difficulty.lines)
    heat = next(p for p in difficulty.plots if p.name == "difficulty-phat-per-step").heatmap
    assert [row[0] for row in heat[2]] == [1, 0, 0, 0, 0, 0, 0, 1, 0, 0]  # p̂ 0 and 0.75
    table = sections["diversity"].tables[0]
    iteration0 = dict(zip(table.headers, table.rows[0], strict=True))
    assert iteration0["valid tasks"] == 4 and iteration0["exact duplicates"] == "0.500"
    iteration1 = dict(zip(table.headers, table.rows[1], strict=True))
    assert iteration1["valid tasks"] == 3 and iteration1["repeats of earlier"] == "0.333"
    validity = next(p for p in sections["validity"].plots if p.name == "tasks-rates")
    assert validity.series[0].y == [1.0, 0.75]
    pseudo = sections["pseudo-labels"].plots[0]
    assert pseudo.series[0].y == pytest.approx([0.8, 0.75, 0.7, 0.65])
    assert "no games" in sections["games"].lines[0]
    assert "no evaluations yet" in sections["evaluations"].lines[0]


def test_evaluations_and_crossplay_results_appear_on_the_page(tmp_path):
    run = make_curriculum_run(tmp_path)
    rows = [{"suite": "rg:gcd", "step": s, "setting": "sampled", "problems": 4, "samples": 4,
             "accuracy": 0.25 * s, "pass@1": 0.25 * s, "pass@4": 0.5} for s in (0, 2)]
    (run / "evaluations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "crossplay").mkdir()
    (run / "crossplay" / "crossplay.json").write_text(json.dumps(
        {"kind": "solver", "snapshots": [0, 2], "matrix": [[0.1, 0.2], [0.3, 0.4]]}))
    section = _sections(run, embeddings=False)["evaluations"]
    assert section.tables[0].rows[1][:6] == ["rg:gcd", 2, "sampled", 4, 4, "0.500"]
    assert section.plots[0].series[0].y == [0.0, 0.5]
    assert "cross-play (solver) of snapshots at steps [0, 2]" in section.lines[0]


def test_compute_points_count_tokens_before_each_evaluation():
    rows = [{"step": s, "eval/accuracy": 0.1 * s, "rollout/tokens_per_s": 10.0,
             "rollout/seconds": 2.0} for s in range(3)]
    rows.append({"step": 3, "final": 1, "eval/accuracy": 0.5})
    assert compute_points(rows, "eval/accuracy") == [
        (0.0, 0.0, 0), (20.0, 0.1, 1), (40.0, 0.2, 2), (60.0, 0.5, 3)]


def test_game_run_has_game_tables_and_no_task_sections(tmp_path):
    sections = _sections(make_game_run(tmp_path), embeddings=False)
    games = sections["games"]
    seat_rows = games.tables[0].rows  # winners 0, 1, draw, 0 (seat 1 invalid) per step
    assert seat_rows[0][:5] == ["kuhn_poker", "mirror", 0, 8, "0.500 (4/8)"]
    assert seat_rows[1][7] == "0.250 (2/8)"
    # evaluation at the last step, spiral.eval_games 4: counts beside every rate
    evaluation = next(t for t in games.tables if t.caption.startswith("evaluation at step 1"))
    assert "4 games per game and opponent" in evaluation.caption
    rows = {tuple(r[:3]): r[3:] for r in evaluation.rows}
    assert rows[("kuhn_poker", "random", "both")][0] == "0.500 (2/4)"
    assert rows[("kuhn_poker", "random", 0)][0] == "0.500 (1/2)"
    assert {p.name for p in games.plots} >= {"games-training-rates", "games-eval-kuhn-poker-random"}
    rates = next(p for p in games.plots if p.name == "games-training-rates")
    assert rates.title == "Training games (all seats; 4 games per step)"
    assert "no tasks.jsonl" in sections["validity"].lines[0]
    assert all(not p.empty for s in sections.values() for p in s.plots)


def test_exploitability_against_training_games_current_average_and_uniform(tmp_path):
    sections = _sections(make_game_run(tmp_path), embeddings=False)
    section = sections["exploitability"]
    plot = section.plots[0]
    assert plot.name == "exploitability-hands" and plot.xlabel == "training games played"
    lines = {s.label: s for s in plot.series}
    assert list(lines) == ["kuhn_poker: current", "kuhn_poker: average",
                           "kuhn_poker: uniform random", "openspiel:leduc_poker: current",
                           "openspiel:leduc_poker: average",
                           "openspiel:leduc_poker: uniform random"]
    kuhn = lines["kuhn_poker: current"]
    assert kuhn.x == [0, 4] and kuhn.y == pytest.approx([0.4, 0.3])
    assert kuhn.band == (pytest.approx([0.35, 0.25]), pytest.approx([0.5, 0.4]))
    assert lines["openspiel:leduc_poker: current"].band is None  # no interval measured
    assert lines["kuhn_poker: average"].y == pytest.approx([0.4, 0.35])
    assert lines["kuhn_poker: uniform random"].y == pytest.approx([11 / 24] * 2)
    assert lines["openspiel:leduc_poker: uniform random"].y == [2.373611] * 2
    assert all(lines[k].dash for k in lines if k.endswith("uniform random"))
    chart = plot.chart()  # on the page: one x per hand count, the band beside the current line
    assert chart["x"] == [0, 4] and chart["series"][0]["low"] == pytest.approx([0.35, 0.25])
    per_step = next(p for p in section.plots if p.name == "exploitability-kuhn-poker")
    assert "average policy" in {s.label for s in per_step.series}
    assert "average policy at step 1: 0.350" in section.lines[0]


def test_half_written_run_reports_what_is_there(tmp_path):
    run = make_curriculum_run(tmp_path, final=False)
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 4, "eval/acc')  # the writer was killed mid-line
    with (run / "episodes" / "step-000003.jsonl").open("a") as handle:
        handle.write('{"loop": "agent0", "turns": [')
    with (run / "tasks.jsonl").open("a") as handle:
        handle.write('{"step": 9')
    (run / "episodes" / "step-000004.tmp").write_text("partial")
    [page] = analyze([run], embeddings=False, pngs=False)
    text = page.read_text()
    assert "did not finish" in text and "unreadable line" in text
    assert len(_figures(page)) >= 10
    assert all(fig["series"] if fig["kind"] == "xy" else fig["z"]
               for fig in _figures(page).values())


def test_comparison_page_overlays_runs(tmp_path):
    a = make_curriculum_run(tmp_path / "a")
    b = make_curriculum_run(tmp_path / "b", steps=3)
    pages = analyze([a, b], out=tmp_path / "cmp", embeddings=False, pngs=False)
    figures = _figures(pages[-1])
    reward = figures["plot-compare-reward-executor"]
    assert [s["label"] for s in reward["series"]] == ["agent0-test", "agent0-test"]
    assert reward["x"] == [0, 1, 2, 3]  # one x for both runs: the shorter has no step 3
    assert [sum(y is not None for y in s["y"]) for s in reward["series"]] == [4, 3]
    assert "train.steps" in pages[-1].read_text()  # the config difference is listed


def test_real_minilm_embeddings_duplicates_and_paraphrases():
    from curricula.analysis import diversity

    vectors = diversity.embed_texts(["What is 2 plus 3?", "What is 2 plus 3?",
                                     "Compute the sum of two and three.",
                                     "Name a river in Egypt."])
    assert vectors.shape == (4, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert diversity.near_duplicate_share(vectors[:2]) == 1.0
    assert diversity.embedding_dispersion(vectors[:2]) == pytest.approx(0.0, abs=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 2] > sims[0, 3] + 0.2  # a paraphrase is closer than an unrelated question


@pytest.mark.parametrize("setup,message", [
    (lambda p: p, "no such directory"),
    (lambda p: p.mkdir() or p, "no config.yaml"),
    (lambda p: p.mkdir() or (p / "config.yaml").write_text("loop: rlvr\n") and p, "no episodes"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, setup, message):
    folder = setup(tmp_path / "run")
    assert main(["analyze", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_plots_rates_get_a_fixed_axis_and_empty_series_are_dropped(tmp_path):
    from selfplay.analysis.plots import Plot, Series
    from selfplay.analysis.sections import is_rate

    rate = Plot("r", "t", "step", "share", [Series("a", [0, 1], [0.2, None]),
                                            Series("b", [0, 1], [None, None])], rate=True)
    figure = rate.chart()
    assert figure["rate"] and figure["integerX"]
    assert [s["label"] for s in figure["series"]] == ["a"] and figure["x"] == [0]
    assert not Plot("c", "t", "step", "tokens", [Series("n", [0], [7])]).chart()["rate"]
    assert Plot("e", "t", "step", "y", [Series("a", [0], [None])]).empty
    assert rate.save_png(tmp_path).stat().st_size > 1000
    assert is_rate("rollout/accuracy", [0.1, 0.9]) and is_rate("eval/x/random/loss", [0.5])
    assert not is_rate("train/loss", [0.1]) and not is_rate("game/invalid_rate", [1.5])


def test_charts_share_one_x_per_plot(tmp_path):
    """uPlot draws every series of a chart on one x array: series are aligned to it (None where
    one has no value), bars and text x are categories (x = index, xLabels = ticks), a band
    follows its series, heatmaps keep their labels."""
    from selfplay.analysis.plots import Plot, Series

    lines = Plot("l", "t", "step", "y", [
        Series("a", [0, 2, 4], [1.0, 2.0, 3.0]),
        Series("b", [1, 2], [5, float("nan")], "markers", dash=True),
        Series("c", [3, 3], [7, 8]),  # two values at one x: two rows, neither lost
    ]).chart()
    assert lines["kind"] == "xy" and "xLabels" not in lines
    assert lines["x"] == [0, 1, 2, 3, 3, 4]
    assert [s["y"] for s in lines["series"]] == [[1.0, None, 2.0, None, None, 3.0],
                                                 [None, 5, None, None, None, None],
                                                 [None, None, None, 7, 8, None]]
    assert [(s["mode"], s.get("dash", False)) for s in lines["series"]] == [
        ("lines+markers", False), ("markers", True), ("lines+markers", False)]
    assert len({s["color"] for s in lines["series"]}) == 3
    bars = Plot("b", "t", "iteration", "share", [Series("x", [2, 1], [0.5, 0.25], "bar"),
                                                 Series("y", [2], [0.75], "bar")]).chart()
    assert bars["x"] == [0, 1] and bars["xLabels"] == ["1", "2"]
    assert [s["y"] for s in bars["series"]] == [[0.25, 0.5], [None, 0.75]]
    named = Plot("n", "t", "arm", "y", [Series("v", ["lr=2", "lr=1"], [1, 2])]).chart()
    assert named["x"] == [0, 1] and named["xLabels"] == ["lr=2", "lr=1"]  # order kept
    band = Plot("s", "t", "step", "y", [Series("m", [0, 1, 2], [0.1, 0.2, 0.3],
                                               band=([0.0, None, 0.2], [0.2, None, 0.4]))]
                ).chart()["series"][0]
    assert band["low"] == [0.0, None, 0.2] and band["high"] == [0.2, None, 0.4]
    heat = Plot("h", "t", "step", "bin", heatmap=([0, 1], ["lo", "hi"], [[1, None], [2, 3]]),
                zlabel="count").chart()
    assert heat == {"title": "t", "xlabel": "step", "ylabel": "bin", "rate": False,
                    "kind": "heatmap", "xLabels": ["0", "1"], "yLabels": ["lo", "hi"],
                    "zlabel": "count", "z": [[1, None], [2, 3]]}


def test_a_two_step_report_is_under_a_megabyte_and_loads_uplot_once(tmp_path):
    """The whole report folder of a 2-step run (page, PNGs, uPlot) is under 1 MB; the page
    loads uPlot from one file beside it, which carries uPlot's MIT licence; a plotly.min.js
    an earlier version left there (4.8 MB) is removed."""
    run = make_game_run(tmp_path)
    (run / "report").mkdir()
    (run / "report" / "plotly.min.js").write_text("stale")
    [page] = analyze([run], embeddings=False)
    folder = page.parent
    total = sum(f.stat().st_size for f in folder.iterdir())
    assert total < 1_000_000, total
    assert len(list(folder.glob("*.png"))) >= 5
    text = page.read_text()
    assert text.count("<script src='uPlot.iife.min.js'></script>") == 1
    assert "plotly" not in text.lower() and not (folder / "plotly.min.js").exists()
    script = (folder / "uPlot.iife.min.js").read_text()
    assert "Copyright (c) 2022 Leon Sorokin" in script and "var uPlot=" in script
    assert 40_000 < len(script) < 100_000
    assert ".u-legend" in text  # uPlot's CSS is inlined


def test_the_vendored_charts_are_package_data():
    """A non-editable install ships uPlot: every file of selfplay/analysis/vendor matches a
    package-data pattern of pyproject.toml."""
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["selfplay"]
    files = sorted((root / "selfplay" / "analysis" / "vendor").iterdir())
    assert {f.name for f in files} >= {"uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"}
    for f in files:
        name = f.relative_to(root / "selfplay").as_posix()
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name


def test_game_transcripts_invalid_reasons_and_truncation(tmp_path):
    from tests.analysis_data import INVALID_REPLY

    run = make_game_run(tmp_path)
    sections = _sections(run, embeddings=False)
    transcripts = "".join(sections["transcripts"].html)
    # the model's reply is escaped, its action parsed, and the invalid move says why
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in transcripts
    assert INVALID_REPLY not in transcripts and "<script>" not in transcripts
    assert "<code>[raise]</code>" in transcripts and "invalid: [raise] is not legal" in transcripts
    assert "<code>[bet]</code>" in transcripts and "Your move, player_0" in transcripts
    assert "step 1: 3 of 4 episodes" in transcripts and "step 0: 3 of 4" in transcripts
    reasons = next(t for t in sections["games"].tables if t.caption.startswith("how training"))
    assert reasons.headers == ["how the game ended", "step 0", "step 1", "all steps"]
    assert reasons.rows[0] == ["model: [raise] is not legal", 1, 1, "0.250 (2/8)"]
    assert reasons.rows[1] == ["played out (no invalid move)", 3, 3, "0.750 (6/8)"]
    assert reasons.rows[-1] == ["games", 4, 4, 8]
    # step 1: 4 of its 5 replies hit the 24-token budget (the invalid one has 9 tokens)
    responses = sections["responses"]
    assert any("0.400 (4/10)" in line for line in responses.lines)
    flagged = [line for line in responses.lines if line.startswith("⚠ truncation")]
    assert not flagged  # 4/5 at step 1 is under 0.9
    [page] = analyze([run], embeddings=False, pngs=False)
    text = page.read_text()
    assert "&lt;script&gt;alert(1)" in text and "<script>alert(1)" not in text


def test_truncation_is_flagged_at_ninety_percent(tmp_path):
    from selfplay.analysis import debugging

    run = RunData.open(make_game_run(tmp_path))
    for episode in run.episodes:  # every reply at the 24-token budget
        for turn in episode["turns"]:
            turn["completion_ids"] = [0] * 24
    _, lines = debugging.truncation_plot_and_lines(run)
    assert lines[0].endswith("1.000 (10/10).")
    assert lines[1].startswith("⚠ truncation: at 2 of 2 steps")
    assert "step 1: 1.000 (5/5)" in lines[1]


def test_truncation_reads_each_turns_finish_reason(tmp_path):
    """Loops give roles their own budgets (a SPICE reasoner: 12 tokens under a 64-token
    sampling budget): a reply cut at 5 tokens with finish_reason "length" is at its budget, a
    24-token one that stopped is not; turns written before the field existed fall back to the
    sampling budget."""
    from selfplay.analysis import debugging
    from selfplay.types import Completion, Turn

    run = RunData.open(make_game_run(tmp_path))
    turns = [turn for episode in run.episodes for turn in episode["turns"]]
    for turn in turns:
        turn["finish_reason"] = "length" if len(turn["completion_ids"]) < 24 else "stop"
    short = sum(len(turn["completion_ids"]) < 24 for turn in turns)
    assert 0 < short < len(turns) == 10
    _, lines = debugging.truncation_plot_and_lines(run)
    # the short replies, not the 24-token ones that the sampling budget alone would count
    assert lines[0].endswith(f"{short / 10:.3f} ({short}/10).")
    assert debugging.at_budget({"completion_ids": [0] * 24}, 24)  # an older run
    cut = Completion("1", prompt_ids=[1], token_ids=[5], logprobs=[0.0], finish_reason="length")
    assert Turn.from_completion("reasoner", cut).finish_reason == "length"


def test_crossplay_table_says_how_many_games_each_rate_is_from(tmp_path):
    from selfplay.evaluation.crossplay import write_crossplay

    run = make_game_run(tmp_path)
    result = {"kind": "games", "snapshots": [0, 2], "games_per_pair": 2, "invalid_share": 0.5,
              "matrix": [[None, 1.0], [0.0, None]],
              "ratings": [{"snapshot": "step 0", "mu": 25.0, "sigma": 8.0, "ordinal": 1.0}]}
    page = write_crossplay(RunData.open(run), result)
    text = page.read_text()
    assert "1.000 (n=2)" in text and "0.000 (n=2)" in text


def test_spice_like_run_without_a_valid_question_says_so(tmp_path):
    run = make_curriculum_run(tmp_path)
    # a step whose challenger produced nothing valid: only challenger episodes, reward 0
    (run / "episodes" / "step-000004.jsonl").write_text("".join(json.dumps(
        {"loop": "spice", "env": "challenger", "group_id": "s4-d0", "step": 4,
         "rewards": {"challenger": 0.0}, "info": {"valid": False}, "turns": []}) + "\n"
        for _ in range(4)))
    difficulty = _sections(run, embeddings=False)["difficulty"]
    assert any("no solver group at step(s) 4" in line for line in difficulty.lines)
    assert any("mean p̂ 0.375 (n = 8 groups)" in line and "0.500 (4/8)" in line
               for line in difficulty.lines)


def test_plugin_loop_metrics_get_plotted_with_titles_and_no_pngs(tmp_path):
    from selfplay.analysis import titles
    from tests.analysis_data import make_plugin_run

    run = make_plugin_run(tmp_path)
    sections = _sections(run, embeddings=False)
    other = {p.name: p for p in sections["other-metrics"].plots}
    assert set(other) == {"other-drill-rates", "other-drill-moves"}
    assert other["other-drill-rates"].series[0].y == [0.25, 0.75]
    assert other["other-drill-moves"].title == "drill/moves"
    assert not any(p.png for p in other.values())
    assert "drill (2)" in sections["other-metrics"].lines[0]
    loss = next(p for p in sections["training"].plots if p.name == "train-train-loss")
    assert (loss.title, loss.ylabel) == ("Policy loss (train/loss)", "loss")
    assert titles.describe("eval/kuhn_poker/random/win")[0] == (
        "Evaluation: kuhn poker · random · win")
    assert titles.describe("sync/seconds") == ("Weight sync time", "s")
    assert titles.describe("my/thing_seconds") == ("my/thing_seconds", "s")
    # the transcripts of a loop that logs who broke the rules but not why
    reasons = next(t for t in sections["games"].tables if t.caption.startswith("how training"))
    assert reasons.rows[0] == [
        "seat 0: invalid move (the loop logs no reason)", 1, 1, "0.500 (2/4)"]
    transcripts = "".join(sections["transcripts"].html)
    assert "invalid: invalid move" in transcripts and "I take &lt;b&gt;all&lt;/b&gt;" in transcripts
    [page] = analyze([run], embeddings=False)
    assert not (page.parent / "other-drill-rates.png").exists()
    assert (page.parent / "train-train-loss.png").exists()
    assert "plot-other-drill-moves" in page.read_text()
    # a run whose every key is drawn by a known section says so
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.yaml").write_text("loop: rlvr\n")
    (plain / "metrics.jsonl").write_text('{"step": 0, "time": 1.0, "reward/solver": 0.5}\n')
    other = _sections(plain, embeddings=False)["other-metrics"]
    assert other.plots == [] and "every key" in other.lines[0]


def test_games_without_an_invalid_move_say_so(tmp_path):
    from selfplay.analysis.game_sections import games_section

    run = RunData.open(make_game_run(tmp_path))
    for episode in run.episodes:
        episode["info"]["invalid_by"] = None
    section = games_section(run)
    assert "no training game ended on an invalid move (0 of 8)." in section.lines
    assert not any(t.caption.startswith("how training") for t in section.tables)


def test_the_ladder_is_a_plot_and_a_table_best_first(tmp_path):
    """eval/ladder/<player>/{mu,sigma,ordinal}: one μ curve per player in the games section and
    the last evaluation's ratings best first; not drawn again among the training curves."""
    sections = _sections(make_game_run(tmp_path), embeddings=False)
    ladder = next(p for p in sections["games"].plots if p.name == "games-ladder")
    assert {s.label: s.y for s in ladder.series} == {"policy": [24.0, 26.0],
                                                     "random": [26.0, 24.0]}
    table = next(t for t in sections["games"].tables if t.caption.startswith("ladder at step 1"))
    assert table.headers == ["player", "mu", "sigma", "ordinal (mu − 3 sigma)"]
    assert table.rows == [["policy", "26.00", "7.00", "5.00"], ["random", "24.00", "7.50", "1.50"]]
    assert not [p.name for p in sections["training"].plots if "ladder" in p.name]
