"""Legal moves of any game that can be tried on a copy: candidates from the text, kept if accepted.

No per-game parser. Where a game's observation lists no legal moves, the candidates come from
what the game itself shows the player:

- every bracketed token in the observation: the format examples in the rules (`'[col 4]'`,
  `'[0 3]'`), the moves in the history, the cards in a hand (`'[Q]'`);
- each token read as a template: its integers, board coordinates (`a2`, `D5`) and placeholders
  (`[Bet N]`, `[play X]`, `[<number>]`) become slots; an integer slot ranges over
  0..the largest small integer on the page (pile sizes, "6 rows and 7 columns"), a letter slot
  over the board's axis letters (`a b c d e f g h` under a board, or `A`..`J` opening rows).

A template naming two squares (`[a2 a3]`, `[b1b3]`, `[2 1 3 2]`: a piece's square, then where
it goes) is too big to try in full on a board (8x8 squares: 4096 pairs). Its pairs are tried in
order instead of sampled: from squares that the latest board drawn on the page shows holding a
piece first, and within those, the nearest targets first (distance 1, then 2, ..., straight and
diagonal lines before other squares at the same distance), so steps, jumps and long slides are
all reached; pairs from empty squares come last.

Where nothing on the page plays as it stands, two more guesses: a move's argument after its
bracket (`[Propose] $X.XX`), and a total the page names in one slot (`[A4 B2 C2]` -> `[A50 B0 C0]`).

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
from collections.abc import Callable, Iterable, Iterator
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
# A placeholder: a lone capital letter ("N", "X") or "<...>", standing alone in the token;
# "<...>" also right after the token's bracket ("[<number>]").
_PLACEHOLDER = re.compile(
    r"(?:(?:(?<=^)|(?<=[\s$:,]))[A-Z]|(?:(?<=^)|(?<=[\s$:,\[]))<[^>]*>)(?=$|[\s,\]])"
)
# A move whose argument follows the bracket on its line: `[Propose] $X.XX`, `[Propose] CCAACCCC`
# (one word, then the end of the line or a closing quote).
_ARGUMENT_AFTER = re.compile(
    r"(\[[^\[\]\n]{1,40}\])[ \t]+([^\s\[\]\"'`]{1,24})[ \t]*(?=[\"'`]|$)", re.M
)
_DECIMAL_HOLE = re.compile(r"\bX\.XX\b")  # a dollar amount's template, "$X.XX"
_SENDER = re.compile(r"^\[(GAME|Player \d+)\]$")
_SLOT = re.compile(
    rf"(?P<letter>{_COORD_LETTER.pattern})(?P<rank>\d+)|(?P<int>{_INT.pattern})"
    rf"|(?P<hole>{_PLACEHOLDER.pattern})"
)
_AXIS_LINE = re.compile(r"^[\s|]*(?:[A-Za-z][\s|]+){2,}[A-Za-z][\s|]*$")
_ROW_LABEL = re.compile(r"^\s*([A-Za-z])(?:\s|\||$)")
_NUMBER_AXIS_LINE = re.compile(r"^[\s|]*(?:\d+[\s|]+){2,}\d+[\s|]*$")
_NUMBER_ROW_LABEL = re.compile(r"^\s*(\d+)\s*[|\u2502\u2503\u2551]")
# A board row: a label (`8`, `A`) then cells, after a bar or spaces ("8 | B B", "A   ~  ~").
_BOARD_ROW = re.compile(r"^\s*([A-Za-z]|\d+)(?=\s*[|\u2502\u2503\u2551]|\s)")
_AXIS_LABEL = re.compile(r"[A-Za-z]|\d+")
_WORD_SEPARATOR = re.compile(r"(\s*,\s*|\s+)")
_FORMAT_WORD = re.compile(r"[a-z][A-Za-z]*")
_CELL_WALLS = set("|+\u2502\u2503\u2551")
_EMPTY_MARKS = set(" .\u00b7_-\u2500\u2501\u2550")  # a cell showing only these holds no piece


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


def board_cells(text: str) -> dict[tuple[str, str], bool]:
    """Whether each square of the latest board drawn on the page shows a piece.

    Keys are (row label, column label), lowercased: `("8", "a")` under a file axis `a b c`,
    `("0", "3")` under a number axis. A cell is read at its column label's position in the axis
    line (one character either side); it is empty when it shows only blanks, dots or dashes.
    Empty when no board is found: an axis line with at least two labelled rows beside it.
    """
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if not (_AXIS_LINE.match(line) or _NUMBER_AXIS_LINE.match(line)):
            continue
        rows = _rows_beside(lines, index, -1) + _rows_beside(lines, index, 1)
        if len(rows) < 2:
            continue
        columns = [(m.group().lower(), m.start(), m.end()) for m in _AXIS_LABEL.finditer(line)]
        cells = {}
        for row in rows:
            label = _BOARD_ROW.match(row).group(1).lower()  # type: ignore[union-attr]
            for column, start, end in columns:
                shown = set(row[max(start - 1, 0) : end + 1]) - _CELL_WALLS
                cells[label, column] = bool(shown - _EMPTY_MARKS)
        return cells
    return {}


def _rows_beside(lines: list[str], axis: int, step: int) -> list[str]:
    """Labelled board rows next to the axis line at `axis`, going up (-1) or down (1); rule
    lines (`+---+`) between rows are skipped; a blank line once a row is seen, or an axis line,
    ends the board."""
    rows: list[str] = []
    index = axis + step
    while 0 <= index < len(lines):
        line = lines[index]
        if _AXIS_LINE.match(line) or _NUMBER_AXIS_LINE.match(line):
            break  # the board's other axis line, or the next board's
        if _BOARD_ROW.match(line):
            rows.append(line)
        elif line.strip() and not any(c.isalnum() for c in line):
            pass  # a rule line between rows
        elif line.strip() or rows:
            break
        index += step
    return rows


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

    @property
    def names_two_squares(self) -> bool:
        """Four slots read as two squares over the same board: `[a2 a3]`, `[2 1 3 2]`."""
        slots = self.slots()
        return len(slots) == 4 and slots[0] == slots[2] and slots[1] == slots[3]


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

    With no board drawn, a letter with a number is a name ("A4" = 4 units on field A), except
    in a token naming exactly two squares (`[a2a3]` in a blind game): its files are guessed as
    the first letters of the alphabet, as many as the largest integer on the page ("8x8").
    """
    parts: list[str | tuple[str, ...]] = []
    last, guessed = 0, False
    squares = sum(match.group("letter") is not None for match in _SLOT.finditer(token))
    if not letters and squares == 2 and integers:
        letters = "abcdefghijklmnopqrstuvwxyz"[: int(integers[-1])]
        guessed = True
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


