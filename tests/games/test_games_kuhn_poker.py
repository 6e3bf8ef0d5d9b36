from __future__ import annotations

import pytest

from games import KuhnPoker, RandomOpponent
from games.base import Game, GameOverError, StepResult


def play(game: Game, actions: list[str]) -> list[StepResult]:
    """Step `actions` in order; return the results."""
    return [game.step(action) for action in actions]


# Net chips for the winner of a round, by betting sequence (the loser loses the same).
ROUND_PAYOFF = {
    ("check", "check"): 1,
    ("bet", "call"): 2,
    ("check", "bet", "call"): 2,
    ("bet", "fold"): 1,
    ("check", "bet", "fold"): 1,
}


def new_game(deals: list[tuple[str, str]], seed: int = 0) -> KuhnPoker:
    game = KuhnPoker(rounds=len(deals), deals=deals)
    game.reset(seed)
    return game


def test_last_round_winner_is_not_the_game_winner() -> None:
    # Round 1: Player 0 (K) bets, Player 1 (J) calls: Player 0 wins 2.
    # Round 2: Player 1 starts, both check, Player 1 (Q) beats J: Player 1 wins 1.
    game = new_game([("K", "J"), ("J", "Q")])
    play(game, ["[bet]", "[call]"])
    assert game.chips == {0: 2, 1: -2} and game.current_player == 1
    play(game, ["[check]", "[check]"])
    assert game.round_log[-1]["winner"] == 1  # the last round went to Player 1 ...
    assert game.done and game.chips == {0: 1, 1: -1}
    assert game.winner == 0  # ... but Player 0 leads on chips and wins the game
    assert game.outcome() == {0: 1.0, 1: -1.0}


@pytest.mark.parametrize(
    ("cards", "moves", "chips"),
    [
        (("K", "J"), ["[check]", "[check]"], {0: 1, 1: -1}),
        (("J", "K"), ["[check]", "[check]"], {0: -1, 1: 1}),
        (("Q", "K"), ["[bet]", "[call]"], {0: -2, 1: 2}),
        (("J", "K"), ["[bet]", "[fold]"], {0: 1, 1: -1}),  # the bluff works
        (("K", "Q"), ["[check]", "[bet]", "[call]"], {0: 2, 1: -2}),
        (("K", "Q"), ["[check]", "[bet]", "[fold]"], {0: -1, 1: 1}),
    ],
)
def test_single_round_payoffs(
    cards: tuple[str, str], moves: list[str], chips: dict[int, int]
) -> None:
    game = new_game([cards])
    results = play(game, moves)
    assert all(r.valid for r in results)
    assert game.done and game.chips == chips
    assert game.winner == (0 if chips[0] > 0 else 1)


def test_equal_chips_is_a_draw() -> None:
    game = new_game([("K", "J"), ("K", "J")])
    play(game, ["[check]", "[check]"])  # Player 0 +1
    play(game, ["[check]", "[check]"])  # Player 1 starts; Player 0's K wins again: +2
    assert game.winner == 0
    game = new_game([("K", "J"), ("J", "K")])
    play(game, ["[bet]", "[call]", "[bet]", "[call]"])
    assert game.chips == {0: 0, 1: 0} and game.winner is None
    assert game.outcome() == {0: 0.0, 1: 0.0} and "draw" in game.reason


def test_legal_actions_follow_the_betting() -> None:
    game = new_game([("K", "J")])
    assert game.legal_actions(0) == ["[check]", "[bet]"]
    assert game.legal_actions(1) == []  # not Player 1's turn
    game.step("[check]")
    assert game.legal_actions(1) == ["[check]", "[bet]"]
    game.step("[bet]")
    assert game.legal_actions(0) == ["[call]", "[fold]"]


@pytest.mark.parametrize("bad", ["[call]", "[fold]", "[raise]", "bet please"])
def test_illegal_opening_ends_the_game(bad: str) -> None:
    game = new_game([("K", "J"), ("Q", "K")])
    result = game.step(bad)
    assert not result.valid and result.done and game.done
    assert game.invalid_move_by == 0 and game.winner == 1
    assert game.outcome() == {0: -1.0, 1: 1.0}
    with pytest.raises(GameOverError):
        game.step("[check]")


def test_check_when_facing_a_bet_is_invalid() -> None:
    game = new_game([("K", "J")])
    game.step("[bet]")
    result = game.step("[check]")
    assert not result.valid and game.invalid_move_by == 1 and game.winner == 0


def test_actions_are_case_insensitive() -> None:
    game = new_game([("K", "J")])
    assert game.step("[Bet]").valid and game.step("[ CALL ]").valid
    assert game.chips == {0: 2, 1: -2}


def test_observation_shows_own_card_only_and_lists_actions() -> None:
    game = new_game([("K", "J")])
    text0, text1 = game.observation(0), game.observation(1)
    assert "Your card: K" in text0 and "Your card: J" in text1
    assert "J" not in text0.split("Your card: K")[1].split("\n")[0]
    assert "[check], [bet]" in text0 and "Choose your action" in text0
    assert "Waiting for Player 0" in text1


def test_first_player_alternates_and_default_is_five_rounds() -> None:
    game = KuhnPoker()
    game.reset(3)
    assert game.rounds == 5
    starters = []
    while not game.done:
        if not game.moves:
            starters.append(game.current_player)
        game.step(game.legal_actions(game.current_player)[0])  # always check
    assert starters == [0, 1, 0, 1, 0]


def test_random_games_are_scored_by_chip_totals() -> None:
    """Recompute chips from the round log with an independent payoff table."""
    last_round_would_mis_score = 0
    for seed in range(300):
        game = KuhnPoker(rounds=5)
        game.reset(seed)
        opponent = RandomOpponent(seed)
        while not game.done:
            assert game.step(opponent.act(game, game.current_player)).valid
        chips = {0: 0, 1: 0}
        for record in game.round_log:
            payoff = ROUND_PAYOFF[tuple(move for _, move in record["moves"])]
            chips[record["winner"]] += payoff
            chips[1 - record["winner"]] -= payoff
        assert chips == game.chips
        leader = None if chips[0] == chips[1] else (0 if chips[0] > chips[1] else 1)
        assert game.winner == leader
        if game.round_log[-1]["winner"] != leader:
            last_round_would_mis_score += 1
    assert last_round_would_mis_score > 50  # the published bug would show up often


def test_same_seed_same_cards() -> None:
    a, b = KuhnPoker(), KuhnPoker()
    a.reset(11)
    b.reset(11)
    assert a.cards == b.cards


def test_bad_configuration() -> None:
    with pytest.raises(ValueError):
        KuhnPoker(rounds=0)
    with pytest.raises(ValueError):
        KuhnPoker(rounds=2, deals=[("K", "K"), ("J", "Q")])
    with pytest.raises(ValueError):
        KuhnPoker(rounds=2, deals=[("K", "J")])
