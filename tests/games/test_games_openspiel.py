"""OpenSpiel games behind the `Game` protocol (games/openspiel_adapter.py, issue 31 item 1)."""

from __future__ import annotations

import json
import random

import pyspiel
import pytest

import games
from games import (
    RandomOpponent,
    UnknownGameError,
    UnplayableGameError,
    extract_action,
    legal_actions_from_text,
    match_legal,
)
from games.openspiel_adapter import OpenSpielGame, display_name
from games.openspiel_catalog import CATALOG, build, listed_ids, random_moves, read


def new(game_id: str, seed: int = 0, **kwargs) -> OpenSpielGame:
    game = games.make(game_id, **kwargs)
    assert isinstance(game, OpenSpielGame)
    game.reset(seed)
    return game


def test_kuhn_poker_plays_by_name_and_pays_chips() -> None:
    game = new("openspiel:kuhn_poker")
    assert game.current_player == 0 and game.legal_actions(0) == ["[Pass]", "[Bet]"]
    assert game.legal_actions(1) == []
    text = game.observation(0)
    assert text.startswith("You are Player 0 in Kuhn Poker (OpenSpiel game kuhn_poker")
    # the information state: player 0's own card only, as OpenSpiel renders it
    assert game.state.information_state_string(0) in text
    assert text.endswith("Your available actions: [Pass], [Bet]\nChoose your action.")
    assert "Waiting for Player 0 to act." in game.observation(1)
    assert game.step("[bet]").valid  # any case, through games.match_legal
    assert game.legal_actions(1) == ["[Pass]", "[Bet]"]
    assert game.step("BET").valid  # brackets optional
    assert game.done and not game.truncated
    cards = game.state.history()[:2]
    winner = 0 if cards[0] > cards[1] else 1
    assert game.winner == winner and game.outcome() == {winner: 1.0, 1 - winner: -1.0}
    assert game.info["returns"] == {winner: 2.0, 1 - winner: -2.0}  # a called bet: 2 chips
    assert game.info["history"] == list(game.state.history())


def test_same_seed_same_deal_and_chance_follows_the_games_probabilities() -> None:
    deals = [tuple(new("openspiel:kuhn_poker", seed).state.history()) for seed in range(600)]
    assert deals[:50] == [tuple(new("openspiel:kuhn_poker", s).state.history()) for s in range(50)]
    counts = {deal: deals.count(deal) for deal in set(deals)}
    assert len(counts) == 6 and all(70 <= c <= 130 for c in counts.values())  # 1/6 each
    # liars_dice: both players' dice drawn before the first bid, each face equally likely
    faces = [new("openspiel:liars_dice", seed).state.history()[0] for seed in range(600)]
    assert all(60 <= faces.count(face) <= 140 for face in range(6))


def test_outcome_is_the_sign_of_the_returns_and_a_draw_is_zero() -> None:
    game = new("openspiel:tic_tac_toe")
    for cell in ("x(0,0)", "o(1,0)", "x(0,1)", "o(1,1)", "x(0,2)"):
        assert game.step(f"[{cell}]").valid
    assert game.winner == 0 and game.outcome() == {0: 1.0, 1: -1.0}
    assert game.reason == "Player 0 won (returns: Player 0 +1, Player 1 -1)"
    draw = new("openspiel:tic_tac_toe")
    for cell in ("x(0,0)", "o(1,1)", "x(2,2)", "o(0,1)", "x(2,1)", "o(2,0)", "x(0,2)", "o(1,2)",
                 "x(1,0)"):
        assert draw.step(f"[{cell}]").valid
    assert draw.done and draw.winner is None and draw.outcome() == {0: 0.0, 1: 0.0}
    assert draw.info["returns"] == {0: 0.0, 1: 0.0}


def test_an_illegal_name_ends_the_game_and_names_the_legal_ones() -> None:
    game = new("openspiel:kuhn_poker")
    result = game.step("[fold]")
    assert not result.valid and result.done and game.invalid_move_by == 0
    assert result.reason == "'[fold]' is not a legal action now; choose one of [Pass], [Bet]"
    assert game.outcome() == {0: -1.0, 1: 1.0}
    chess = new("openspiel:chess")
    reason = chess.step("[Ke2]").reason
    assert reason.endswith("(and 8 more)") and reason.count("[") == 1 + 12


def test_turn_limit_is_a_draw() -> None:
    game = new("openspiel:chess", max_turns=4)
    opponent = RandomOpponent(0)
    while not game.done:
        game.step(opponent.act(game, game.current_player))
    assert game.truncated and game.winner is None and game.turn == 4


