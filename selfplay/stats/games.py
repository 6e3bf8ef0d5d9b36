"""Game statistics: win, draw, loss and invalid-move rates of SPIRAL's training games (from
their episodes) and evaluation games (from their results), computed by one tally; response
length over training (SPIRAL's "thinking collapse" shows as shrinking responses)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable


def outcome_rates(results: list[dict]) -> dict[str, float]:
    """Rates over games seen from one seat: each result has ``reward`` (> 0 a win, 0 a draw,
    < 0 a loss), ``invalid`` (this seat's move ended the game) and optionally ``invalid_by``
    ("opponent" when the other seat's did)."""
    count = len(results)
    return {
        "win": sum(r["reward"] > 0 for r in results) / count,
        "draw": sum(r["reward"] == 0 for r in results) / count,
        "loss": sum(r["reward"] < 0 for r in results) / count,
        "invalid": sum(r["invalid"] for r in results) / count,
        "opponent_invalid": sum(r.get("invalid_by") == "opponent" for r in results) / count,
        # mean reward: +1 win, 0 draw, −1 loss (invalid moves count as losses / wins)
        "reward": sum(r["reward"] for r in results) / count,
    }


def seat_results(episode: dict) -> list[dict]:
    """A training game (an episode with ``info`` winner and invalid_by) as one result per
    seat, in the form of ``outcome_rates``."""
    info = episode.get("info") or {}
    winner, invalid_by = info.get("winner"), info.get("invalid_by")
    rows = []
    for seat in (0, 1):
        reward = 0.0 if winner is None else (1.0 if winner == seat else -1.0)
        rows.append({"game": episode.get("env", "?"), "opponent": info.get("opponent") or "?",
                     "seat": seat, "reward": reward, "invalid": invalid_by == seat,
                     "invalid_by": None if invalid_by is None else
                     ("model" if invalid_by == seat else "opponent")})
    return rows


def game_rates(episodes: Iterable[dict]) -> list[dict]:
    """One row per (game, opponent, seat) of training games: games, and the seat's win, draw,
    loss and invalid rates (invalid: the seat made the move that ended the game)."""
    per: dict[tuple, list[dict]] = defaultdict(list)
    for episode in episodes:
        if "winner" in (episode.get("info") or {}):
            for row in seat_results(episode):
                per[(row["game"], row["opponent"], row["seat"])].append(row)
    rows = []
    for (game, opponent, seat), results in sorted(per.items()):
        rates = outcome_rates(results)
        rows.append({"game": game, "opponent": opponent, "seat": seat, "games": len(results)}
                    | {k: rates[k] for k in ("win", "draw", "loss", "invalid")})
    return rows


def eval_metrics(results: list[dict]) -> dict[str, float]:
    """Evaluation games of the model (one result each: game, opponent, the model's seat,
    reward, invalid, invalid_by, meaningful) as metrics
    eval/<game>/<opponent>[/seat<s>]/{win,draw,loss,invalid,opponent_invalid,reward}, over both
    seats and per seat; ``invalid`` counts the model's invalid moves.

    Where the random seat had to guess moves (the game's legal set was not known), its
    mistakes, not the model, would decide the games: win/draw/loss are left out and
    ``.../not_meaningful`` gives the share of such games instead.
    """
    metrics: dict[str, float] = {}
    for game_id, opponent in sorted({(r["game"], r["opponent"]) for r in results}):
        rows = [r for r in results if r["game"] == game_id and r["opponent"] == opponent]
        name = game_id.replace("textarena:", "")
        for seat in (None, 0, 1):
            chosen = [r for r in rows if seat is None or r["seat"] == seat]
            if not chosen:
                continue
            prefix = f"eval/{name}/{opponent}" + ("" if seat is None else f"/seat{seat}")
            rates = outcome_rates(chosen)
            guessed = sum(not r.get("meaningful", True) for r in chosen)
            if guessed:
                metrics[f"{prefix}/not_meaningful"] = guessed / len(chosen)
                metrics[f"{prefix}/invalid"] = rates["invalid"]
                continue
            metrics |= {f"{prefix}/{key}": value for key, value in rates.items()}
    return metrics


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
