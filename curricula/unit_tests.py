"""CURE's pure parts (Wang et al. 2025, arXiv:2506.03136; docs/algorithms.md#cure): coding
problems in stdio form, what a coder's and a unit tester's replies must look like, and the
rewards of both read from an execution matrix.

The execution matrix B is n × (t + m): row j is candidate program j, the first t columns are the
problem's ground-truth tests and the next m the generated ones; B[j][l] is 1 when program j,
run on test l's stdin, prints test l's expected output (``sandbox.stdio.passed``). The loop
builds it by running programs in the sandbox (``sandbox.stdio.run_matrix``);
everything here is text and arithmetic, with no sandbox and no model.

Two forms of the unit-test reward (``unit_test_rewards``), selected by ``form``:

- ``paper`` (default): counts. A correct test earns the number of wrong programs it rejects,
  a wrong test loses the number of wrong programs it accepts; with no wrong program every test
  earns 0 (there is nothing to count).
- ``code`` (Gen-Verse/CURE ``optimization/reward.py``): the same as shares of the wrong
  programs (p01, −p00), and ±1 when there is no wrong program.

Both are standardised per problem (``standardise``), so the two forms give the same advantages
whenever some program is wrong (the count is the share times |W|, one constant per problem);
they differ only on problems where every program passes every ground-truth test.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from selfplay.core.errors import UserError
from selfplay.core.jsonl import read_rows

# the problems shipped with the package: easy ones first, expected outputs written by hand
DEFAULT_PROBLEMS = Path(__file__).parent / "data" / "cure_problems.jsonl"
Matrix = Sequence[Sequence[int]]  # rows: programs; columns: t ground-truth then m generated tests
STD_FLOOR = 1e-12  # a std below this is float rounding of equal rewards: the problem is dropped


@dataclass(frozen=True)
class UnitTest:
    """One stdio test: what the program reads and what it must print."""

    input: str
    output: str


@dataclass(frozen=True)
class Problem:
    """A coding problem in stdio form: its statement, ground-truth tests and a reference program
    (used to validate the file at start and to measure generated tests, never in a reward)."""

    id: str
    statement: str
    tests: tuple[UnitTest, ...]
    reference: str

    @property
    def example(self) -> UnitTest:
        """The public example shown to the unit tester: the first test."""
        return self.tests[0]


# ---------------------------------------------------------------------- the problem file
REQUIRED = ("id", "statement", "tests", "reference")


def load_problems(path: str | Path) -> list[Problem]:
    """Every problem of a JSONL file (one object a line: ``id``, ``statement``, ``reference``,
    ``tests``: a non-empty list of ``{"input", "output"}``); anything malformed is one line
    naming the file, the line and the field."""
    path = Path(path)
    problems: list[Problem] = []
    seen: set[str] = set()
    for number, row in read_rows(path, "cure.problems file"):
        problem = parse_problem(row, f"{path}:{number}")
        if problem.id in seen:
            raise UserError(f"{path}:{number}: duplicate problem id {problem.id!r}")
        seen.add(problem.id)
        problems.append(problem)
    if not problems:
        raise UserError(f"cure.problems: {path} holds no problem")
    return problems


def parse_problem(row: dict, where: str) -> Problem:
    """One row of a problem file; ``where`` is ``file:line`` for the error."""
    for field in REQUIRED:
        if field not in row:
            raise UserError(f"{where}: missing field `{field}`")
    for field in ("id", "statement", "reference"):
        if not isinstance(row[field], str) or not row[field].strip():
            raise UserError(f"{where}: field `{field}` must be a non-empty string")
    tests = row["tests"]
    if not isinstance(tests, list) or not tests:
        raise UserError(f"{where}: field `tests` must be a non-empty list of {{input, output}}")
    parsed = []
    for index, test in enumerate(tests):
        if not isinstance(test, dict) or not all(
            isinstance(test.get(key), str) for key in ("input", "output")
        ):
            raise UserError(f"{where}: field `tests[{index}]` must be {{\"input\": str, "
                            "\"output\": str}")
        parsed.append(UnitTest(test["input"], test["output"]))
    return Problem(row["id"], row["statement"], tuple(parsed), row["reference"])


# ---------------------------------------------------------------------- replies
_CLOSED_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)\b[^\n]*\n(.*?)```", re.S | re.I)
_OPEN_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)\b[^\n]*\n(.*)\Z", re.S | re.I)


def parse_program(reply: str) -> str | None:
    """The program of a coder's reply: its last closed ```python block, else a block left open
    at the end (a reply cut by the token budget or by a stop string on the closing fence)."""
    blocks = _CLOSED_BLOCK.findall(reply)
    if blocks:
        code = blocks[-1]
    else:
        tail = _OPEN_BLOCK.search(reply)
        if tail is None:
            return None
        code = tail.group(1)
    return code.strip("\n") if code.strip() else None


# "**Test Input:**" (the paper's prompt) or "Input:" (the small-model prompt), any case
_INPUT = re.compile(r"\b(?:test\s+)?input(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]*\n?", re.I)
_OUTPUT = re.compile(
    r"(?:\*\*)?\b(?:test\s+)?(?:expected\s+)?output(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]*\n?", re.I
)
_FENCED = re.compile(r"\A\s*```[\w-]*[ \t]*\n?(.*?)```", re.S)  # a language tag at most
_PLAIN_END = re.compile(r"\n[ \t]*\n|\*\*Explanation|\n[ \t]*(?:\*\*)?Explanation", re.I)


_OPENING_FENCE = re.compile(r"\A\s*```[\w-]*[ \t]*\n?")


def _fenced_or_plain(text: str, end: re.Pattern[str]) -> str:
    """A fenced block's content, else the plain text up to ``end`` (after an opening fence
    that was never closed)."""
    fenced = _FENCED.match(text)
    if fenced:
        return fenced.group(1)
    text = _OPENING_FENCE.sub("", text, count=1)
    stop = end.search(text)
    return text[: stop.start()] if stop else text


def _clean(value: str) -> str:
    """As the released code does: drop a ``plaintext`` fence tag, turn a written ``\\n`` into a
    newline, end with a newline."""
    value = value.replace("plaintext\n", "").replace("\\n", "\n").strip("\n")
    return value + "\n"


def parse_unit_test(reply: str) -> UnitTest | None:
    """The (input, output) of a unit tester's reply: the last ``Input`` label followed by a
    fenced block or plain lines up to an ``Output`` label, then a fenced block or plain lines up
    to a blank line or ``Explanation``. None when either part is missing or the output is
    empty (a malformed test: it runs against no program and every program fails it)."""
    inputs = list(_INPUT.finditer(reply))
    if not inputs:
        return None
    rest = reply[inputs[-1].end() :]
    output = _OUTPUT.search(rest)
    if output is None:
        return None
    given = _fenced_or_plain(rest[: output.start()], re.compile(r"\Z"))
    expected = _fenced_or_plain(rest[output.end() :], _PLAIN_END)
    if not given.strip() or not expected.strip():
        return None
    return UnitTest(_clean(given), _clean(expected))


# ---------------------------------------------------------------------- rewards
def correct_programs(matrix: Matrix, gt_tests: int) -> list[int]:
    """C: the programs that pass every ground-truth test (the first ``gt_tests`` columns)."""
    return [j for j, row in enumerate(matrix) if all(row[:gt_tests])]


def code_rewards(matrix: Matrix, gt_tests: int) -> list[float]:
    """Each program's share of the ground-truth tests it passes."""
    return [sum(row[:gt_tests]) / gt_tests for row in matrix]


