"""Legal moves of any game that can be tried on a copy: candidates from the text, kept if accepted.

No per-game parser. Where a game's observation lists no legal moves, the candidates come from
what the game itself shows the player:

- every bracketed token in the observation: the format examples in the rules (`'[col 4]'`,
  `'[0 3]'`), the moves in the history, the cards in a hand (`'[Q]'`);
- each token read as a template: its integers, board coordinates (`a2`, `D5`) and placeholder
  letters (`[Bet N]`, `[play X]`, `[<number>]`) become slots; an integer slot ranges over
  0..the largest small integer on the page (pile sizes, "6 rows and 7 columns"), a letter slot
  over the board's axis letters (`a b c d e f g h` under a board, or `A`..`J` opening rows).

The caller tries each candidate on a copy of the game's state (`try_move`); the ones the game
accepts are legal. A nonsense probe guards against games that accept any text (a chat turn): a
set is only "known" when the probe is refused and every template was enumerated in full within
the trial budget. Otherwise the accepted candidates are still legal moves (a random player can
use them) but the set is reported as partial or unknown.
"""

from __future__ import annotations

import itertools
import random
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from games.actions import bracketed_tokens, normalize_action

# Where the legal set of a state came from.
LISTING = "listing"  # the observation lists the moves
ORACLE = "oracle"  # every candidate template was tried: the accepted ones are the legal set
PARTIAL = "partial"  # some legal moves were found, but the set may hold more
UNKNOWN = "unknown"  # no legal move found, or the game accepts arbitrary text here
KNOWN_SOURCES = (LISTING, ORACLE)

DEFAULT_MAX_TRIALS = 256
INT_CAP = 30  # integers above this on the page are scores or chips, not coordinates
MAX_TOKEN_CHARS = 40  # longer bracketed text is prose, not a move
NONSENSE_PROBE = "[qzxv 917 wuq]"
SAMPLE_ROUNDS = 4
ENOUGH_FROM_A_SAMPLE = 4

_INT = re.compile(r"\d+")
# A coordinate letter: one letter right before a digit, not inside a word ("a2", "D5").
_COORD_LETTER = re.compile(r"(?<![A-Za-z])[A-Za-z](?=\d)")
# A placeholder: a lone capital letter ("N", "X") or "<...>", standing alone in the token.
_PLACEHOLDER = re.compile(r"(?:(?<=^)|(?<=[\s$:,]))(?:[A-Z]|<[^>]*>)(?=$|[\s,\]])")
_SLOT = re.compile(
    rf"(?P<letter>{_COORD_LETTER.pattern})(?P<rank>\d+)|(?P<int>{_INT.pattern})"
    rf"|(?P<hole>{_PLACEHOLDER.pattern})"
)
_AXIS_LINE = re.compile(r"^[\s|]*(?:[A-Za-z][\s|]+){2,}[A-Za-z][\s|]*$")
_ROW_LABEL = re.compile(r"^\s*([A-Za-z])(?:\s|\||$)")
_NUMBER_AXIS_LINE = re.compile(r"^[\s|]*(?:\d+[\s|]+){2,}\d+[\s|]*$")
_NUMBER_ROW_LABEL = re.compile(r"^\s*(\d+)\s*\|")


@dataclass(frozen=True)
class LegalSet:
    """The legal moves found for one state, and how far to trust them."""

    actions: tuple[str, ...]  # every one was accepted by the game (or listed by it)
    source: str  # LISTING | ORACLE | PARTIAL | UNKNOWN
    reason: str = ""  # why the set is not known
    trials: int = 0  # moves tried on copies
    seconds: float = 0.0

    @property
    def known(self) -> bool:
        """True when `actions` is the whole legal set (up to spelling)."""
        return self.source in KNOWN_SOURCES


# ---------------------------------------------------------------------- reading the page
def small_integers(text: str) -> list[int]:
    return [int(m) for m in _INT.findall(text) if int(m) <= INT_CAP]


