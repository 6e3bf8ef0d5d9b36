"""Bots that play well (games/bots.py): MCTS, exact alpha-beta and CFR+ as opponents of our
games; their moves are legal, they play as strong as they should, and a game a bot cannot play
(fairly) is refused in one line."""

from __future__ import annotations

import pyspiel
import pytest
from open_spiel.python.algorithms import minimax

import games
from games import RandomOpponent, bots
from games.kuhn_poker import KuhnPoker
from games.kuhn_poker import to_openspiel as kuhn_to_openspiel
from games.tictactoe import to_openspiel as tictactoe_to_openspiel

PLAYABLE = [  # (bot, game id, game kwargs)
    ("mcts:50", "openspiel:tic_tac_toe", {}),
    ("mcts:50", "tictactoe", {}),
    ("mcts:20", "openspiel:connect_four", {}),
    ("mcts:20", "openspiel:backgammon", {}),  # chance in a perfect-information game
    ("alphabeta", "openspiel:tic_tac_toe", {}),
    ("alphabeta", "tictactoe", {}),
    ("alphabeta", "openspiel:nim", {}),
    ("cfr:50", "openspiel:kuhn_poker", {}),
    ("cfr:50", "kuhn_poker", {}),  # five rounds, the first player alternating
    ("cfr:50", "kuhn_poker", {"rounds": 1}),
    ("cfr:20", "openspiel:leduc_poker", {}),
    ("cfr:20", "openspiel:goofspiel(num_cards=3)", {}),  # simultaneous, played turn-based
]


def play(game: games.Game, players: dict, seed: int) -> games.Game:
    """One game to its end; every move must be legal."""
    game.reset(seed)
    while not game.done:
        player = game.current_player
        move = players[player].act(game, player)
        assert move in game.legal_actions(player), (move, game.legal_actions(player))
        assert game.step(move).valid
    return game


@pytest.mark.parametrize(("name", "game_id", "kwargs"), PLAYABLE,
                         ids=[f"{n}-{g}-{k}" for n, g, k in PLAYABLE])
def test_a_bot_plays_only_legal_moves(name, game_id, kwargs):
    game = games.make(game_id, max_turns=30, **kwargs)
    bots.check(name, game)
    for seed in range(2):
        play(game, {seed: bots.make(name, seed), 1 - seed: RandomOpponent(seed)}, seed)


def test_the_same_seed_plays_the_same_moves():
    def moves(seed):
        game = play(games.make("openspiel:leduc_poker"),
                    {0: bots.make("cfr:20", seed), 1: bots.make("cfr:20", seed + 1)}, 0)
        return game.info["history"]

    assert moves(3) == moves(3)
    assert len({tuple(moves(s)) for s in range(8)}) > 1  # sampled from a mixed strategy


def results_against_random(name: str, game_id: str, seeds: range) -> list[float]:
    """The bot's outcomes against the random player, in both seats for every seed."""
    out = []
    for seed in seeds:
        for seat in (0, 1):
            game = play(games.make(game_id),
                        {seat: bots.make(name, seed), 1 - seat: RandomOpponent(seed)}, seed)
            out.append(game.outcome()[seat])
    return out


def test_mcts_at_a_large_budget_never_loses_tic_tac_toe_to_random_play():
    results = results_against_random("mcts:1000", "openspiel:tic_tac_toe", range(4))
    assert min(results) >= 0 and sum(r > 0 for r in results) >= 6


@pytest.mark.parametrize("game_id", ["openspiel:tic_tac_toe", "tictactoe"])
def test_alphabeta_never_loses_and_draws_against_itself(game_id):
    assert min(results_against_random("alphabeta", game_id, range(20))) >= 0
    for seed in range(4):  # best play on both sides is a draw, whatever ties are drawn
        game = play(games.make(game_id),
                    {0: bots.make("alphabeta", seed), 1: bots.make("alphabeta", seed + 7)}, seed)
        assert game.winner is None and not game.truncated


def test_alphabeta_values_are_openspiels_alpha_beta_values():
    spiel = pyspiel.load_game("tic_tac_toe")
    values = bots.solved_values(spiel)
    assert len(values) == 5478  # every reachable position (5,478), solved once
    state = spiel.new_initial_state()
    for action in (4, 0, 8, 2):  # a few positions along one game
        ours = values[bots._key(state)][0]
        theirs, _ = minimax.alpha_beta_search(spiel, state=state.clone(), maximizing_player_id=0)
        assert ours == theirs
        state.apply_action(action)


