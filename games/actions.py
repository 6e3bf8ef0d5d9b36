"""Turning model text into bracketed game actions, and reading legal actions out of text.

SPIRAL's convention: the model reasons freely and ends with `\\boxed{action}`; the last
boxed answer, rewritten as `[action]`, is the move. Nothing here knows about any one game.
"""

from __future__ import annotations

import re

_BOXED_OPEN = re.compile(r"\\boxed\s*\{")
# LaTeX text wrappers models like to put inside \boxed{}: \boxed{\text{bet}}.
_TEXT_WRAPPER = re.compile(
    r"^\\(?:text|textbf|textit|texttt|mathrm|mathbf|operatorname)\s*\{(.*)\}$", re.S
)
_BRACKET_TOKEN = re.compile(r"\[([^\[\]]+)\]")
# Lines where games announce their moves: "Available actions: ...", "Valid moves: ...".
_MOVES_HEADER = re.compile(
    r"\b(available|valid|legal|possible|allowed)\s+(moves?|actions?|options?|choices?)\b",
    re.IGNORECASE,
)
# A listing may continue on following lines that each open with a token: "  '[Call]' - ...".
_LISTING_LINE = re.compile(r"^\s*(?:[-*\u2022]\s*)?['\"`]?\[")
# Templates in rule text, not moves: "[Bet N]", "[bet X]", "[Propose <amount>]", "[...]".
_PLACEHOLDER = re.compile(r"^\S.*\s[NXYZ]$|<[^>]*>|\.\.\.|\bX\.XX\b")
_SENDER_NAMES = re.compile(r"^(GAME|Player \d+)$")


def _balanced_body(text: str, start: int) -> str | None:
    """Body of the brace group whose "{" is at text[start - 1], or None if it never closes."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def _last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` (nested braces allowed)."""
    for match in reversed(list(_BOXED_OPEN.finditer(text))):
        body = _balanced_body(text, match.end())
        if body is not None:
            return body
    return None


def _clean(content: str) -> str:
    """Strip whitespace, LaTeX text wrappers and existing brackets: " [Bet] " -> "Bet"."""
    content = content.strip()
    while True:
        unwrapped = _TEXT_WRAPPER.match(content)
        if unwrapped:
            content = unwrapped.group(1).strip()
        elif content.startswith("[") and content.endswith("]"):
            content = content[1:-1].strip()
        else:
            return content


def extract_action(text: str, lenient: bool = False) -> str | None:
    """The model's action as "[...]": its last `\\boxed{...}`, or None if there is none.

    With `lenient=True`, text without a boxed answer falls back to its last bracketed token
    (e.g. "I will [bet]"). That is still the model's own choice, never a guess.
    """
    boxed = _last_boxed(text)
    if boxed is not None:
        content = _clean(boxed)
        return f"[{content}]" if content else None
    if lenient:
        tokens = [t.strip() for t in _BRACKET_TOKEN.findall(text) if t.strip()]
        if tokens:
            return f"[{tokens[-1]}]"
    return None


def normalize_action(action: str) -> str:
    """Comparison key: no brackets, lower case, single spaces. "[ Bet ]" -> "bet"."""
    return " ".join(_clean(action).lower().split())


def match_legal(action: str | None, legal: list[str]) -> str | None:
    """The legal action `action` names (ignoring case, spacing and brackets), or None."""
    if action is None:
        return None
    key = normalize_action(action)
    for candidate in legal:
        if normalize_action(candidate) == key:
            return candidate
    return None


def is_placeholder(token: str) -> bool:
    """True for rule-text templates such as "[Bet N]" that are not playable as written."""
    return bool(_PLACEHOLDER.search(token.strip("[]").strip()))


def bracketed_tokens(text: str) -> list[str]:
    """All "[...]" tokens in `text`, in order, without sender tags like "[GAME]"."""
    tokens = []
    for body in _BRACKET_TOKEN.findall(text):
        body = body.strip()
        if body and not _SENDER_NAMES.match(body):
            tokens.append(f"[{body}]")
    return tokens


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _listing(text: str, start: int) -> str:
    """The rest of the header's line plus the following lines that each open with a token."""
    lines = text[start:].split("\n")
    kept = [lines[0]]
    for line in lines[1:]:
        if not _LISTING_LINE.match(line):
            break
        kept.append(line)
    return "\n".join(kept)


def legal_actions_from_text(text: str) -> list[str] | None:
    """Bracketed moves from the latest "available/valid moves/actions" listing in `text`.

    Games print their options in many ways ("Your available actions are: '[check]', '[bet]'",
    "Valid moves: [0], [1]", or one option per line); reading the latest listing keeps this
    game-agnostic. Returns None when no listing is found, and also when the listing holds a
    template such as "[Bet N]": the list would not be exact, and a partial list would make
    real moves look illegal.
    """
    for header in reversed(list(_MOVES_HEADER.finditer(text))):
        tokens = bracketed_tokens(_listing(text, header.end()))
        if tokens:
            if any(is_placeholder(token) for token in tokens):
                return None
            return _dedupe(tokens)
    return None