def word_template(token: str, integers: tuple[str, ...]) -> Template | None:
    """A format spelled in two to four lowercase words (`[row, col]`, `[x y]`): each word an
    integer slot, the separators kept. A guess (the words may mean anything), so never complete;
    None for any other token."""
    body = token[1:-1].strip()
    pieces = _WORD_SEPARATOR.split(body)
    words, separators = pieces[::2], pieces[1::2]
    if not 2 <= len(words) <= 4 or not all(_FORMAT_WORD.fullmatch(word) for word in words):
        return None
    parts: list[str | tuple[str, ...]] = ["["]
    for word_index in range(len(words)):
        parts.append(integers)
        parts.append(separators[word_index] if word_index < len(separators) else "]")
    return Template(tuple(parts), guessed=True)


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
    cells = board_cells(text)
    # beside a board, a format named in words (`[row, col]`) takes the board's numbers
    spelled = [word_template(token, integers) for token in tokens] if cells else []
    unique = {t.parts: t for t in [*filter(None, spelled), *templates]}  # a real one wins
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
        elif tpl.names_two_squares:
            complete = False
            for values in itertools.islice(square_pairs(tpl.slots(), cells, rng), budget):
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


def square_pairs(
    slots: list[tuple[str, ...]], cells: dict[tuple[str, str], bool], rng: random.Random
) -> Iterator[tuple[str, ...]]:
    """Every (from, to) pair of a two-square template, the likely moves first.

    From squares the board shows holding a piece come first (all squares when no board is
    drawn), then its empty squares, then squares off the board (an integer range wider than the
    board); within each group, pairs go by distance between the squares (1, 2, ...: steps, jumps,
    slides), pairs on a straight or diagonal line before others at the same distance, ties in
    seeded random order. A square to itself comes last. Lazy: a budget takes a prefix.
    """
    files, ranks = slots[0], slots[1]
    squares = [(i, j) for i in range(len(files)) for j in range(len(ranks))]

    def shows(square: tuple[int, int]) -> int:
        """0: a piece (or no board to tell), 1: an empty square, 2: not on the board."""
        a, b = files[square[0]].lower(), ranks[square[1]].lower()
        found = [cells[key] for key in ((a, b), (b, a)) if key in cells]
        if not cells or any(found):
            return 0
        return 1 if found else 2

    groups: tuple[list[tuple[int, int]], ...] = ([], [], [])
    for square in squares:
        groups[shows(square)].append(square)
    reach = max(len(files), len(ranks))
    for group in groups:
        for distance in range(1, reach):
            ring = []
            for fi, fj in group:
                for ti, tj in _ring((fi, fj), distance, len(files), len(ranks)):
                    line = ti == fi or tj == fj or abs(ti - fi) == abs(tj - fj)
                    ring.append((not line, rng.random(), (fi, fj, ti, tj)))
            ring.sort()
            for _, _, (fi, fj, ti, tj) in ring:
                yield files[fi], ranks[fj], files[ti], ranks[tj]
    for i, j in squares:
        yield files[i], ranks[j], files[i], ranks[j]


