from __future__ import annotations

import pytest

from games import OfferError, RandomOpponent, SimpleNegotiation, parse_offer
from games.base import Game, StepResult
from games.simple_negotiation import RESOURCES


def play(game: Game, actions: list[str]) -> list[StepResult]:
    """Step `actions` in order; return the results."""
    return [game.step(action) for action in actions]


EVEN = {r: 10 for r in RESOURCES}


Table = dict[int, dict[str, int]]


def new_game(
    turns: int = 10, inventories: Table | None = None, values: Table | None = None
) -> SimpleNegotiation:
    game = SimpleNegotiation(
        turns=turns, inventories=inventories or {0: EVEN, 1: EVEN}, values=values
    )
    game.reset(0)
    return game


@pytest.mark.parametrize(
    ("text", "give", "get"),
    [
        (
            "[Offer: I give 2 Wheat, 1 Wood -> you give 1 Brick]",
            {"Wheat": 2, "Wood": 1},
            {"Brick": 1},
        ),
        ("[Offer: 3 Sheep, 2 Ore -> 5 Brick]", {"Sheep": 3, "Ore": 2}, {"Brick": 5}),
        (
            "offer: i give 2 wheat and 3 woods -> you give me 1 bricks.",
            {"Wheat": 2, "Wood": 3},
            {"Brick": 1},
        ),
        ("[Offer I give 1 Ore ->you give 4 Sheep, 1 Wheat]", {"Ore": 1}, {"Sheep": 4, "Wheat": 1}),
        ("[Offer: 1 Wheat, 1 Wheat -> 1 Ore]", {"Wheat": 2}, {"Ore": 1}),
    ],
)
def test_offers_parse(text: str, give: dict[str, int], get: dict[str, int]) -> None:
    offer = parse_offer(text)
    assert offer.give == give and offer.get == get


@pytest.mark.parametrize(
    "text",
    [
        "[Offer: 2 Wheat 1 Brick]",  # no arrow
        "[Offer: 2 Wheat -> 1 Brick -> 1 Ore]",  # two arrows
        "[Offer: 2 Gold -> 1 Brick]",  # unknown resource
        "[Offer: 0 Wheat -> 1 Brick]",  # zero count
        "[Offer: some Wheat -> 1 Brick]",  # no count
        "[Offer: 2 Wheat -> ]",  # nothing asked
        "[Offer: 2 Wheat -> 1 Wheat]",  # same resource on both sides
        "[Deal: 2 Wheat -> 1 Brick]",  # not an offer
    ],
)
def test_malformed_offers_are_rejected(text: str) -> None:
    with pytest.raises(OfferError):
        parse_offer(text)


def test_accepted_offer_moves_resources_both_ways() -> None:
    game = new_game()
    assert game.step("[Offer: I give 2 Wheat, 1 Wood -> you give 3 Brick]").valid
    assert "offers to give you 2 Wheat, 1 Wood in exchange for 3 Brick" in game.observation(1)
    assert game.step("[Accept]").valid
    assert game.inventory[0] == {**EVEN, "Wheat": 8, "Wood": 9, "Brick": 13}
    assert game.inventory[1] == {**EVEN, "Wheat": 12, "Wood": 11, "Brick": 7}
    assert game.trades == 1 and game.pending is None


def test_offering_what_you_do_not_own_is_invalid() -> None:
    game = new_game(inventories={0: {**EVEN, "Ore": 1}, 1: EVEN})
    result = game.step("[Offer: I give 2 Ore -> you give 1 Brick]")
    assert not result.valid and "do not own" in result.reason
    assert game.done and game.invalid_move_by == 0 and game.outcome() == {0: -1.0, 1: 1.0}


def test_asking_for_what_the_responder_lacks_is_invalid() -> None:
    game = new_game(inventories={0: EVEN, 1: {**EVEN, "Sheep": 0}})
    result = game.step("[Offer: I give 1 Wheat -> you give 1 Sheep]")
    assert not result.valid and "does not own" in result.reason
    assert game.invalid_move_by == 0 and game.winner == 1


