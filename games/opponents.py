"""Non-model opponents and the bookkeeping for model-backed ones.

Model-backed opponents (a frozen checkpoint, a pool of past checkpoints) are run by the
training loop, which owns the models; this module only decides *which* checkpoint and
*which seat*, so that logic is testable without a model.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from typing import Any, Protocol

from games.actions import bracketed_tokens, is_placeholder, match_legal
from games.base import Game

MODEL = "model"
OPPONENT = "opponent"
# Last resort for a free-form game that shows no bracketed token at all.
FALLBACK_GUESS = "[pass]"


class Opponent(Protocol):
    """Something that picks `player`'s next action in `game`."""

    def act(self, game: Game, player: int) -> str: ...


def candidate_actions(game: Game, player: int) -> list[str]:
    """Best-known options: exact legal actions, else the game's examples, else a guess."""
    return options(game, player)[0]


def options(game: Game, player: int) -> tuple[list[str], bool]:
    """(moves, verified): verified moves are legal for sure, guesses may not be.

    Verified: the exact legal actions, else the game's `example_actions` (for TextArena games,
    the moves the legal-move oracle saw the game accept, even where the whole set is not
    known). The guess is every bracketed token the player can see, which for TextArena games
    usually includes the moves named in the rules; an invalid guess just loses the game.
    """
    legal = game.legal_actions(player)
    if legal:
        return legal, True
    examples = getattr(game, "example_actions", None)
    if callable(examples):
        found = examples(player)
        if found:
            return list(found), True
    tokens = list(dict.fromkeys(bracketed_tokens(game.observation(player))))
    playable = [token for token in tokens if not is_placeholder(token)]
    return playable or tokens or [FALLBACK_GUESS], False


# What a prompt shows as its answer format: the move format with a placeholder. A legal move
# shown as the example steers the policy toward it (issue 31: +0.19 probability on average,
# and a policy trained against the random player picked the example in all 12 states).
EXAMPLE_PLACEHOLDERS = ("[your action]", "[your chosen action]", "[action]")


def example_action(game: Game, player: int) -> str:
    """The answer format a prompt shows: ``[your action]``, a placeholder, not a move.

    Never a legal move of the state: where a game lists its moves and one is called like the
    placeholder, the next placeholder is taken. (A free-form game that takes any bracketed
    text as a message, such as Simple Negotiation, would read the placeholder as one.)
    """
    legal = game.legal_actions(player) or []
    for placeholder in EXAMPLE_PLACEHOLDERS:
        if match_legal(placeholder, legal) is None:
            return placeholder
    return "[...]"


def legal_example_action(game: Game, player: int, fallback: str = "[action]") -> str:
    """A legal move as the example, as prompts showed before issue 31 (``spiral.example:
    legal`` keeps it, to reproduce those runs): it steers the policy toward the move shown.

    Picked by a hash of the observation, so prompts are reproducible and do not always show
    the same move. Where no move is verified, the first playable token on the page (the rules'
    format example), else `fallback`.
    """
    moves, verified = options(game, player)
    if not verified:
        return moves[0] if moves and moves[0] != FALLBACK_GUESS else fallback
    return moves[zlib.crc32(game.observation(player).encode()) % len(moves)]