def _ring(
    square: tuple[int, int], distance: int, width: int, height: int
) -> Iterator[tuple[int, int]]:
    """Squares exactly `distance` king steps from `square`, on the board."""
    i, j = square
    for ti in range(max(i - distance, 0), min(i + distance, width - 1) + 1):
        for tj in range(max(j - distance, 0), min(j + distance, height - 1) + 1):
            if max(abs(ti - i), abs(tj - j)) == distance:
                yield ti, tj


# ---------------------------------------------------------------------- the oracle
def argument_moves(text: str, integers: tuple[str, ...], limit: int) -> list[str]:
    """Moves written as a bracketed word with an argument after it, at most ``limit``: as shown
    (`[Propose] CCAACCCC`), or as a template (`[Propose] $X.XX` over whole amounts)."""
    moves: dict[str, None] = {}
    for match in _ARGUMENT_AFTER.finditer(text):
        token, argument = match.group(1), match.group(2)
        if _SENDER.match(token):
            continue
        cents = _DECIMAL_HOLE.search(argument) is not None
        argument = _DECIMAL_HOLE.sub("X", argument)  # "$X.XX" -> "$X": a whole amount
        filled = template(f"{token} {argument}", integers, "")
        if filled is None:
            moves[f"{token} {argument}"] = None
            continue
        for values in itertools.islice(itertools.product(*filled.slots()), limit):
            move = filled.fill(values)
            moves[f"{move}.00" if cents else move] = None
    return list(moves)[:limit]


def total_moves(text: str, limit: int) -> list[str]:
    """Page templates with a number above INT_CAP the page shows (a total: "exactly 50 units")
    in one slot and 0 in the others (`[A4 B2 C2]` -> `[A50 B0 C0]`), at most ``limit``."""
    big = sorted({int(m) for m in _INT.findall(text) if int(m) > INT_CAP})
    moves: dict[str, None] = {}
    for token in page_tokens(text):
        filled = template(token, ("0",), "")
        if filled is None:
            continue
        slots = len(filled.slots())
        for number, slot in itertools.product(big, range(slots)):
            values = tuple(str(number) if i == slot else "0" for i in range(slots))
            moves[filled.fill(values)] = None
    return list(moves)[:limit]


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
    # A sampled set that found nothing gets up to SAMPLE_ROUNDS more budgets of candidates (the
    # ordered square pairs go on where the last round stopped, samples draw more): a player
    # with no move at all would stall the game, so the cost bound is max_trials * SAMPLE_ROUNDS.
    for round_ in range(SAMPLE_ROUNDS):
        found = candidates(text, max_trials * (round_ + 1), seed)
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
    if not accepted:
        # nothing on the page plays as it stands: a move may take an argument after its
        # bracket (`[Propose] $X.XX`), or a slot a total the page names ("exactly 50 units");
        # guesses, so the set found is never complete
        ints = tuple(str(i) for i in range(max([*small_integers(text), 1]) + 1))
        guesses = argument_moves(text, ints, max_trials) + total_moves(text, max_trials)
        for move in guesses[:max_trials]:
            if move not in tried:
                tried.add(move)
                accepted += (move,) if try_move(move) else ()
        found = Candidates(found.moves, False) if accepted else found
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
