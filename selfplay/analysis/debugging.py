"""What a person debugging a run reads first: transcripts (prompt → reply → parsed action → why
it was invalid), the invalid reasons per step with counts, and replies cut at the token budget.

Everything here comes from ``episodes/step-N.jsonl``: a turn's ``prompt_text``, its reply
(``prefill`` + ``text``), its completion length, and the episode's ``info`` (``invalid_by``,
``invalid_by_kind``, ``invalid_reason``, ``winner`` for games; ``answer``, ``gold``,
``correct`` for question loops).
The parsed action is extracted again from the reply, as the game loop does.
"""

from __future__ import annotations

import html
import random
from collections import Counter, defaultdict

from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.rundata import RunData

SAMPLES_PER_STEP = 3  # transcripts shown per game and step
TRUNCATION_FLAG = 0.9  # share of replies at the token budget that is flagged
MAX_TEXT = 4000  # characters of a prompt or reply shown (the rest is cut, and said so)
MAX_REASON_COLUMNS = 12


def count_rate(hits: int, total: int) -> str:
    """A rate with its sample size: ``0.500 (1/2)``; ``– (0/0)`` when nothing was counted."""
    if not total:
        return "– (0/0)"
    return f"{hits / total:.3f} ({hits}/{total})"


def is_game(episode: dict) -> bool:
    return "winner" in (episode.get("info") or {})


def _seat_of(role: str) -> int | None:
    tail = role.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def invalid_reason(episode: dict) -> str | None:
    """Why a game ended on an invalid move, with who made it; None for a game played out."""
    info = episode.get("info") or {}
    if info.get("invalid_by") is None:
        return None
    reason = info.get("invalid_reason") or "invalid move (the loop logs no reason)"
    kind = info.get("invalid_by_kind")
    who = {"policy": "model", "adapter": "frozen opponent", "random": "random opponent"}.get(
        kind, f"seat {info['invalid_by']}"
    )
    return f"{who}: {reason}"


def offending_turn(episode: dict) -> int | None:
    """Index of the recorded turn that broke the rules, if the model made the invalid move (the
    game ends on it, so it is the last recorded turn)."""
    info = episode.get("info") or {}
    turns = episode.get("turns") or []
    if info.get("invalid_by") is None or not turns:
        return None
    kind = info.get("invalid_by_kind")
    if kind is not None:
        return len(turns) - 1 if kind == "policy" else None
    seat = _seat_of(str(turns[-1].get("role", "")))
    return len(turns) - 1 if (seat if seat is not None else 0) == info["invalid_by"] else None


def token_budget(run: RunData) -> int | None:
    budget = (run.config.get("sampling") or {}).get("max_new_tokens")
    return int(budget) if isinstance(budget, int | float) else None


def at_budget(turn: dict, budget: int | None) -> bool:
    """The reply stopped at the token budget: its ``finish_reason`` is "length" (the request's
    own budget, which loops set per role); in runs written before turns recorded it, its
    completion is as long as ``sampling.max_new_tokens``."""
    if turn.get("finish_reason"):
        return turn["finish_reason"] == "length"
    return budget is not None and len(turn.get("completion_ids") or []) >= budget


# ------------------------------------------------------------------ truncation
def truncation_per_step(run: RunData) -> dict[int, tuple[int, int]]:
    """(replies at the budget, model replies) per step."""
    budget = token_budget(run)
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for episode in run.episodes:
        for turn in episode.get("turns") or []:
            if turn.get("completion_ids") is None and turn.get("finish_reason") is None:
                continue
            step = int(episode.get("step", 0))
            counts[step][0] += at_budget(turn, budget)
            counts[step][1] += 1
    return {s: (c[0], c[1]) for s, c in sorted(counts.items())}


