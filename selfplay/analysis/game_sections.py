"""The sections of a run's page about its episodes as played: games (training rates per step and
per game, opponent and seat; how games ended; evaluation against each opponent), response
length (with truncation), and sampled transcripts.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from selfplay.analysis import debugging
from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import EXPLOITABILITY, Section, Table, fmt, line_plot
from selfplay.stats import games, ratings


def games_section(run: RunData) -> Section:
    section = Section("Games", "games")
    game_episodes = [e for e in run.episodes if "winner" in (e.get("info") or {})]
    evals = games.eval_game_rows(run.metrics)
    if not game_episodes and not evals:
        section.lines.append("no games in this run.")
        return section
    if game_episodes:
        per_step = games.rates_per_step(game_episodes)
        steps = list(per_step)
        counts = Counter(int(e.get("step", 0)) for e in game_episodes)
        low, high = min(counts.values()), max(counts.values())
        per_step_n = f"{low}" if low == high else f"{low}–{high}"
        section.add(Plot("games-training-rates",
                         f"Training games (all seats; {per_step_n} games per step)", "step",
                         "share of games", [
            Series(name, steps, [per_step[s][name] for s in steps])
            for name in ("invalid", "draw", "seat0_win")], rate=True))
        section.tables.append(Table(
            "training games per game, opponent and seat (whole run)",
            ["game", "opponent", "seat", "games", "win", "draw", "loss", "invalid"],
            [[r["game"], r["opponent"], r["seat"], r["games"],
              *[debugging.count_rate(round(r[k] * r["games"]), r["games"]) for k in
                ("win", "draw", "loss", "invalid")]] for r in games.game_rates(game_episodes)]))
        reasons = debugging.invalid_reason_table(game_episodes)
        if not reasons:
            section.lines.append(f"no training game ended on an invalid move "
                                 f"(0 of {len(game_episodes)}).")
        else:
            section.tables.append(Table(
                "how training games ended, per step (games; the last column: share of all games)",
                *reasons))
    combos = sorted({(r["game"], r["opponent"]) for r in evals})
    for game_id, opponent in combos:
        chosen = [r for r in evals if r["game"] == game_id and r["opponent"] == opponent]
        series = {}
        for r in chosen:
            seat = "both seats" if r["seat"] is None else f"seat {r['seat']}"
            series.setdefault(f"{r['outcome']} ({seat})", []).append((r["step"], r["value"]))
        safe = re.sub(r"[^a-zA-Z0-9]+", "-", f"{game_id}-{opponent}")
        section.add(line_plot(f"games-eval-{safe}", f"evaluation: {game_id} vs {opponent}",
                              "rate", series, rate=True))
    if evals:
        last = max(r["step"] for r in evals)
        table = defaultdict(dict)
        for r in evals:
            if r["step"] == last:
                table[(r["game"], r["opponent"], "both" if r["seat"] is None else r["seat"])][
                    r["outcome"]] = r["value"]
        per = (run.config.get(run.loop) or {}).get("eval_games")
        section.tables.append(Table(
            f"evaluation at step {last} (greedy, seats alternating"
            + (f", {per} games per game and opponent)" if per else ")"),
            ["game", "opponent", "seat", "win", "draw", "loss", "invalid"],
            [[*k, *[_eval_cell(v.get(o), per, k[2]) for o in ("win", "draw", "loss", "invalid")]]
             for k, v in sorted(table.items(), key=str)]))
    _ladder(section, ratings.ladder_rows(run.metrics))
    return section


def _ladder(section: Section, rows: list[dict]) -> None:
    """The ladder: the policy's and each evaluation opponent's openskill μ per evaluation, and
    the last evaluation's ratings, best first."""
    if not rows:
        return
    series: dict[str, list[tuple]] = {}
    for r in rows:
        series.setdefault(r["player"], []).append((r["step"], r["mu"]))
    section.add(line_plot("games-ladder", "ladder: openskill μ of the policy and its evaluation "
                          "opponents", "μ (openskill)", series))
    last = max(r["step"] for r in rows)
    latest = {r["player"]: r for r in rows if r["step"] == last}  # evaluated twice: the last
    final = sorted(latest.values(), key=lambda r: -r["ordinal"])
    section.tables.append(Table(
        f"ladder at step {last}: openskill (Plackett–Luce) ratings from the evaluation games, "
        "best first (every opponent met only the policy)",
        ["player", "mu", "sigma", "ordinal (mu − 3 sigma)"],
        [[r["player"], fmt(r["mu"], 2), fmt(r["sigma"], 2), fmt(r["ordinal"], 2)]
         for r in final]))


def _eval_cell(rate, games_per_pair, seat) -> str:
    """An evaluation rate with its count where the number of games is known (``eval_games``
    per game and opponent, seats alternating: seat 0 gets the odd one)."""
    if not isinstance(games_per_pair, int) or not isinstance(rate, int | float):
        return fmt(rate)
    n = games_per_pair if seat == "both" else (games_per_pair + (seat == 0)) // 2
    return debugging.count_rate(round(rate * n), n)