def axis_letters(text: str) -> str:
    """Letters that label a board's columns (`a b c d`) or rows (lines opening with A, B, C)."""
    found: set[str] = set()
    for line in text.splitlines():
        if _AXIS_LINE.match(line):
            found.update(c.lower() for c in line if c.isalpha())
    openers = [m.group(1).lower() for line in text.splitlines() if (m := _ROW_LABEL.match(line))]
    run = _longest_alphabet_run(openers)
    if len(run) >= 3:
        found.update(run)
    return "".join(sorted(found))


def axis_numbers(text: str) -> list[int]:
    """Numbers that label a board's ranks: rows opening with `8 |`, or a line `0 1 2 3 4`."""
    found: set[int] = set()
    for line in text.splitlines():
        if _NUMBER_AXIS_LINE.match(line):
            found.update(int(n) for n in _INT.findall(line))
        elif match := _NUMBER_ROW_LABEL.match(line):
            found.add(int(match.group(1)))
    return sorted(n for n in found if n <= INT_CAP)


def _longest_alphabet_run(letters: Iterable[str]) -> str:
    present = set(letters)
    best = ""
    for start in sorted(present):
        run = start
        while chr(ord(run[-1]) + 1) in present:
            run += chr(ord(run[-1]) + 1)
        best = max(best, run, key=len)
    return best


def page_tokens(text: str) -> list[str]:
    """Bracketed tokens a player could type: short, one line, not a sender tag."""
    kept = []
    for token in bracketed_tokens(text):
        body = token[1:-1]
        if len(body) <= MAX_TOKEN_CHARS and "\n" not in body:
            kept.append(token)
    return list(dict.fromkeys(kept))


@dataclass(frozen=True)
class Template:
    """A token with slots: `parts` alternate literal text and slot value lists."""

    parts: tuple[str | tuple[str, ...], ...]
    guessed: bool = False  # a slot's range is a guess (no board axis, or bigger numbers shown)

    @property
    def size(self) -> int:
        size = 1
        for part in self.parts:
            if isinstance(part, tuple):
                size *= len(part)
        return size

    def fill(self, values: tuple[str, ...]) -> str:
        it = iter(values)
        return "".join(part if isinstance(part, str) else next(it) for part in self.parts)

    def slots(self) -> list[tuple[str, ...]]:
        return [part for part in self.parts if isinstance(part, tuple)]


def template(
    token: str,
    integers: tuple[str, ...],
    letters: str,
    big_numbers: bool = False,
    ranks: tuple[str, ...] = (),
) -> Template | None:
    """`token` with its integers, coordinate letters and placeholders as slots (None if none).

    A placeholder (`[Bet N]`) on a page that also shows numbers above INT_CAP (chips, a 0-100
    range) may take values the range misses, so its template is marked as a guess.
    """
    parts: list[str | tuple[str, ...]] = []
    last, guessed = 0, False
    for match in _SLOT.finditer(token):
        parts.append(token[last : match.start()])
        if match.group("letter") is not None:
            letter = match.group("letter")
            if letters:  # a board square: the file ranges over the board's axis letters
                upper = letter.isupper()
                parts.append(tuple(c.upper() if upper else c for c in letters))
            else:  # no board drawn: a name with a number ("A4" = 4 units on field A)
                parts.append(letter)
            parts.append(ranks or integers)  # a square's rank: the board's own labels
        else:
            guessed |= bool(match.group("hole")) and big_numbers
            parts.append(integers)
        last = match.end()
    if last == 0:
        return None
    parts.append(token[last:])
    return Template(tuple(parts), guessed)


# ---------------------------------------------------------------------- candidates
@dataclass
class Candidates:
    moves: list[str]
    complete: bool  # every template was enumerated in full