def truncation_plot_and_lines(run: RunData) -> tuple[Plot | None, list[str]]:
    per_step = truncation_per_step(run)
    budget = token_budget(run)
    if not per_step or budget is None:
        return None, []
    steps = list(per_step)
    # turns that record why they ended are cut at their own request's budget (loops set one
    # per role); older runs only tell the sampling budget apart
    recorded = any(t.get("finish_reason") for e in run.episodes for t in e.get("turns", []))
    where = "its request's token budget" if recorded else f"the {budget}-token budget"
    plot = Plot(
        "response-at-budget",
        "Replies cut at the token budget",
        "step",
        "share of replies",
        [Series(f"stopped at {where}", steps, [h / n for h, n in per_step.values()])],
        rate=True,
    )
    flagged = [s for s, (h, n) in per_step.items() if n and h / n >= TRUNCATION_FLAG]
    hits = sum(h for h, _ in per_step.values())
    total = sum(n for _, n in per_step.values())
    lines = [f"replies that stopped at {where}: {count_rate(hits, total)}."]
    if flagged:
        shown = "; ".join(f"step {s}: {count_rate(*per_step[s])}" for s in flagged[:10])
        more = f"; {len(flagged) - 10} more" if len(flagged) > 10 else ""
        lines.append(
            f"⚠ truncation: at {len(flagged)} of {len(steps)} steps at least "
            f"{TRUNCATION_FLAG:.0%} of the replies hit the token budget ({shown}{more}): the "
            "model is cut off before it answers; raise sampling.max_new_tokens (or the "
            "loop's per-role budget) or shorten its thinking."
        )
    return plot, lines


