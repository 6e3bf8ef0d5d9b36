"""No role prompt suggests a move (issue 31, item 5): every game prompt in roles/prompts/,
rendered the way the SPIRAL loop renders it, at many states of the built-in games, shows no
legal move of that state outside the observation itself.

A legal move shown as the prompt's example steered the policy toward it (+0.19 probability on
average; a policy trained against the random player picked the example in all 12 states)."""

from __future__ import annotations

import re

import pytest

import games
from games import RandomOpponent, example_action, legal_example_action, match_legal
from games.actions import bracketed_tokens
from roles import PROMPTS_DIR, load_role

GAME_IDS = [
    "kuhn_poker",
    "tictactoe",
    "simple_negotiation",
    "textarena:KuhnPoker-v0",
    "openspiel:kuhn_poker",
    "openspiel:leduc_poker",
    "openspiel:tic_tac_toe",
    "openspiel:liars_dice",
    "openspiel:goofspiel(num_cards=4)",
]
GAME_PROMPTS = [p.stem for p in sorted(PROMPTS_DIR.glob("*.yaml"))
                if "observation" in load_role(p.stem).fields()]
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def moves_of(game, player: int) -> list[str]:
    """The state's legal moves; for a free-form game, the moves known valid (offers, and
    Accept / Deny where an offer is open) and the answers a game always names."""
    legal = game.legal_actions(player)
    if legal is not None:
        return legal
    return [*game.example_actions(player), "[Accept]", "[Deny]"]


def states(game_id: str, games_per_id: int = 3, per_game: int = 8):
    """(game, player) at up to ``per_game`` decision points of seeded random games."""
    for seed in range(games_per_id):
        game = games.make(game_id)
        game.reset(seed)
        opponent = RandomOpponent(seed)
        for _ in range(per_game):
            if game.done:
                break
            yield game, game.current_player
            game.step(opponent.act(game, game.current_player))


def test_the_player_prompt_is_a_game_prompt() -> None:
    assert "player" in GAME_PROMPTS


@pytest.mark.parametrize("prompt_name", GAME_PROMPTS)
@pytest.mark.parametrize("game_id", GAME_IDS)
def test_no_game_prompt_shows_a_legal_move_of_the_state(prompt_name: str, game_id: str) -> None:
    prompt = load_role(prompt_name)
    checked = 0
    for game, player in states(game_id):
        observation = game.observation(player)
        example = example_action(game, player)
        fields = {"observation": observation, "player": player, "example": example}
        rendered = "\n".join(m["content"] for m in prompt.render(**fields))
        rendered += prompt.render_prefill(**fields)
        around = rendered.replace(observation, "")  # the prompt's own words only
        for part in observation.split("\n\n"):  # a prompt may show a part (player_kuhn)
            around = around.replace(part, "")
        legal = moves_of(game, player)
        shown = bracketed_tokens(around) + [f"[{b}]" for b in BOXED.findall(around)]
        assert shown, "the prompt shows no answer format at all"
        for token in shown:
            assert match_legal(token, legal) is None, (game_id, token, legal)
        assert match_legal(example, legal) is None
        checked += 1
    assert checked >= 6


def test_the_example_is_a_placeholder_and_steps_aside_for_a_move_of_that_name() -> None:
    game = games.make("kuhn_poker")
    game.reset(0)
    assert example_action(game, 0) == "[your action]"

    class Named:  # a game whose moves include the placeholder's words
        def legal_actions(self, player):
            return ["[Your Action]", "[pass]"]

    assert example_action(Named(), 0) == "[your chosen action]"


def test_the_spiral_loop_fills_example_with_the_placeholder_or_with_legal(tmp_path) -> None:
    from selfplay.loops.spiral import SpiralLoop
    from tests.test_spiral import spiral_config

    game = games.make("tictactoe")
    game.reset(0)
    for setting, expected in (("placeholder", "[your action]"),
                              ("legal", legal_example_action(game, 0))):
        loop = SpiralLoop(spiral_config(tmp_path, example=setting))
        request = loop.move_request(0, loop.training_seats(loop.rng)[0][0], game, greedy=True)
        text = request.messages[-1]["content"]
        assert text.endswith(f"\\boxed{{{expected}}}.")
    assert expected in game.legal_actions(0)  # the old example was a legal move