def test_names_with_brackets_and_clashing_case_are_made_playable() -> None:
    assert display_name("[P0]Bid: 1") == "(P0)Bid: 1"  # goofspiel
    assert display_name("[0,0,10]") == "0,0,10"  # blotto
    assert display_name("a\nb") == "a b"
    # chess: a pawn and a bishop taking on the same square are "bxa6" and "Bxa6", equal but for
    # case; seeded random play reaches such a position on its 26th move
    game = new("openspiel:chess", seed=0, max_turns=400)
    opponent = RandomOpponent(0)
    while not any("(action " in name for name in game.legal_actions(game.current_player)):
        game.step(opponent.act(game, game.current_player))
    player = game.current_player
    legal = game.legal_actions(player)
    assert game.turn == 25
    assert [n for n in legal if "(action " in n] == ["[bxa6 (action 714)]", "[Bxa6 (action 846)]"]
    keys = [games.actions.normalize_action(name) for name in legal]
    assert len(set(keys)) == len(keys)  # every name matches one action only
    for name in legal:
        assert match_legal(name, legal) == name
        assert game.action_name(player, game.action_id(player, name)) == name
    assert game.action_id(player, "bxa6") is None  # ambiguous as plain text: no action
    assert game.step("[Bxa6 (action 846)]").valid
    assert game.state.history()[-1] == 846


def test_set_state_renders_exactly_as_in_play() -> None:
    """The exploitability code's path: any pyspiel state, put into a fresh adapter, reads as
    the same observation, legal names and ids as the game that played to it."""
    for game_id in ("openspiel:kuhn_poker", "openspiel:leduc_poker", "openspiel:liars_dice",
                    "openspiel:goofspiel(num_cards=4)", "openspiel:tic_tac_toe"):
        played = new(game_id, seed=3)
        opponent = RandomOpponent(3)
        while not played.done:
            player = played.current_player
            twin = games.make(game_id)
            twin.set_state(played.state)
            for seat in (0, 1):
                assert twin.observation(seat) == played.observation(seat)
                assert twin.legal_actions(seat) == played.legal_actions(seat)
            for name in played.legal_actions(player):
                action = played.action_id(player, name)
                assert twin.action_id(player, name) == action
                assert twin.action_name(player, action) == name
                raw = played.state.action_to_string(player, action)
                assert name == f"[{display_name(raw)}]"  # the game's own words
            played.step(opponent.act(played, player))
        twin = games.make(game_id)
        twin.set_state(played.state)
        assert twin.done and twin.winner == played.winner
        assert twin.info["returns"] == played.info["returns"]


def test_set_state_at_a_chance_node_waits_for_chance() -> None:
    game = games.make("openspiel:kuhn_poker")
    game.set_state(game.spiel_game.new_initial_state())
    assert game.current_player == -1 and not game.done
    assert game.legal_actions(0) == [] and game.legal_actions(1) == []
    assert "Waiting for chance to act." in game.observation(0)


def test_observation_shows_only_what_the_player_knows() -> None:
    game = new("openspiel:kuhn_poker", seed=1)
    mine, theirs = game.state.history()[:2]
    for seat, card in ((0, mine), (1, theirs)):
        text = game.observation(seat)
        assert f"information state):\n{card}\n" in text
    # perfect information: the position itself (OpenSpiel's observation string)
    board = new("openspiel:tic_tac_toe")
    board.step("[x(1,1)]")
    assert "The game now:\n...\n.x.\n..." in board.observation(1)


def test_the_prompt_listing_parses_back_and_a_boxed_name_is_matched() -> None:
    for game_id in ("openspiel:kuhn_poker", "openspiel:tic_tac_toe", "openspiel:connect_four",
                    "openspiel:liars_dice", "openspiel:goofspiel(num_cards=4)",
                    "openspiel:blotto", "openspiel:leduc_poker"):
        game = new(game_id)
        player = game.current_player
        legal = game.legal_actions(player)
        assert legal_actions_from_text(game.observation(player)) == legal
        for name in legal:
            boxed = extract_action(f"I choose \\boxed{{{name}}}")
            assert match_legal(boxed, legal) == name
            assert game.action_id(player, boxed) == game.action_id(player, name)


@pytest.mark.parametrize("game_id", listed_ids())
def test_every_listed_game_plays_random_games_legally(game_id: str) -> None:
    """Two seeded random games (at most 40 moves) of every playable OpenSpiel game: the listing
    parses back to the legal names, every named move is accepted, the other seat has none."""
    for seed in range(2):
        game = new(game_id, seed=seed, max_turns=40)
        opponent = RandomOpponent(seed)
        while not game.done:
            player = game.current_player
            legal = game.legal_actions(player)
            assert legal and legal_actions_from_text(game.observation(player)) == legal
            assert game.legal_actions(1 - player) == []
            assert game.step(opponent.act(game, player)).valid
        assert set(game.outcome()) == {0, 1}


def test_players_default_to_two_where_the_game_allows() -> None:
    game = games.make("openspiel:pig")
    assert game.spiel_game.num_players() == 2
    assert games.make("openspiel:kuhn_poker(players=2)").spiel_game.num_players() == 2


