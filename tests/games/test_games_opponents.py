from __future__ import annotations

import random

import pytest

from games import (
    CheckpointPool,
    FictitiousPool,
    KuhnPoker,
    RandomOpponent,
    TicTacToe,
    assign_seats,
)
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


def fictitious(weighting: str, rates: dict[str, list[float]], decay: float = 1.0):
    """A pool of the snapshots named, each with the game scores given (oldest first)."""
    pool = FictitiousPool(size=10, refresh_every=1, weighting=weighting, decay=decay)
    for step, (name, scores) in enumerate(rates.items(), start=1):
        pool.maybe_add(step, name)
        for score in scores:
            pool.record(name, score)
    return pool


def test_fictitious_win_rates_count_draws_half_and_start_at_a_half() -> None:
    pool = fictitious("uniform", {"a": [1, 0.5, 0, 1], "b": []})
    assert pool.win_rate("a") == 2.5 / 4 and pool.win_rate("b") == 0.5
    # older games fade: a loss then a win with decay 0.99 is 1 / (0.99 + 1), not 1/2
    faded = fictitious("uniform", {"a": [0, 1]}, decay=0.99)
    assert faded.win_rate("a") == pytest.approx(1 / 1.99)


@pytest.mark.parametrize("weighting, expected", [
    # win rates 0.2, 0.5, 1.0 (the last snapshot always beaten)
    ("uniform", [1 / 3, 1 / 3, 1 / 3]),
    ("squared", [0.64 / 0.89, 0.25 / 0.89, 0.0]),
    ("linear", [0.8 / 1.3, 0.5 / 1.3, 0.0]),
    ("linear_capped", [0.5, 0.5, 0.0]),
    ("variance", [0.16 / 0.41, 0.25 / 0.41, 0.0]),
])
def test_fictitious_draw_probabilities_follow_pfsp_weightings(weighting, expected) -> None:
    pool = fictitious(weighting, {"a": [0, 0, 0, 0, 1], "b": [0, 1], "c": [1, 1, 1]})
    assert [pool.win_rate(c) for c in "abc"] == [0.2, 0.5, 1.0]
    chances = pool.probabilities()
    assert list(chances) == ["a", "b", "c"]
    assert list(chances.values()) == pytest.approx(expected)
    rng = random.Random(1)
    draws = [pool.sample(rng) for _ in range(6000)]
    for name, p in zip("abc", expected, strict=True):  # 6000 draws: sd of a share <= 0.0065
        assert draws.count(name) / 6000 == pytest.approx(p, abs=0.03)


def test_fictitious_weights_that_vanish_fall_back_to_uniform() -> None:
    every_one_beaten = fictitious("squared", {"a": [1], "b": [1, 1]})
    assert every_one_beaten.probabilities() == {"a": 0.5, "b": 0.5}
    extremes = fictitious("variance", {"a": [1], "b": [0]})  # x(1 - x) is 0 at both ends
    assert extremes.probabilities() == {"a": 0.5, "b": 0.5}
    assert FictitiousPool().probabilities() == {}
    with pytest.raises(LookupError):
        FictitiousPool(weighting="squared").sample(random.Random(0))


def test_fictitious_results_leave_with_their_snapshot_and_survive_a_state_round_trip() -> None:
    pool = FictitiousPool(size=2, refresh_every=1, weighting="linear", decay=0.9)
    for step, name in enumerate("abc", start=1):
        pool.maybe_add(step, name)
        pool.record(name, 0.0 if name == "b" else 1.0)
    pool.record("a", 1.0)  # "a" left the pool: ignored
    assert pool.ids == ["b", "c"] and set(pool.results) == {"b", "c"}
    pool.record("b", 1.0)
    restored = FictitiousPool.from_state_dict(pool.state_dict())
    assert restored.ids == ["b", "c"] and restored.results == pool.results
    assert (restored.weighting, restored.decay) == ("linear", 0.9)
    assert restored.win_rate("b") == pytest.approx(1 / 1.9)
    assert restored.probabilities() == pool.probabilities()
    plain = CheckpointPool(size=3, refresh_every=2)
    plain.maybe_add(2, "x")
    from_plain = FictitiousPool.from_state_dict(plain.state_dict())  # a kind-pool checkpoint
    assert from_plain.ids == ["x"] and from_plain.win_rate("x") == 0.5


def test_fictitious_settings_and_scores_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="weighting 'hard'"):
        FictitiousPool(weighting="hard")
    with pytest.raises(ValueError, match="decay 0"):
        FictitiousPool(decay=0)
    pool = fictitious("uniform", {"a": []})
    with pytest.raises(ValueError, match="score"):
        pool.record("a", 2.0)


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
