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


# The prompt a model plays from, pinned word for word: a changed rule line or a wrong pot in
# the text changes what the policy is trained on as surely as a scoring bug.
RULES_TWO_ROUNDS = """\
Rules:
- The deck has three cards, J < Q < K. Each round both players ante 1 chip and each gets one \
private card.
- [check]: pass without betting (only when no bet is on the table).
- [bet]: put 1 more chip into the pot (only when no bet is on the table).
- [call]: match your opponent's bet.
- [fold]: give up the round; your opponent takes the pot.
- If nobody folds, the higher card takes the pot at the showdown.
- The first player alternates between rounds.
- After 2 rounds the player with more chips wins the game; equal chips is a draw."""
ROUND_1 = (
    "Round 1: Player 0 [bet], Player 1 [call]; showdown: Player 0 had K, Player 1 had J. "
    "Player 0 won the pot of 4 chips."
)


def _observation(player: int, *sections: str) -> str:
    header = f"You are Player {player} in a 2-round game of Kuhn Poker."
    return "\n\n".join([header, RULES_TWO_ROUNDS, *sections])


def test_observations_word_for_word_through_a_two_round_game() -> None:
    """K v J bet/call (Player 0 +2), then J v Q with Player 1 first: check, bet, fold
    (Player 0 +1, pot 3): Player 0 wins +3 to −3."""
    game = KuhnPoker(rounds=2, deals=[("K", "J"), ("J", "Q")])
    assert game.info == {
        "game": "kuhn_poker",
        "winner": None,
        "reason": "",
        "invalid_move_by": None,
        "truncated": False,
        "turns": 0,
        "chips": {},  # before the first reset there is no deal yet
        "returns": {},
        "round": 0,
    }
    game.reset(0)
    assert game.observation(0) == _observation(
        0,
        "Chips won so far: Player 0: +0, Player 1: +0.",
        "Round 1 of 2. Your card: K. Pot: 2 chips.\n"
        "Your available actions: [check], [bet]\nChoose your action.",
    )
    # a valid move that does not end the game says nothing more
    assert play(game, ["[bet]", "[call]"]) == [StepResult(valid=True, done=False, reason="")] * 2
    chips = "Chips won so far: Player 0: +2, Player 1: -2."
    finished = "Finished rounds:\n" + ROUND_1
    assert game.observation(0) == _observation(
        0,
        finished,
        chips,
        "Round 2 of 2. Your card: J. Pot: 2 chips.\nWaiting for Player 1 to act.",
    )
    play(game, ["[check]", "[bet]"])
    assert game.observation(1) == _observation(
        1,
        finished,
        chips,
        "Round 2 of 2. Your card: Q. Pot: 3 chips.\n"
        "Actions this round: Player 1 [check], Player 0 [bet].\n"
        "Your available actions: [call], [fold]\nChoose your action.",
    )
    last = game.step("[fold]")
    reason = "Player 0 has more chips after 2 rounds (Player 0: +3, Player 1: -3 chips)"
    assert last == StepResult(valid=True, done=True, reason=reason)
    round_2 = (
        "Round 2: Player 1 [check], Player 0 [bet], Player 1 [fold]; Player 1 folded. "
        "Player 0 won the pot of 3 chips."
    )
    assert game.observation(0) == _observation(
        0,
        f"Finished rounds:\n{ROUND_1}\n{round_2}",
        "Chips won so far: Player 0: +3, Player 1: -3.",
        f"The game is over. {reason}.",
    )
    assert game.info == {
        "game": "kuhn_poker",
        "winner": 0,
        "reason": reason,
        "invalid_move_by": None,
        "truncated": False,
        "turns": 5,
        "chips": {0: 3, 1: -3},
        "returns": {0: 3, 1: -3},  # the payoff in chips (SPIRAL's reward: payoff)
        "round": 2,
    }
    assert game.round_log[1] == {
        "round": 2,
        "cards": {0: "J", 1: "Q"},
        "moves": [(1, "check"), (0, "bet"), (1, "fold")],
        "winner": 0,
        "pot": 3,
    }


# ---- the NativeGame bookkeeping every native game inherits, through Kuhn Poker -------------


def test_bookkeeping_errors_name_the_game_and_the_problem() -> None:
    with pytest.raises(ValueError, match=r"^max_turns must be >= 1, got 0$"):
        KuhnPoker(max_turns=0)
    with pytest.raises(ValueError, match=r"^rounds must be >= 1, got 0$"):
        KuhnPoker(rounds=0)
    with pytest.raises(ValueError, match=r"^deals has 1 rounds, need 2$"):
        KuhnPoker(rounds=2, deals=[("K", "J")])
    with pytest.raises(ValueError, match=r"^bad deal \('K', 'X'\): two different cards from"):
        KuhnPoker(rounds=1, deals=[("K", "X")])
    game = new_game([("K", "J")])
    with pytest.raises(ValueError, match=r"^kuhn_poker: no player 2$"):
        game.observation(2)
    with pytest.raises(ValueError, match=r"^kuhn_poker: no player -1$"):
        game.legal_actions(-1)
    with pytest.raises(GameOverError, match=r"^kuhn_poker: outcome\(\) called before the game"):
        game.outcome()
    game.step("[raise]")
    with pytest.raises(GameOverError, match=r"^kuhn_poker: step\(\) called on a finished game$"):
        game.step("[check]")


def test_an_invalid_move_is_reported_word_for_word() -> None:
    game = new_game([("K", "J")])
    game.step("[bet]")
    result = game.step("[check]")
    why = "'[check]' is not allowed now; choose one of [call], [fold]"
    assert result == StepResult(valid=False, done=True, reason=why)
    assert game.reason == f"Player 1 made an invalid move: {why}"
    assert game.info["invalid_move_by"] == 1 and game.info["turns"] == 2


def test_reset_clears_a_finished_game() -> None:
    game = KuhnPoker(rounds=2, max_turns=1)
    game.reset(5)
    game.step("[check]")  # the turn limit: a truncated draw
    assert game.truncated and game.done
    game.reset(5)
    assert (game.done, game.winner, game.reason) == (False, None, "")
    assert (game.invalid_move_by, game.truncated, game.turn, game.current_player) == (
        None,
        False,
        0,
        0,
    )
    game.step("[fold]")  # invalid opening
    game.reset(6)
    assert game.invalid_move_by is None and game.winner is None and not game.done


def test_the_turn_limit_draws_a_game_in_progress_but_not_one_that_just_ended() -> None:
    # Player 0 is 1 chip up after round 1, but the limit cuts round 2 off: a draw all the same
    game = KuhnPoker(rounds=2, deals=[("K", "J"), ("J", "Q")], max_turns=3)
    game.reset(0)
    play(game, ["[check]", "[check]", "[check]"])
    assert game.chips == {0: 1, 1: -1}
    assert game.done and game.truncated and game.winner is None
    assert game.reason == "turn limit of 3 turns reached: draw"
    assert game.outcome() == {0: 0.0, 1: 0.0}
    # a game whose last move lands exactly on the limit ends on its own terms
    game = KuhnPoker(rounds=1, deals=[("J", "Q")], max_turns=2)
    game.reset(0)
    last = play(game, ["[check]", "[check]"])[-1]
    assert last.done and not game.truncated and game.winner == 1
    assert (
        last.reason
        == game.reason
        == ("Player 1 has more chips after 1 rounds (Player 0: -1, Player 1: +1 chips)")
    )