def candidates(text: str, max_trials: int = DEFAULT_MAX_TRIALS, seed: int = 0) -> Candidates:
    """Moves worth trying in the state `text` shows, at most `max_trials` of them.

    The page's own tokens come first, then templates from the smallest up; a template too big
    for what is left of the budget is sampled (seeded), which makes the set incomplete.
    """
    tokens = page_tokens(text)
    ints = small_integers(text)
    big_numbers = any(int(m) > INT_CAP for m in _INT.findall(text))
    top = max([*ints, 1])
    integers = tuple(str(i) for i in range(top + 1))
    letters = axis_letters(text)
    ranks = tuple(str(n) for n in axis_numbers(text))
    moves: dict[str, str] = {}

    def add(move: str) -> None:
        moves.setdefault(normalize_action(move), move)

    for token in tokens:
        add(token)
    templates = [
        t for t in (template(token, integers, letters, big_numbers, ranks) for token in tokens) if t
    ]
    unique = {t.parts: t for t in templates}
    complete = True
    rng = random.Random(seed)
    for tpl in sorted(unique.values(), key=lambda t: t.size):
        complete &= not tpl.guessed
        budget = max_trials - len(moves)
        if budget <= 0:
            complete = False
            break
        if tpl.size <= budget:
            for values in itertools.product(*tpl.slots()):
                add(tpl.fill(values))
        else:
            complete = False
            for _ in range(budget):
                add(tpl.fill(sample_local(tpl.slots(), rng)))
    complete &= len(moves) <= max_trials  # a page with more tokens than the budget
    return Candidates(list(moves.values())[:max_trials], complete)


def sample_local(slots: list[tuple[str, ...]], rng: random.Random, reach: int = 1) -> tuple:
    """One value per slot; a slot repeating the range of the slot two before it (the "to"
    square of `[a2a3]`, `[D5 E5]`) lands within `reach` steps of it: most moves are local,
    and uniform pairs of squares would almost never be legal."""
    picked: list[int] = []
    for k, slot in enumerate(slots):
        if k >= 2 and slots[k - 2] == slot:
            low = max(0, picked[k - 2] - reach)
            high = min(len(slot) - 1, picked[k - 2] + reach)
            picked.append(rng.randint(low, high))
        else:
            picked.append(rng.randrange(len(slot)))
    return tuple(slot[i] for slot, i in zip(slots, picked, strict=True))


# ---------------------------------------------------------------------- the oracle
def find_legal(
    text: str,
    try_move: Callable[[str], bool],
    max_trials: int = DEFAULT_MAX_TRIALS,
    seed: int = 0,
) -> LegalSet:
    """Try the candidates `text` suggests with `try_move` (on copies); keep the accepted ones.

    `try_move(action)` must play `action` on a copy of the state and say whether the game
    accepted it, leaving the real game untouched.
    """
    start = time.perf_counter()
    tried: set[str] = set()
    accepted: tuple[str, ...] = ()
    # A sampled set that found nothing gets up to SAMPLE_ROUNDS fresh samples: a player with
    # no move at all would stall the game, so the cost bound is max_trials * SAMPLE_ROUNDS.
    for round_ in range(SAMPLE_ROUNDS):
        found = candidates(text, max_trials, seed + 7919 * round_)
        for move in found.moves:
            if move in tried:
                continue
            tried.add(move)
            if try_move(move):
                accepted += (move,)
                # a sample cannot give the whole set anyway: a few legal moves will do
                if not found.complete and len(accepted) >= ENOUGH_FROM_A_SAMPLE:
                    break
        if accepted or found.complete:
            break
    trials = len(tried) + 1
    if try_move(NONSENSE_PROBE):
        why = "the game accepts arbitrary text in this state"
        return LegalSet(accepted, UNKNOWN, why, trials, time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if not accepted:
        why = f"none of {len(tried)} candidate moves read off the observation was accepted"
        return LegalSet((), UNKNOWN, why, trials, seconds)
    if not found.complete:
        why = f"the candidate moves exceed the budget of {max_trials} trials; a sample was tried"
        return LegalSet(accepted, PARTIAL, why, trials, seconds)
    return LegalSet(accepted, ORACLE, "", trials, seconds)
