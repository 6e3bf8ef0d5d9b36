from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import games
from games import Game, UnknownGameError, registry

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("game_id", ["kuhn_poker", "tictactoe", "simple_negotiation"])
def test_native_games_follow_the_protocol(game_id: str) -> None:
    game = games.make(game_id)
    assert isinstance(game, Game)
    game.reset(0)
    assert game.id == game_id and game.num_players == 2 and not game.done
    assert "Choose your action" in game.observation(game.current_player)


def test_make_passes_options() -> None:
    game = games.make("kuhn_poker", rounds=3)
    assert game.rounds == 3  # type: ignore[attr-defined]


def test_textarena_game_from_registry() -> None:
    game = games.make("textarena:TicTacToe-v0")
    assert isinstance(game, Game) and game.id == "textarena:TicTacToe-v0"


@pytest.mark.parametrize("game_id", ["chess", "textarena:NoSuchGame-v0", "", "KuhnPoker"])
def test_unknown_ids_raise_one_clear_line(game_id: str) -> None:
    with pytest.raises(UnknownGameError) as caught:
        games.make(game_id)
    message = str(caught.value)
    assert repr(game_id) in message and "selfplay list games" in message
    assert "\n" not in message


def test_bare_textarena_id_gets_a_hint() -> None:
    with pytest.raises(UnknownGameError, match="did you mean 'textarena:Nim-v0'"):
        games.make("Nim-v0")


def test_list_games() -> None:
    listed = games.list_games()
    assert listed[:3] == ["kuhn_poker", "simple_negotiation", "tictactoe"]
    textarena = [g for g in listed if g.startswith("textarena:")]
    assert len(textarena) >= 100
    for expected in ("TicTacToe-v0", "KuhnPoker-v0", "SimpleNegotiation-v0", "Nim-v0"):
        assert f"textarena:{expected}" in textarena
    assert "textarena:Chess-v0" not in textarena  # SyntaxError on Python < 3.12


def test_register_a_new_game(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_NATIVE", dict(registry._NATIVE))  # undone after the test
    games.register("tictactoe_short", lambda: games.TicTacToe(max_turns=5))
    assert games.make("tictactoe_short").max_turns == 5  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        games.register("tictactoe", games.TicTacToe)


def test_importing_games_stays_light() -> None:
    """No textarena (and so no nltk download attempt) until a TextArena game is made."""
    code = (
        "import sys, games; games.list_games(); games.make('kuhn_poker'); "
        "print(sorted(m for m in ('textarena', 'nltk') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"
