from __future__ import annotations

import pytest

from games.actions import (
    bracketed_tokens,
    extract_action,
    is_placeholder,
    legal_actions_from_text,
    match_legal,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"I think betting is best. \boxed{bet}", "[bet]"),
        (r"\boxed{[Bet]}", "[Bet]"),
        (r"\boxed { check }", "[check]"),
        (r"\boxed{ [ 4 ] }", "[4]"),
        (r"first \boxed{check} then \boxed{bet}", "[bet]"),
        (r"\boxed{\text{fold}}", "[fold]"),
        (
            r"\boxed{Offer: I give {2} Wheat -> you give 1 Brick}",
            "[Offer: I give {2} Wheat -> you give 1 Brick]",
        ),
        (
            r"\boxed{[Offer: I give 2 Wheat -> you give 1 Brick]}",
            "[Offer: I give 2 Wheat -> you give 1 Brick]",
        ),
        (r"\boxed{a{b{c}}d}", "[a{b{c}}d]"),
        (r"done \boxed{call} and an unclosed \boxed{bet", "[call]"),
        ("no answer here", None),
        (r"\boxed{}", None),
        (r"\boxed{ [ ] }", None),
        ("I will [bet]", None),  # brackets only count in lenient mode
    ],
)
def test_extract_action(text: str, expected: str | None) -> None:
    assert extract_action(text) == expected


def test_extract_action_lenient_falls_back_to_last_bracket() -> None:
    assert extract_action("maybe [check], no: [bet]", lenient=True) == "[bet]"
    assert extract_action("nothing at all", lenient=True) is None
    # a boxed answer still wins over brackets
    assert extract_action(r"[bet] \boxed{check}", lenient=True) == "[check]"


def test_match_legal_ignores_case_space_and_brackets() -> None:
    legal = ["[check]", "[bet]", "[Offer X]"]
    assert match_legal("[Bet]", legal) == "[bet]"
    assert match_legal("[  CHECK ]", legal) == "[check]"
    assert match_legal("[offer   x]", legal) == "[Offer X]"
    assert match_legal("[raise]", legal) is None
    assert match_legal(None, legal) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[GAME] Your available actions are: '[check]', '[bet]'", ["[check]", "[bet]"]),
        ("Valid moves: [0], [1], [2]\nBoard [x]", ["[0]", "[1]", "[2]"]),
        (
            "Available actions:\n  '[roll]' - roll\n  - [hold]: keep\nThen text [no]",
            ["[roll]", "[hold]"],
        ),
        # the latest listing wins
        ("Valid moves: [0], [1]\n[Player 0] [0]\n[GAME] Valid moves: [1]", ["[1]"]),
        # templates make the list inexact: unknown rather than wrong
        ("Available actions: '[Check]', '[Bet N]'", None),
        ("Invalid moves lose the game. [0]", None),
        ("no listing [a] [b]", None),
    ],
)
def test_legal_actions_from_text(text: str, expected: list[str] | None) -> None:
    assert legal_actions_from_text(text) == expected


def test_placeholders_and_tokens() -> None:
    assert is_placeholder("[Bet N]") and is_placeholder("[raise X]")
    assert not is_placeholder("[X 0]") and not is_placeholder("[bet]")
    assert bracketed_tokens("[GAME] hi [Player 1] [up] [ down ]") == ["[up]", "[down]"]
