"""Our games against OpenSpiel's rules, exhaustively (issue 31, item 4).

- Kuhn Poker, one round: all 30 terminal histories (6 deals x 5 betting sequences) in our
  native `KuhnPoker`, in TextArena's `KuhnPoker-v0` through the adapter, and in OpenSpiel's
  `kuhn_poker`: the same legal moves at every decision point and the same payoff in chips.
- Tic-tac-toe: every reachable position (5,478) in our native `TicTacToe` and in OpenSpiel's
  `tic_tac_toe`: the same legal cells, the same ending and the same winner.

OpenSpiel names Kuhn's moves `Pass` (check, or fold facing a bet) and `Bet` (bet, or call
facing one), deals J, Q, K as 0, 1, 2, and player 0 moves first. TextArena's player 1 moves
first in round 1, so OpenSpiel's player 0 is TextArena's player 1 there.
"""

from __future__ import annotations

import itertools

import pyspiel
import pytest

from games import KuhnPoker, TextArenaGame, TicTacToe
from games.actions import normalize_action

CARDS = ("J", "Q", "K")
# OpenSpiel's action for each of our moves, and ours for each of its by whether a bet is open
SPIEL_ACTION = {"check": 0, "fold": 0, "bet": 1, "call": 1}
OUR_MOVE = {(False, 0): "check", (False, 1): "bet", (True, 0): "fold", (True, 1): "call"}


def spiel_histories() -> list[tuple[tuple[str, str], list[str], tuple[float, float]]]:
    """Every terminal history of OpenSpiel's one-round Kuhn Poker as (deal, our moves, returns),
    checking on the way that OpenSpiel's legal moves, renamed, are the two we expect."""
    game = pyspiel.load_game("kuhn_poker")
    found = []

    def walk(state, moves: list[str], deal: tuple[str, str]) -> None:
        if state.is_terminal():
            found.append((deal, moves, tuple(state.returns())))
            return
        facing = bool(moves) and moves[-1] == "bet"
        player = state.current_player()
        names = [state.action_to_string(player, a) for a in state.legal_actions()]
        assert names == ["Pass", "Bet"]
        for action in state.legal_actions():
            child = state.clone()
            child.apply_action(action)
            walk(child, [*moves, OUR_MOVE[(facing, action)]], deal)

    for c0, c1 in itertools.permutations(range(3), 2):
        state = game.new_initial_state()
        state.apply_action(c0)
        state.apply_action(c1)
        walk(state, [], (CARDS[c0], CARDS[c1]))
    return found


HISTORIES = spiel_histories()


def our_legal(moves: list[str]) -> list[str]:
    return ["[call]", "[fold]"] if moves and moves[-1] == "bet" else ["[check]", "[bet]"]


def test_openspiel_has_30_one_round_histories_and_12_are_called_bets() -> None:
    assert len(HISTORIES) == 30
    called = [h for h in HISTORIES if h[1][-1] == "call"]
    assert len(called) == 12 and all(abs(returns[0]) == 2 for _, _, returns in called)


@pytest.mark.parametrize(("deal", "moves", "returns"), HISTORIES,
                         ids=[f"{d[0]}{d[1]}-{'-'.join(m)}" for d, m, _ in HISTORIES])
def test_native_kuhn_poker_agrees_with_openspiel(deal, moves, returns) -> None:
    game = KuhnPoker(rounds=1, deals=[deal])
    game.reset(0)
    for i, move in enumerate(moves):
        player = game.current_player
        assert player == i % 2  # player 0 opens, as in OpenSpiel
        assert game.legal_actions(player) == our_legal(moves[:i])
        assert game.step(f"[{move}]").valid
    assert game.done
    assert game.info["returns"] == {0: returns[0], 1: returns[1]}  # chips, as OpenSpiel pays
    expected_winner = 0 if returns[0] > 0 else 1
    assert game.winner == expected_winner


def textarena_round(deal: tuple[str, str], moves: list[str], by_the_rules: bool) -> dict:
    """One round of TextArena's KuhnPoker-v0 with OpenSpiel's deal (its player 0 is TextArena's
    round-1 opener, player 1): the legal moves seen, and each OpenSpiel seat's chips."""
    game = TextArenaGame("KuhnPoker-v0", by_the_rules=by_the_rules)
    game.reset(0)
    opener = game.current_player
    assert opener == 1  # TextArena's first round opens with player 1
    env = game.env.state.game_state
    env["player_cards"] = {opener: CARDS.index(deal[0]), 1 - opener: CARDS.index(deal[1])}
    legal_seen = []
    for move in moves:
        legal_seen.append(sorted(map(normalize_action, game.legal_actions(game.current_player))))
        assert game.step(f"[{move}]").valid
    assert env["current_round"] == 2  # the round is over (and round 2 has taken its ante)
    ante = 1
    chips = {seat: env["player_chips"][seat] + ante for seat in (0, 1)}
    net = game.info.get("returns")
    return {
        "legal": legal_seen,
        "chips": (chips[opener], chips[1 - opener]),  # in OpenSpiel's seats
        "net": None if net is None else (net[opener], net[1 - opener]),
    }