@pytest.mark.parametrize("game", ["kuhn_poker", "leduc_poker"])
def test_cfr_strategy_is_close_to_nash(game):
    spiel = pyspiel.load_game(game)
    iterations = 200 if game == "kuhn_poker" else 100
    gap = pyspiel.exploitability(spiel, bots.cfr_policy(spiel, iterations))
    assert gap < (0.01 if game == "kuhn_poker" else 0.02)
    # the default (500 iterations) on Kuhn Poker: OpenSpiel's measured 1.7e-4
    if game == "kuhn_poker":
        assert pyspiel.exploitability(spiel, bots.cfr_policy(spiel, 500)) < 0.001


def test_cfr_moves_follow_the_strategy_at_the_information_state():
    """Holding the jack, facing a bet, Kuhn's Nash folds always: the bot never calls."""
    game = KuhnPoker(rounds=1, deals=[("Q", "J")])
    game.reset(0)
    game.step("[bet]")
    bot = bots.make("cfr", 0)
    assert {bot.act(game, 1) for _ in range(50)} == {"[fold]"}


def test_native_kuhn_rounds_map_to_openspiels_game_with_the_rounds_first_player_as_player_0():
    spiel = pyspiel.load_game("kuhn_poker")
    game = KuhnPoker(rounds=2, deals=[("K", "J"), ("Q", "K")])
    game.reset(0)
    game.step("[check]")
    game.step("[check]")  # round 1 over; round 2 opens with Player 1, holding K
    state = kuhn_to_openspiel(game, spiel)
    assert state.current_player() == 0
    assert state.information_state_string(0) == "2"  # OpenSpiel's player 0 holds K (card 2)
    game.step("[bet]")
    state = kuhn_to_openspiel(game, spiel)
    assert state.current_player() == 1 and state.information_state_string(1) == "1b"  # Q, bet


def test_native_tictactoe_maps_to_openspiels_board():
    game = games.make("tictactoe")
    game.reset(0)
    for cell in ("[4]", "[0]", "[8]"):
        game.step(cell)
    state = tictactoe_to_openspiel(game, pyspiel.load_game("tic_tac_toe"))
    assert str(state) == "o..\n.x.\n..x"


REFUSED = [  # (bot, game id, a piece of the one line)
    ("mcts", "openspiel:kuhn_poker", "imperfect-information"),
    ("mcts:100", "kuhn_poker", "imperfect-information"),
    ("alphabeta", "openspiel:connect_four", "more than 50,000 positions"),
    ("alphabeta", "openspiel:leduc_poker", "deterministic perfect-information"),
    ("alphabeta", "openspiel:backgammon", "deterministic perfect-information"),
    ("cfr", "openspiel:liars_dice", "more than 30,000 histories"),
    ("cfr", "openspiel:tic_tac_toe", "more than 30,000 histories"),
    ("mcts", "simple_negotiation", "bots play OpenSpiel games"),
    ("cfr", "textarena:TicTacToe-v0", "bots play OpenSpiel games"),
]


@pytest.mark.parametrize(("name", "game_id", "why"), REFUSED,
                         ids=[f"{n}-{g}" for n, g, _ in REFUSED])
def test_a_game_a_bot_cannot_play_is_refused_in_one_line(name, game_id, why):
    with pytest.raises(bots.BotError) as info:
        bots.check(name, games.make(game_id))
    message = str(info.value)
    assert "\n" not in message and why in message and game_id in message


@pytest.mark.parametrize(("name", "why"), [
    ("mctz", "unknown bot 'mctz'"), ("mcts:many", "unknown bot"), ("mcts:0", "at least 1"),
    ("alphabeta:3", "takes no number"), ("", "unknown bot"),
])
def test_a_name_that_is_no_bot_is_refused_in_one_line(name, why):
    with pytest.raises(bots.BotError) as info:
        bots.parse(name)
    assert "\n" not in str(info.value) and why in str(info.value)


def test_canonical_names():
    assert bots.parse("mcts").name == "mcts:1000" and bots.parse(" mcts : 100 ").name == "mcts:100"
    assert bots.parse("cfr").name == "cfr:500" and bots.parse("alphabeta").name == "alphabeta"
    assert bots.is_bot("cfr:20") and not bots.is_bot("random")
