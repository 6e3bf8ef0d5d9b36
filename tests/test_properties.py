"""Property-based tests (hypothesis): game outcomes and loss aggregation for any input.

- Any sequence of legal moves in a native game ends, within the turn limit, in a zero-sum
  outcome (+1/−1) or a draw (0/0); a draw is exactly "no winner"; a game cut off at the turn
  limit is a draw; Kuhn Poker's winner is the chip leader and chips are conserved.
- An invalid move at any point ends the game: the mover −1, the other +1.
- Aggregation coefficients (docs/algorithms.md#losses) sum to the right total for any batch shape.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from games import KuhnPoker, SimpleNegotiation, TicTacToe, candidate_actions
from selfplay.rl.losses import AGGREGATIONS, token_coefficients
from selfplay.types import Sample, Turn

GAMES = {
    "tictactoe": lambda max_turns: TicTacToe(max_turns=max_turns),
    "kuhn_poker": lambda max_turns: KuhnPoker(rounds=3, max_turns=max_turns),
    "simple_negotiation": lambda max_turns: SimpleNegotiation(max_turns=max_turns),
}
FAST = settings(max_examples=60, deadline=None)


def for_every_game(**strategies):
    """A property of every game: one test per game (``name``), each over FAST's examples of a
    ``seed``, moves chosen by index (``choices``) and the ``strategies`` given."""
    moves = st.lists(st.integers(0, 1000), min_size=1, max_size=strategies.pop("max_moves"))
    drawn = given(seed=st.integers(0, 2**31 - 1), choices=moves, **strategies)
    return lambda test: pytest.mark.parametrize("name", sorted(GAMES))(FAST(drawn(test)))


def _play(game, choices: list[int]) -> list[tuple[int, str]]:
    """Legal moves picked by ``choices`` (cycled); negotiation, a free-form game, offers its
    example actions, which are valid by construction."""
    taken, turn = [], 0
    while not game.done:
        player = game.current_player
        options = candidate_actions(game, player)
        move = options[choices[turn % len(choices)] % len(options)]
        result = game.step(move)
        assert result.valid is True and result.done is game.done, (move, result.reason)
        taken.append((player, move))
        turn += 1
        assert turn <= game.max_turns  # the turn limit always ends the game
    return taken


def _assert_zero_sum_or_draw(game) -> None:
    outcome = game.outcome()
    assert set(outcome) == {0, 1}
    assert sorted(outcome.values()) in ([-1.0, 1.0], [0.0, 0.0])
    assert sum(outcome.values()) == 0.0
    if game.winner is None:
        assert outcome == {0: 0.0, 1: 0.0}
    else:
        assert outcome[game.winner] == 1.0 and outcome[1 - game.winner] == -1.0


@for_every_game(max_moves=60, max_turns=st.integers(1, 60))
def test_legal_play_ends_zero_sum_or_draw(name, seed, choices, max_turns):
    game = GAMES[name](max_turns)
    game.reset(seed)
    _play(game, choices)
    _assert_zero_sum_or_draw(game)
    assert game.invalid_move_by is None
    if game.truncated:
        assert game.winner is None and game.turn == max_turns
    if isinstance(game, KuhnPoker) and not game.truncated:
        assert game.chips[0] + game.chips[1] == 0  # chips only move between the players
        leader = None if game.chips[0] == game.chips[1] else max((0, 1), key=game.chips.get)
        assert game.winner == leader  # the chip leader, not the last round's winner


# moves that are invalid whatever the position
JUNK = {
    "tictactoe": ["[9]", "[-1]", "[raise]", "[4 5]"],
    "kuhn_poker": ["[raise]", "[99]", "[all in]"],
    "simple_negotiation": [
        "[Offer: I give 999 Ore -> you give 1 Wheat]",  # more than anyone owns (≤ 25)
        "[Offer: I give 1 Gold -> you give 1 Wheat]",  # no such resource
        "[Accept] [Deny]",  # two controls in one turn
    ],
}


@for_every_game(max_moves=20, invalid_at=st.integers(0, 12), junk_index=st.integers(0, 100))
def test_an_invalid_move_loses_for_the_mover(name, seed, choices, invalid_at, junk_index):
    game = GAMES[name](50)
    game.reset(seed)
    for turn in range(invalid_at):
        if game.done:
            return
        options = candidate_actions(game, game.current_player)
        game.step(options[choices[turn % len(choices)] % len(options)])
    if game.done:
        return
    mover = game.current_player
    junk = JUNK[name][junk_index % len(JUNK[name])]
    result = game.step(junk)
    assert result.valid is False and result.done is True, junk
    assert result.reason and f"Player {mover} made an invalid move" in game.reason
    assert game.invalid_move_by == mover and game.winner == 1 - mover
    assert game.outcome() == {mover: -1.0, 1 - mover: 1.0}


# ---------------------------------------------------------------- aggregation


def _sample(model_tokens: int, tool_tokens: int, group: str) -> Sample:
    mask = [1] * model_tokens + [0] * tool_tokens
    turn = Turn(
        role="r",
        prompt_ids=[1],
        completion_ids=[5] * len(mask),
        engine_logprobs=[0.0] * len(mask),
        loss_mask=mask,
        text="",
    )
    return Sample(turn=turn, advantage=1.0, group_id=group)


batches = st.lists(
    st.tuples(st.integers(1, 40), st.integers(0, 10), st.sampled_from("abcde")),
    min_size=1,
    max_size=24,
)


@FAST
@given(shape=batches, max_new_tokens=st.integers(40, 512))
def test_aggregation_coefficients_sum_to_the_right_total(shape, max_new_tokens):
    """Σ over model tokens of c_t: token-mean 1; seq-mean-token-mean 1 (each sequence 1/n);
    prompt-level 1 (each group 1/groups); Dr. GRPO Σ lengths / (n · max_new_tokens)."""
    samples = [_sample(m, t, g) for m, t, g in shape]
    lengths = [m for m, _, _ in shape]
    n, groups = len(samples), {g for _, _, g in shape}
    totals = {}
    for mode in AGGREGATIONS:
        coefficients = token_coefficients(samples, mode, max_new_tokens)
        assert len(coefficients) == n and all(c > 0 for c in coefficients)
        totals[mode] = sum(c * m for c, m in zip(coefficients, lengths, strict=True))
        per_sequence = [c * m for c, m in zip(coefficients, lengths, strict=True)]
        if mode == "seq-mean-token-mean":
            assert per_sequence == pytest.approx([1 / n] * n)
        if mode == "prompt-level":
            for group in groups:
                mass = sum(
                    s for s, (_, _, g) in zip(per_sequence, shape, strict=True) if g == group
                )
                assert mass == pytest.approx(1 / len(groups))
        if mode == "token-mean":
            assert len(set(coefficients)) == 1
    assert totals["token-mean"] == pytest.approx(1.0)
    assert totals["seq-mean-token-mean"] == pytest.approx(1.0)
    assert totals["prompt-level"] == pytest.approx(1.0)
    assert totals["seq-mean-token-sum-norm"] == pytest.approx(sum(lengths) / (n * max_new_tokens))


def test_kuhn_round_log_and_history_after_a_showdown_and_a_fold():
    """The history both players read, and the structured log analysis reads (mutation testing
    found both unchecked): bet/call showdown K vs Q, then check/bet/fold."""
    game = KuhnPoker(rounds=2, deals=[("K", "Q"), ("J", "Q")])
    game.reset(0)
    for move in ["[bet]", "[call]", "[check]", "[bet]", "[fold]"]:
        assert game.step(move).valid is True
    assert game.round_log == [
        {
            "round": 1,
            "cards": {0: "K", 1: "Q"},
            "moves": [(0, "bet"), (1, "call")],
            "winner": 0,
            "pot": 4,
        },
        {
            "round": 2,
            "cards": {0: "J", 1: "Q"},
            "moves": [(1, "check"), (0, "bet"), (1, "fold")],
            "winner": 0,
            "pot": 3,
        },
    ]
    assert game.results == [
        "Round 1: Player 0 [bet], Player 1 [call]; showdown: Player 0 had K, Player 1 had Q. "
        "Player 0 won the pot of 4 chips.",
        "Round 2: Player 1 [check], Player 0 [bet], Player 1 [fold]; Player 1 folded. "
        "Player 0 won the pot of 3 chips.",
    ]
    assert game.chips == {0: 3, 1: -3} and game.winner == 0
    assert (
        game.reason == "Player 0 has more chips after 2 rounds (Player 0: +3, Player 1: -3 chips)"
    )
