from __future__ import annotations

import random

import pytest

from games import CheckpointPool, KuhnPoker, RandomOpponent, TicTacToe, assign_seats
from games.opponents import MODEL, OPPONENT, candidate_actions


def test_pool_is_fifo_and_refreshes_on_schedule() -> None:
    pool = CheckpointPool(size=3, refresh_every=5)
    assert pool.maybe_add(0, "ckpt-0")
    assert not pool.maybe_add(3, "ckpt-3")  # not a refresh step
    for step in (5, 10, 15):
        assert pool.maybe_add(step, f"ckpt-{step}")
    assert pool.ids == ["ckpt-5", "ckpt-10", "ckpt-15"]  # ckpt-0 was evicted first
    assert pool.maybe_add(20, "ckpt-20")
    assert pool.ids == ["ckpt-10", "ckpt-15", "ckpt-20"] and len(pool) == 3
    assert "ckpt-5" not in pool and "ckpt-20" in pool


def test_pool_ignores_duplicates() -> None:
    pool = CheckpointPool(size=2, refresh_every=1)
    assert pool.maybe_add(1, "a") and not pool.maybe_add(2, "a")
    assert pool.ids == ["a"]


def test_pool_sampling_and_state() -> None:
    pool = CheckpointPool(size=25, refresh_every=5)
    with pytest.raises(LookupError):
        pool.sample(random.Random(0))
    for step in range(0, 200, 5):
        pool.maybe_add(step, f"s{step}")
    assert len(pool) == 25 and pool.ids[0] == "s75"
    rng = random.Random(0)
    drawn = {pool.sample(rng) for _ in range(500)}
    assert drawn == set(pool.ids)  # uniform over the pool, nothing else
    restored = CheckpointPool.from_state_dict(pool.state_dict())
    assert restored.ids == pool.ids and restored.size == 25 and restored.refresh_every == 5
    with pytest.raises(ValueError):
        CheckpointPool(size=0)


def test_assign_seats_is_random_per_game() -> None:
    rng = random.Random(0)
    seats = [assign_seats(rng) for _ in range(200)]
    for assignment in seats:
        assert sorted(assignment) == [0, 1]
        assert sorted(assignment.values()) == [MODEL, OPPONENT]
    model_seats = [next(s for s, role in a.items() if role == MODEL) for a in seats]
    assert 60 < sum(model_seats) < 140


def test_random_opponent_only_plays_legal_moves() -> None:
    for seed in range(30):
        game = TicTacToe()
        game.reset(seed)
        opponent = RandomOpponent(seed)
        while not game.done:
            legal = game.legal_actions(game.current_player)
            action = opponent.act(game, game.current_player)
            assert action in legal
            game.step(action)
        assert game.invalid_move_by is None


def test_random_opponent_is_reproducible() -> None:
    def actions(seed: int) -> list[str]:
        game, opponent, taken = KuhnPoker(), RandomOpponent(seed), []
        game.reset(seed)
        while not game.done:
            taken.append(opponent.act(game, game.current_player))
            game.step(taken[-1])
        return taken

    assert actions(4) == actions(4)


class _FreeForm:
    """Minimal stand-in for a game that cannot list its moves."""

    def __init__(self, text: str) -> None:
        self.text = text

    def legal_actions(self, player: int) -> None:
        return None

    def observation(self, player: int) -> str:
        return self.text


def test_guesses_come_from_the_observation() -> None:
    game = _FreeForm("[GAME] Say '[roll]' or '[hold]'. Bets look like '[Bet N]'.")
    assert candidate_actions(game, 0) == ["[roll]", "[hold]"]  # type: ignore[arg-type]
    assert candidate_actions(_FreeForm("nothing"), 0) == ["[pass]"]  # type: ignore[arg-type]
