"""Human titles and units for metric keys: ``train/loss`` is drawn as "Policy loss" in "loss
per token"; a key nobody named keeps its own name, with a unit guessed from its last word."""

from __future__ import annotations

# key → (title, unit); a key ending in "/" names every key under it (the rest is appended)
TITLES: dict[str, tuple[str, str]] = {
    "reward/": ("Training reward", "reward"),
    "rollout/accuracy": ("Rollout accuracy", "share of samples"),
    "rollout/boxed_rate": ("Replies with a \\boxed{} answer", "share of samples"),
    "rollout/answered_rate": ("Replies with an answer", "share of samples"),
    "rollout/completion_tokens": ("Reply length", "tokens"),
    "rollout/turns": ("Model turns per episode", "turns"),
    "rollout/tokens_per_s": ("Generation speed", "tokens/s"),
    "rollout/seconds": ("Rollout time per step", "s"),
    "train/loss": ("Policy loss", "loss"),
    "train/grad_norm": ("Gradient norm", "L2 norm"),
    "train/entropy": ("Policy entropy", "nats per token"),
    "train/clip_frac": ("Clipped importance ratios", "share of tokens"),
    "train/samples_dropped_zero_adv": ("Samples dropped (zero advantage)", "samples"),
    "train/tokens_per_s": ("Training speed", "tokens/s"),
    "train/seconds": ("Learner time per step", "s"),
    "train/samples": ("Samples trained on", "samples"),
    "train/tokens": ("Tokens trained on", "tokens"),
    "train/mismatch_kl": ("Engine/learner log-prob KL", "nats"),
    "train/mismatch_abs_mean": ("Engine/learner log-prob gap (mean)", "nats"),
    "train/mismatch_abs_max": ("Engine/learner log-prob gap (max)", "nats"),
    "train/tis_weight_mean": ("Truncated importance weight (mean)", "weight"),
    "time/step_seconds": ("Step time", "s"),
    "sync/seconds": ("Weight sync time", "s"),
    "sync/wait_seconds": ("Waiting for weights", "s"),
    "sync/share": ("Share of the step spent syncing", "share of time"),
    "staleness/mean": ("Policy staleness (mean)", "policy versions"),
    "staleness/max": ("Policy staleness (max)", "policy versions"),
    "game/invalid_rate": ("Games ended by an invalid move", "share of games"),
    "game/policy_invalid_rate": ("Games ended by the model's invalid move", "share of games"),
    "game/opponent_invalid_rate": ("Games ended by the opponent's invalid move", "share of games"),
    "game/draw_rate": ("Draws", "share of games"),
    "game/parse_failure_rate": ("Replies without a parsable action", "share of games"),
    "game/moves": ("Moves per game", "moves"),
    "game/games": ("Training games per step", "games"),
    "game/games_per_minute": ("Game throughput", "games/min"),
    "game/response_chars": ("Reply length", "characters"),
    "eval/accuracy": ("Held-out accuracy", "share of problems"),
    "curriculum/": ("Curriculum", ""),
    "cure/": ("CURE", ""),
    "spice/": ("SPICE", ""),
    "agent0/": ("Agent0", ""),
    "azr/": ("AZR", ""),
    "ssp/": ("SSP", ""),
    "sqlm/": ("SQLM", ""),
    "spice/reasoner/accuracy": ("Reasoner accuracy", "share of answers"),
}

UNIT_WORDS = [
    ("tokens_per_s", "tokens/s"),
    ("per_minute", "per minute"),
    ("seconds", "s"),
    ("_rate", "share"),
    ("rate", "share"),
    ("share", "share"),
    ("accuracy", "share"),
    ("frac", "share"),
    ("tokens", "tokens"),
    ("chars", "characters"),
]


def describe(key: str) -> tuple[str, str]:
    """(title, unit) of a metric key."""
    if key in TITLES:
        return TITLES[key]
    for prefix, (title, unit) in TITLES.items():
        if prefix.endswith("/") and key.startswith(prefix):
            rest = key[len(prefix) :].replace("_", " ").replace("/", " / ")
            return f"{title}: {rest}", unit or guess_unit(key)
    if key.startswith("eval/"):
        return "Evaluation: " + key[5:].replace("/", " · ").replace("_", " "), guess_unit(key)
    return key, guess_unit(key)


def guess_unit(key: str) -> str:
    last = key.rsplit("/", 1)[-1]
    for word, unit in UNIT_WORDS:
        if word in last:
            return unit
    return last.replace("_", " ") if any(c.isalpha() for c in last) else "value"


def title(key: str) -> str:
    """The plot title: the human title and, where it differs, the key to find it in the log."""
    name, _ = describe(key)
    return name if name == key else f"{name} ({key})"