def unit_test_correct(matrix: Matrix, gt_tests: int) -> list[bool] | None:
    """Whether each generated test is correct (every program of C passes it); None when C is
    empty (nothing says which tests are right)."""
    right = correct_programs(matrix, gt_tests)
    if not right:
        return None
    width = len(matrix[0]) - gt_tests if matrix else 0
    return [all(matrix[j][gt_tests + k] for j in right) for k in range(width)]


def unit_test_rewards(
    matrix: Matrix,
    gt_tests: int,
    form: Literal["paper", "code"] = "paper",
    post_stage: bool = False,
) -> list[float] | None:
    """The reward of each generated test (columns ``gt_tests`` on), or None when C is empty.

    With W the programs that fail some ground-truth test, a correct test k earns p01_k (the
    share of W failing it) and a wrong test loses p00_k (the share of W passing it); ``paper``
    counts instead of shares (× |W|). ``post_stage``: a correct test earns 1 only when all of W
    fail it, a wrong test loses 1 when any of W passes it, else 0. With W empty, ``code`` gives
    ±1 (correct / wrong) and ``paper`` 0."""
    correct = unit_test_correct(matrix, gt_tests)
    if correct is None:
        return None
    right = set(correct_programs(matrix, gt_tests))
    wrong = [j for j in range(len(matrix)) if j not in right]
    rewards = []
    for k, is_correct in enumerate(correct):
        column = [matrix[j][gt_tests + k] for j in wrong]
        sign = 1.0 if is_correct else -1.0
        if not wrong:
            rewards.append(sign if form == "code" else 0.0)
            continue
        # the wrong programs this test separates (correct test) or lets through (wrong test)
        hits = column.count(0) if is_correct else column.count(1)
        if post_stage:
            scale = float(hits == len(wrong)) if is_correct else float(hits > 0)
        else:
            scale = hits / len(wrong) if form == "code" else float(hits)
        rewards.append(sign * scale)
    return rewards


def standardise(rewards: Sequence[float]) -> list[float] | None:
    """(r − mean) / std over one problem's samples (population std), used directly as the
    advantages; None when the std is 0: the problem is dropped (no signal)."""
    if not rewards:
        return None
    mean = sum(rewards) / len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    if std <= STD_FLOOR:
        return None
    return [(r - mean) / std for r in rewards]