def test_simultaneous_games_are_played_turn_based_without_seeing_the_other_choice() -> None:
    seen = []
    for first in ("[Rock]", "[Paper]", "[Scissors]"):
        game = new("openspiel:matrix_rps")
        assert game.spiel_game.get_type().short_name == "turn_based_simultaneous_game"
        game.step(first)
        assert game.current_player == 1
        seen.append(game.observation(1))
    assert seen[0] == seen[1] == seen[2]  # player 1 cannot tell what player 0 chose
    game.step("[Paper]")  # after Scissors
    assert game.done and game.winner == 0 and game.info["returns"] == {0: 1.0, 1: -1.0}


@pytest.mark.parametrize(
    ("game_id", "error", "words"),
    [
        ("openspiel:no_such_game", UnknownGameError, "not in OpenSpiel's registry"),
        ("openspiel:kuhn_poker(players=3)", UnplayableGameError, "it has 3 players"),
        ("openspiel:dou_dizhu", UnplayableGameError, "it has 3 players"),
        ("openspiel:first_sealed_auction", UnplayableGameError, "general-sum"),
        ("openspiel:matrix_pd", UnplayableGameError, "general-sum"),
        ("openspiel:hanabi", UnplayableGameError, "cooperative"),
        ("openspiel:kuhn_poker(playerz=2)", UnplayableGameError,
         "OpenSpiel refused it: Unknown parameter 'playerz'"),
        ("openspiel:kuhn_poker(players=x)", UnplayableGameError, "Wrong type for parameter"),
        ("openspiel:kuhn_poker(players=", UnplayableGameError, "Missing closing bracket"),
        ("openspiel:2048", UnplayableGameError, "it has 1 player;"),
        ("openspiel:", UnknownGameError, "openspiel:<name>"),
    ],
)
def test_refusals_are_one_line(game_id, error, words, capfd) -> None:
    with pytest.raises(error) as raised:
        games.make(game_id)
    message = str(raised.value)
    assert words in message and "\n" not in message and game_id in message
    assert capfd.readouterr().err == ""  # OpenSpiel's own stderr print is muted


def test_catalog_is_current_and_lists_kind_and_length() -> None:
    catalog = read()
    assert catalog["open_spiel"] == "2.0.2"
    assert catalog["games"]["kuhn_poker"]["information"] == "imperfect"
    assert catalog["games"]["tic_tac_toe"]["information"] == "perfect"
    assert catalog["games"]["matrix_rps"]["turn_based"]
    assert "first_sealed_auction" in catalog["refused"]
    fresh = build(games=2)  # the same games are playable as when the file was written
    assert set(fresh["games"]) == set(catalog["games"])
    assert fresh["refused"] == catalog["refused"]
    kuhn = pyspiel.load_game("kuhn_poker")
    lengths = [random_moves(kuhn, seed) for seed in range(5)]
    assert catalog["games"]["kuhn_poker"]["random_moves"] == round(sum(lengths) / 5, 1)
    assert json.loads(CATALOG.read_text()) == catalog


def test_listing_names_the_openspiel_games() -> None:
    ids = games.list_games()
    assert "openspiel:kuhn_poker" in ids and "openspiel:leduc_poker" in ids
    assert ids.index("openspiel:kuhn_poker") < ids.index("textarena:KuhnPoker-v0")
    from games.registry import game_kind

    assert game_kind("openspiel:leduc_poker") == ("imperfect", read()["games"]["leduc_poker"]
                                                  ["random_moves"])
    assert game_kind("tictactoe") == ("perfect", None)
    assert game_kind("textarena:Nim-v0") == ("-", None)


def test_random_play_is_reproducible() -> None:
    def moves(seed: int) -> list[int]:
        game = new("openspiel:leduc_poker", seed)
        opponent = RandomOpponent(seed)
        while not game.done:
            game.step(opponent.act(game, game.current_player))
        return list(game.state.history())

    assert moves(5) == moves(5)
    assert len({tuple(moves(s)) for s in range(10)}) > 1
    random.seed(0)  # the global stream is not used
    first = moves(7)
    random.seed(1)
    assert moves(7) == first


def test_the_benchmark_plays_the_same_games_both_ways() -> None:
    from selfplay.bench.openspiel import adapter_game, bench_game, spiel_game

    for game_string in ("kuhn_poker", "liars_dice", "connect_four"):
        for seed in range(5):
            assert spiel_game(game_string, seed) == adapter_game(game_string, seed)
            game = new(f"openspiel:{game_string}", seed, max_turns=10**6)
            opponent = RandomOpponent(seed)
            while not game.done:
                game.step(opponent.act(game, game.current_player))
            assert adapter_game(game_string, seed, observe=True) == game.turn
    result = bench_game("kuhn_poker", games=5, repeats=1)
    assert result["ratio"] == result["pyspiel_games_per_s"] / result["adapter_games_per_s"]
    assert result["ratio"] > 0 and 2 <= result["moves_per_game"] <= 3