def test_textarena_kuhn_poker_as_shipped_pays_a_called_bet_1_chip_not_2() -> None:
    """The bug, in textarena 0.7.4 itself: bet and call never add chips to the pot, so the 12
    histories that end in a call pay 1 chip where Kuhn's rules pay 2; the other 18 agree."""
    wrong = []
    for deal, moves, returns in HISTORIES:
        played = textarena_round(deal, moves, by_the_rules=False)
        if played["chips"] != returns:
            wrong.append((deal, moves, played["chips"], returns))
    assert len(wrong) == 12
    assert all(m[-1] == "call" and abs(c[0]) == 1 and abs(r[0]) == 2 for _, m, c, r in wrong)


@pytest.mark.parametrize(("deal", "moves", "returns"), HISTORIES,
                         ids=[f"{d[0]}{d[1]}-{'-'.join(m)}" for d, m, _ in HISTORIES])
def test_textarena_kuhn_poker_through_the_adapter_agrees_with_openspiel(
    deal, moves, returns
) -> None:
    played = textarena_round(deal, moves, by_the_rules=True)
    assert played["legal"] == [sorted(map(normalize_action, our_legal(moves[:i])))
                               for i in range(len(moves))]
    assert played["chips"] == returns  # the env's own chip count, its messages' numbers
    assert played["net"] == returns  # info["returns"]: computed from the round's history


def test_textarena_kuhn_poker_game_goes_to_the_chip_leader_by_the_rules() -> None:
    """Three rounds where the wrong payoff would flip the result: Player 1 (the opener) wins one
    called bet (+2) and loses two check-check showdowns (-1 each): +0 by the rules, a draw; as
    shipped it counts +1 -1 -1 and Player 0 wins."""
    results = {}
    for fix in (True, False):
        game = TextArenaGame("KuhnPoker-v0", by_the_rules=fix)
        game.reset(0)
        env = game.env.state.game_state
        rounds = [({1: 2, 0: 0}, ["[bet]", "[call]"]), ({0: 2, 1: 1}, ["[check]", "[check]"]),
                  ({1: 0, 0: 2}, ["[check]", "[check]"])]
        for cards, moves in rounds:
            env["player_cards"] = cards
            for move in moves:
                assert game.step(move).valid
        assert game.done
        results[fix] = (game.winner, game.info.get("returns"))
    assert results[True] == (None, {0: 0, 1: 0})
    assert results[False] == (0, None)


# ---- tic-tac-toe: every reachable position ---------------------------------------------------
def reachable_positions() -> dict[tuple, list[int]]:
    """Every position of our native game reachable by legal play (board and player to move),
    with one move sequence that reaches it."""
    found: dict[tuple, list[int]] = {}
    frontier = [[]]
    while frontier:
        moves = frontier.pop()
        game = replay_native(moves)
        key = (tuple(game.board), game.current_player if not game.done else None)
        if key in found:
            continue
        found[key] = moves
        if not game.done:
            legal = game.legal_actions(game.current_player) or []
            frontier += [[*moves, int(a.strip("[]"))] for a in legal]
    return found


def replay_native(moves: list[int]) -> TicTacToe:
    game = TicTacToe()
    game.reset(0)
    for cell in moves:
        assert game.step(f"[{cell}]").valid
    return game


def test_native_tictactoe_agrees_with_openspiel_on_every_reachable_position() -> None:
    positions = reachable_positions()
    assert len(positions) == 5478  # the known count, the empty board included
    spiel = pyspiel.load_game("tic_tac_toe")
    endings = {"win": 0, "draw": 0}
    for moves in positions.values():
        ours = replay_native(moves)
        state = spiel.new_initial_state()
        for cell in moves:
            state.apply_action(cell)  # OpenSpiel's action for cell (r, c) is 3r + c, as ours
        assert ours.done == state.is_terminal(), moves
        if ours.done:
            r0 = state.returns()[0]
            assert ours.winner == (None if r0 == 0 else 0 if r0 > 0 else 1), moves
            endings["draw" if ours.winner is None else "win"] += 1
            continue
        player = ours.current_player
        assert player == state.current_player()
        spiel_cells = [int(a) for a in state.legal_actions()]
        assert ours.legal_actions(player) == [f"[{c}]" for c in spiel_cells], moves
        mark = "x" if player == 0 else "o"
        assert [state.action_to_string(player, c) for c in spiel_cells] == [
            f"{mark}({c // 3},{c % 3})" for c in spiel_cells
        ]
    assert endings == {"win": 942, "draw": 16}  # 958 terminal positions, 16 of them full draws