def test_malformed_offer_in_play_is_invalid() -> None:
    game = new_game()
    result = game.step("[Offer: lots of Wheat for your Brick]")
    assert not result.valid and "malformed offer" in result.reason


@pytest.mark.parametrize("response", ["[Accept]", "[Deny]"])
def test_responding_without_an_open_offer_is_invalid(response: str) -> None:
    game = new_game()
    result = game.step(response)
    assert not result.valid and "no open offer" in result.reason
    assert game.invalid_move_by == 0


def test_deny_and_lapse() -> None:
    game = new_game()
    play(game, ["[Offer: I give 1 Wheat -> you give 1 Ore]", "[Deny]"])
    assert game.pending is None and game.trades == 0
    # an offer answered with talk lapses; accepting it later is invalid
    play(game, ["[Offer: I give 1 Wheat -> you give 1 Ore]", "[Hmm, let me think]"])
    assert not game.step("[Accept]").valid


def test_counter_offer_replaces_the_open_offer() -> None:
    game = new_game()
    play(
        game,
        [
            "[Offer: I give 1 Wheat -> you give 1 Ore]",
            "[Offer: I give 1 Ore -> you give 5 Wheat]",
            "[Accept]",
        ],
    )
    assert game.inventory[0]["Ore"] == 11 and game.inventory[0]["Wheat"] == 5


def test_two_controls_in_one_action_are_invalid() -> None:
    game = new_game()
    game.step("[Offer: I give 1 Wheat -> you give 1 Ore]")
    assert not game.step("[Accept] [Offer: I give 1 Ore -> you give 1 Wheat]").valid


def test_winner_has_the_larger_value_change() -> None:
    values = {0: {**EVEN, "Ore": 40, "Wheat": 5}, 1: {**EVEN, "Ore": 30, "Wheat": 5}}
    game = new_game(turns=4, values=values)
    # Player 0 buys 1 Ore for 5 Wheat: +40 - 25 = +15 for Player 0, -30 + 25 = -5 for Player 1
    play(game, ["[Offer: I give 5 Wheat -> you give 1 Ore]", "[Accept]", "[hello]"])
    assert not game.done
    game.step("[bye]")
    assert game.done and not game.truncated
    assert game.value_change(0) == 15 and game.value_change(1) == -5
    assert game.winner == 0 and game.outcome() == {0: 1.0, 1: -1.0}


def test_no_trade_is_a_draw() -> None:
    game = new_game(turns=2)
    play(game, ["[hi]", "[hi]"])
    assert game.done and game.winner is None and game.outcome() == {0: 0.0, 1: 0.0}


def test_free_form_legal_actions_and_grammar_in_observation() -> None:
    game = new_game()
    assert game.legal_actions(0) is None
    text = game.observation(0)
    assert "[Offer: I give 2 Wheat, 1 Wood -> you give 1 Brick]" in text
    assert "[Accept]" in text and "[Deny]" in text and "Turn 1 of 10" in text


def test_values_are_private() -> None:
    values = {0: {**EVEN, "Ore": 37}, 1: {**EVEN, "Ore": 33}}
    game = new_game(values=values)
    assert "x 37" in game.observation(0) and "x 33" not in game.observation(0)
    assert "x 33" in game.observation(1) and "x 37" not in game.observation(1)


def test_random_opponents_play_valid_games() -> None:
    for seed in range(20):
        game = SimpleNegotiation()
        game.reset(seed)
        opponents = RandomOpponent(seed), RandomOpponent(seed + 100)
        while not game.done:
            assert game.step(opponents[game.current_player].act(game, game.current_player)).valid
        assert game.turn == 10 and game.invalid_move_by is None


def test_offer_text_round_trips() -> None:
    offer = parse_offer("[Offer: I give 2 Wheat, 1 Wood -> you give 3 Brick]")
    assert offer.describe() == "[Offer: I give 2 Wheat, 1 Wood -> you give 3 Brick]"
    assert parse_offer(offer.describe()) == offer