def responses_section(run: RunData) -> Section:
    section = Section("Response length", "responses")
    lengths = games.response_lengths(run.episodes)
    steps = list(lengths)
    section.add(Plot("response-tokens", "mean response length (model turns)", "step", "tokens",
                     [Series("tokens", steps, [lengths[s][0] for s in steps])]),
                "no model turns in episodes/.")
    section.add(Plot("response-chars", "mean response length (model turns)", "step",
                     "characters", [Series("characters", steps, [lengths[s][1] for s in steps])]))
    plot, lines = debugging.truncation_plot_and_lines(run)
    if plot is not None:
        section.add(plot)
    section.lines += lines
    budget = (run.config.get("sampling") or {}).get("max_new_tokens")
    if lengths and budget:
        first, last = lengths[steps[0]][0], lengths[steps[-1]][0]
        section.lines.append(
            f"tokens per response {first:.1f} → {last:.1f} (budget {budget}); a steady fall "
            "is SPIRAL's 'thinking collapse', a climb to the budget means truncation."
        )
    return section


def transcripts_section(run: RunData) -> Section:
    section = Section("Transcripts", "transcripts")
    blocks, shown = debugging.transcripts_html(run)
    if not shown:
        section.lines.append("no model turns in episodes/ to show.")
        return section
    section.lines.append(
        "sampled episodes of the first and the latest step, per game: the prompt (click to "
        "open), the reply, the action parsed from it, and why a move was invalid."
    )
    section.html += blocks
    return section


# exploitability of well-known strategies, for the reader's scale (docs/games.md#exploitability)
REFERENCE = {"kuhn_poker": (11 / 24, "uniform random"), "leduc_poker": (2.373611, "uniform random")}


def exploitability_section(run: RunData) -> Section:
    """Per game measured: the policy's exploitability at each evaluation with its 90% bootstrap
    band, the average policy's (over every evaluation so far), uniform random play's beside
    them, and the share of replies that chose no legal move; all games against the training
    games played before each evaluation."""
    section = Section("Exploitability", "exploitability")
    games_measured = sorted({k.removeprefix(EXPLOITABILITY).rsplit("/", 1)[0]
                             for r in run.metrics for k in r if k.startswith(EXPLOITABILITY)})
    if not games_measured:
        section.lines.append("not measured (spiral.eval_exploitability lists no game).")
        return section
    section.add(_exploitability_by_hands(run, games_measured))
    for game in games_measured:
        key = EXPLOITABILITY + game
        rows = [r for r in run.metrics if key in r]
        steps = [r["step"] for r in rows]
        series = {"exploitability": [r[key] for r in rows],
                  "90% low": [r.get(f"{key}/low", r[key]) for r in rows],
                  "90% high": [r.get(f"{key}/high", r[key]) for r in rows]}
        if any(f"{key}/average" in r for r in rows):  # runs before issue 39 have none
            series["average policy"] = [r.get(f"{key}/average") for r in rows]
        reference = _reference(game)
        if reference:
            series[reference[1]] = [reference[0]] * len(rows)
        safe = re.sub(r"[^a-zA-Z0-9]+", "-", game).strip("-")
        section.add(Plot(f"exploitability-{safe}", f"Exploitability on {game} (Nash: 0)",
                         "step", "NashConv / 2",
                         [Series(name, steps, values) for name, values in series.items()]))
        section.add(line_plot(f"exploitability-invalid-{safe}",
                              f"Replies with no legal move, {game}", "share of replies",
                              {"invalid": [(r["step"], r.get(f"{key}/invalid", 0.0))
                                           for r in rows]}, rate=True))
        first, last = rows[0], rows[-1]
        section.lines.append(
            f"{game}: {fmt(first[key])} [{fmt(first.get(f'{key}/low'))}, "
            f"{fmt(first.get(f'{key}/high'))}] at step {first['step']} → {fmt(last[key])} "
            f"[{fmt(last.get(f'{key}/low'))}, {fmt(last.get(f'{key}/high'))}] at step "
            f"{last['step']}; invalid {fmt(first.get(f'{key}/invalid'))} → "
            f"{fmt(last.get(f'{key}/invalid'))}"
            + (f"; average policy at step {last['step']}: {fmt(last[f'{key}/average'])}"
               if f"{key}/average" in last else "")
            + (f"; {reference[1]} play: {reference[0]:.3f}" if reference else "")
            + (f"; expected return against the random player (exact) "
               f"{fmt(first[f'{key}/value_vs_random'])} → {fmt(last[f'{key}/value_vs_random'])}"
               if f"{key}/value_vs_random" in first and f"{key}/value_vs_random" in last
               else ""))
    return section


def _reference(game: str) -> tuple[float, str] | None:
    return REFERENCE.get(game.removeprefix("openspiel:").split("(")[0])


def _exploitability_by_hands(run: RunData, games_measured: list[str]) -> Plot:
    """Every game's current policy (with its 90% band) and average policy against the training
    games played before each evaluation, uniform random play's level dashed."""
    plot = Plot("exploitability-hands", "Exploitability by training games played (Nash: 0)",
                "training games played", "NashConv / 2")
    for game in games_measured:
        key = EXPLOITABILITY + game
        rows = [r for r in run.metrics if key in r and f"{key}/hands" in r]
        hands = [int(r[f"{key}/hands"]) for r in rows]
        band = None
        if any(f"{key}/low" in r for r in rows):
            band = ([r.get(f"{key}/low") for r in rows], [r.get(f"{key}/high") for r in rows])
        plot.series.append(Series(f"{game}: current", hands, [r[key] for r in rows], band=band))
        plot.series.append(Series(f"{game}: average", hands,
                                  [r.get(f"{key}/average") for r in rows]))
        reference = _reference(game)
        if reference and rows:
            plot.series.append(Series(f"{game}: {reference[1]}", hands,
                                      [reference[0]] * len(rows), mode="lines", dash=True))
    return plot