class RandomOpponent:
    """Uniformly random among `candidate_actions` (SPIRAL's "fixed random opponent")."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.verified = True  # whether every move so far was known to be legal

    def act(self, game: Game, player: int) -> str:
        moves, verified = options(game, player)
        self.verified &= verified
        return self.rng.choice(moves)


class CheckpointPool:
    """Which past checkpoints an opponent may be drawn from (FIFO, e.g. size 25).

    A checkpoint joins every `refresh_every` steps; when full, the oldest leaves.
    """

    def __init__(self, size: int = 25, refresh_every: int = 5) -> None:
        if size < 1 or refresh_every < 1:
            raise ValueError("CheckpointPool needs size >= 1 and refresh_every >= 1")
        self.size = size
        self.refresh_every = refresh_every
        self._pool: deque[tuple[int, str]] = deque(maxlen=size)

    def maybe_add(self, step: int, ckpt_id: str) -> bool:
        """Add `ckpt_id` if `step` is a refresh step; return whether it was added."""
        if step % self.refresh_every != 0 or ckpt_id in self:
            return False
        self._pool.append((step, ckpt_id))  # deque(maxlen) evicts the oldest
        return True

    def sample(self, rng: random.Random) -> str:
        if not self._pool:
            raise LookupError("CheckpointPool is empty: add a checkpoint before sampling")
        return rng.choice(self._pool)[1]

    @property
    def ids(self) -> list[str]:
        """Checkpoint ids, oldest first."""
        return [ckpt for _, ckpt in self._pool]

    def __len__(self) -> int:
        return len(self._pool)

    def __contains__(self, ckpt_id: object) -> bool:
        return any(ckpt == ckpt_id for _, ckpt in self._pool)

    def state_dict(self) -> dict[str, Any]:
        """For checkpoints: resuming must restore the same pool."""
        return {
            "size": self.size,
            "refresh_every": self.refresh_every,
            "entries": [list(entry) for entry in self._pool],
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> CheckpointPool:
        pool = cls(size=state["size"], refresh_every=state["refresh_every"])
        for step, ckpt in state["entries"]:
            pool._pool.append((int(step), str(ckpt)))
        return pool


# AlphaStar's prioritised fictitious self-play (Vinyals et al. 2019; the pseudocode's ``pfsp``):
# P(B) ∝ f(P[current beats B]). squared and linear favour the snapshots that beat the current
# policy, variance those around its level; linear_capped gives every snapshot it beats less
# than half of the time the same weight.
PFSP_WEIGHTINGS = {
    "squared": lambda x: (1.0 - x) ** 2,
    "linear": lambda x: 1.0 - x,
    "linear_capped": lambda x: min(0.5, 1.0 - x),
    "variance": lambda x: x * (1.0 - x),
}
WEIGHTINGS = ("uniform", *PFSP_WEIGHTINGS)


class FictitiousPool(CheckpointPool):
    """A ``CheckpointPool`` of past policy snapshots that remembers how the current policy does
    against each, to draw opponents for fictitious self-play
    (docs/algorithms.md#fictitious-self-play).

    ``record(snapshot, score)`` adds one game's result from the *current* policy's side (1 win,
    ½ draw, 0 loss). Older games fade: before each new game against a snapshot its counts are
    multiplied by ``decay`` (AlphaStar's 0.99), so the win rate follows the policy as it learns.
    ``win_rate`` is 0.5 before any game. ``sample(rng)`` draws uniformly or by a PFSP weighting
    of the win rates, uniformly when the weights sum below 1e-10 (every snapshot beaten).
    """

    def __init__(self, size: int = 25, refresh_every: int = 5, weighting: str = "uniform",
                 decay: float = 0.99) -> None:
        super().__init__(size, refresh_every)
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting {weighting!r}: one of {', '.join(WEIGHTINGS)}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay {decay}: in (0, 1]")
        self.weighting, self.decay = weighting, decay
        self.results: dict[str, list[float]] = {}  # snapshot: [score, games], decayed

    def record(self, ckpt_id: str, score: float) -> None:
        """One finished game against ``ckpt_id``; a snapshot that left the pool meanwhile (an
        asynchronous run) is ignored."""
        if not 0 <= score <= 1:
            raise ValueError(f"a game's score is in [0, 1], not {score}")
        if ckpt_id not in self:
            return
        scored, games = self.results.get(ckpt_id, (0.0, 0.0))
        self.results[ckpt_id] = [scored * self.decay + score, games * self.decay + 1.0]

    def win_rate(self, ckpt_id: str) -> float:
        """P[current policy beats ``ckpt_id``]: draws count ½; 0.5 before any game."""
        scored, games = self.results.get(ckpt_id, (0.0, 0.0))
        return scored / games if games > 0 else 0.5

    def probabilities(self) -> dict[str, float]:
        """Each snapshot's chance to be drawn next, oldest first."""
        ids = self.ids
        if not ids:
            return {}
        if self.weighting == "uniform":
            return dict.fromkeys(ids, 1.0 / len(ids))
        weight = PFSP_WEIGHTINGS[self.weighting]
        weights = [weight(self.win_rate(ckpt)) for ckpt in ids]
        total = sum(weights)
        if total < 1e-10:  # the pseudocode's fallback: uniform
            return dict.fromkeys(ids, 1.0 / len(ids))
        return {ckpt: w / total for ckpt, w in zip(ids, weights, strict=True)}

    def sample(self, rng: random.Random) -> str:
        if not self._pool:
            raise LookupError("FictitiousPool is empty: add a checkpoint before sampling")
        if self.weighting == "uniform":  # the same draw as CheckpointPool's
            return super().sample(rng)
        chances = self.probabilities()
        return rng.choices(list(chances), weights=list(chances.values()))[0]

    def maybe_add(self, step: int, ckpt_id: str) -> bool:
        added = super().maybe_add(step, ckpt_id)
        for evicted in set(self.results) - set(self.ids):  # its results leave with it
            del self.results[evicted]
        return added

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "weighting": self.weighting, "decay": self.decay,
                "results": {ckpt: list(r) for ckpt, r in self.results.items()}}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> FictitiousPool:
        """A pool saved by either class (a kind-pool run resumed as fictitious: no results)."""
        pool = cls(state["size"], state["refresh_every"], state.get("weighting", "uniform"),
                   state.get("decay", 0.99))
        for step, ckpt in state["entries"]:
            pool._pool.append((int(step), str(ckpt)))
        pool.results = {str(k): [float(v) for v in r]
                        for k, r in state.get("results", {}).items()}
        return pool


def assign_seats(rng: random.Random, num_players: int = 2) -> dict[int, str]:
    """Seat -> "model" / "opponent", the model's seat drawn at random for each game.

    Random seats stop the model from learning only one side of an asymmetric game.
    """
    model_seat = rng.randrange(num_players)
    return {seat: MODEL if seat == model_seat else OPPONENT for seat in range(num_players)}
