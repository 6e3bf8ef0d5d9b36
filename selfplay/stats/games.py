"""Game rates from SPIRAL episodes (``info``: seats, winner, invalid_by, opponent) and response
length over training (SPIRAL's "thinking collapse" shows as shrinking responses)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable


def game_rates(episodes: Iterable[dict]) -> list[dict]:
    """One row per (game, opponent, seat): games, and the seat's win, draw, loss and invalid
    rates (invalid: the seat made the move that ended the game)."""
    tally: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for episode in episodes:
        info = episode.get("info") or {}
        if "winner" not in info:
            continue
        game, opponent = episode.get("env", "?"), info.get("opponent") or "?"
        winner, invalid_by = info.get("winner"), info.get("invalid_by")
        for seat in (0, 1):
            row = tally[(game, opponent, seat)]
            row["games"] += 1
            row["win"] += winner == seat
            row["loss"] += winner is not None and winner != seat
            row["draw"] += winner is None and invalid_by is None
            row["invalid"] += invalid_by == seat
    rows = []
    for (game, opponent, seat), counts in sorted(tally.items()):
        n = counts["games"]
        rows.append(
            {"game": game, "opponent": opponent, "seat": seat, "games": int(n)}
            | {k: counts[k] / n for k in ("win", "draw", "loss", "invalid")}
        )
    return rows


def rates_per_step(episodes: Iterable[dict]) -> dict[int, dict[str, float]]:
    """Per step: invalid-game, draw and seat-0 win rates over all games."""
    per: dict[int, list[dict]] = defaultdict(list)
    for episode in episodes:
        info = episode.get("info") or {}
        if "winner" in info:
            per[int(episode.get("step", 0))].append(info)
    out = {}
    for step, infos in sorted(per.items()):
        n = len(infos)
        out[step] = {
            "invalid": sum(i.get("invalid_by") is not None for i in infos) / n,
            "draw": sum(i.get("winner") is None and i.get("invalid_by") is None for i in infos) / n,
            "seat0_win": sum(i.get("winner") == 0 for i in infos) / n,
        }
    return out


def response_lengths(episodes: Iterable[dict]) -> dict[int, tuple[float, float]]:
    """Per step: mean completion length in tokens and in characters over all model turns."""
    per: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for episode in episodes:
        for turn in episode.get("turns") or []:
            ids = turn.get("completion_ids") or []
            per[int(episode.get("step", 0))].append((len(ids), len(turn.get("text") or "")))
    return {
        step: (sum(t for t, _ in pairs) / len(pairs), sum(c for _, c in pairs) / len(pairs))
        for step, pairs in sorted(per.items())
        if pairs
    }


def eval_game_rows(metrics_rows: Iterable[dict]) -> list[dict]:
    """The SPIRAL evaluation rows of ``metrics.jsonl`` as records:
    eval/<game>/<opponent>[/seat<s>]/<win|draw|loss|invalid> → {step, game, opponent, seat,
    outcome, value}; seat None for the both-seats row."""
    records = []
    for row in metrics_rows:
        for key, value in row.items():
            parts = key.split("/")
            if parts[0] != "eval" or parts[-1] not in ("win", "draw", "loss", "invalid"):
                continue
            if len(parts) == 4:
                seat = None
            elif len(parts) == 5 and parts[3].startswith("seat"):
                seat = int(parts[3][4:])
            else:
                continue
            records.append(
                {
                    "step": row.get("step"),
                    "game": parts[1],
                    "opponent": parts[2],
                    "seat": seat,
                    "outcome": parts[-1],
                    "value": float(value),
                }
            )
    return records