# ------------------------------------------------------------------ invalid reasons
def _step_bins(steps: list[int]) -> list[tuple[int, int]]:
    """At most MAX_REASON_COLUMNS (first, last) step ranges covering ``steps``."""
    if len(steps) <= MAX_REASON_COLUMNS:
        return [(s, s) for s in steps]
    width = -(-len(steps) // MAX_REASON_COLUMNS)
    return [(steps[i], steps[min(i + width, len(steps)) - 1]) for i in range(0, len(steps), width)]


def invalid_reason_table(episodes: list[dict]) -> tuple[list[str], list[list]] | None:
    """Rows: how each game ended (one row per invalid reason, then played out), columns: steps,
    cells: games, with the total per column; None when no game ended on an invalid move."""
    games = [e for e in episodes if is_game(e)]
    if not any(invalid_reason(e) for e in games):
        return None
    steps = sorted({int(e.get("step", 0)) for e in games})
    bins = _step_bins(steps)
    counts: dict[str, Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for e in games:
        step = int(e.get("step", 0))
        column = next(i for i, (lo, hi) in enumerate(bins) if lo <= step <= hi)
        counts[invalid_reason(e) or "played out (no invalid move)"][column] += 1
        totals[column] += 1
    reasons = sorted(counts, key=lambda r: (r.startswith("played out"), -sum(counts[r].values())))
    headers = [
        "how the game ended",
        *[f"step {lo}" if lo == hi else f"steps {lo}–{hi}" for lo, hi in bins],
        "all steps",
    ]
    rows = [
        [
            r,
            *[counts[r][i] for i in range(len(bins))],
            count_rate(sum(counts[r].values()), len(games)),
        ]
        for r in reasons
    ]
    rows.append(["games", *[totals[i] for i in range(len(bins))], len(games)])
    return headers, rows


# ------------------------------------------------------------------ transcripts
def _pick(episodes: list[dict], count: int, seed: int) -> list[dict]:
    """A few episodes, seeded: invalid and valid ones alternating, so both kinds are seen."""
    rng = random.Random(seed)
    bad = [
        e
        for e in episodes
        if (e.get("info") or {}).get("invalid_by") is not None
        or (e.get("info") or {}).get("correct") is False
    ]
    good = [e for e in episodes if not any(e is b for b in bad)]
    rng.shuffle(bad)
    rng.shuffle(good)
    picked = []
    while len(picked) < count and (bad or good):
        for pool in (bad, good):
            if pool and len(picked) < count:
                picked.append(pool.pop())
    return picked


def _text_block(text: str | None) -> str:
    text = text or ""
    cut = f"\n… ({len(text) - MAX_TEXT} more characters)" if len(text) > MAX_TEXT else ""
    return f"<pre class='turn'>{html.escape(text[:MAX_TEXT] + cut)}</pre>"


def _outcome(episode: dict) -> str:
    info = episode.get("info") or {}
    reason = invalid_reason(episode)
    if reason:
        return f"ended on an invalid move ({reason})"
    if is_game(episode):
        winner = info.get("winner")
        return "draw" if winner is None else f"seat {winner} won"
    if "correct" in info:
        return f"answer {info.get('answer')!r}, gold {info.get('gold')!r}: " + (
            "correct" if info["correct"] else "wrong"
        )
    return "rewards " + ", ".join(
        f"{k} {v:g}"
        for k, v in (episode.get("rewards") or {}).items()
        if isinstance(v, int | float)
    )


def reply_of(turn: dict) -> str:
    """The whole reply the loop parsed: the prompt's prefill, then what the model wrote (runs
    from before turns recorded their prefill: the text alone)."""
    return (turn.get("prefill") or "") + (turn.get("text") or "")


def _parsed(turn: dict, episode: dict, lenient: bool) -> str:
    if not is_game(episode):
        answer = (episode.get("info") or {}).get("answer")
        return "–" if answer is None else str(answer)
    try:
        from games import extract_action

        action = extract_action(reply_of(turn), lenient=lenient)
    except Exception:  # a plug-in game's text the parser cannot read: say so, never fail
        return "(could not parse)"
    return "none (no \\boxed{} action)" if action is None else action


def episode_html(episode: dict, budget: int | None, lenient: bool) -> str:
    turns = episode.get("turns") or []
    offender = offending_turn(episode)
    reason = (episode.get("info") or {}).get("invalid_reason") or "invalid move"
    rows = []
    for index, turn in enumerate(turns):
        tokens = len(turn.get("completion_ids") or [])
        cut = at_budget(turn, budget)
        verdict = f"invalid: {reason}" if index == offender else "valid"
        if not is_game(episode):
            verdict = "–"
        prompt = turn.get("prompt_text")
        prompt_html = (
            f"<details><summary>prompt ({len(prompt)} characters)</summary>"
            f"{_text_block(prompt)}</details>"
            if prompt
            else "<span class='note'>no prompt text logged</span>"
        )
        rows.append(
            "<tr>"
            f"<td>{html.escape(str(turn.get('role', '?')))}</td>"
            f"<td>{prompt_html}{_text_block(reply_of(turn))}</td>"
            f"<td><code>{html.escape(_parsed(turn, episode, lenient))}</code></td>"
            f"<td class='{'bad' if index == offender else ''}'>{html.escape(verdict)}</td>"
            f"<td class='{'bad' if cut else ''}'>{tokens}"
            + (" ⚠ at the budget" if cut else "")
            + "</td></tr>"
        )
    head = (
        f"step {episode.get('step', 0)} · {html.escape(str(episode.get('env', '?')))} · "
        f"{html.escape(str(episode.get('group_id', '')))} · {html.escape(_outcome(episode))}"
    )
    if not rows:
        return f"<p class='note'>{head}: no model turn recorded.</p>"
    return (
        f"<details class='episode' open><summary>{head}</summary><table class='transcript'>"
        "<thead><tr><th>role</th><th>prompt → reply</th><th>parsed action</th><th>valid?</th>"
        f"<th>tokens</th></tr></thead><tbody>{''.join(rows)}</tbody></table></details>"
    )


def transcripts_html(run: RunData, per_step: int = SAMPLES_PER_STEP) -> tuple[list[str], int]:
    """Per game (env), a few episodes of the first and the latest step; (HTML blocks, shown)."""
    budget = token_budget(run)
    lenient = bool((run.config.get(run.loop) or {}).get("lenient", False))
    by_env: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for e in run.episodes:
        if e.get("turns"):
            by_env[str(e.get("env", "?"))][int(e.get("step", 0))].append(e)
    blocks, shown = [], 0
    for env, steps in sorted(by_env.items()):
        chosen = sorted({min(steps), max(steps)}, reverse=True)  # latest first
        blocks.append(f"<h3>{html.escape(env)}</h3>")
        for step in chosen:
            episodes = steps[step]
            picked = _pick(episodes, per_step, seed=step)
            blocks.append(
                f"<p class='note'>step {step}: {len(picked)} of {len(episodes)} "
                "episodes, sampled (invalid and valid ones alternating)</p>"
            )
            blocks += [episode_html(e, budget, lenient) for e in picked]
            shown += len(picked)
    return blocks, shown
