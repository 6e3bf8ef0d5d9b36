"""curricula/programs.py (validity, the ban list, renaming, parsing each mode's replies) and
AZR's checker (selfplay/loops/azr/tasks.py) on held-out programs run in the REAL sandbox:
deterministic ones accepted, non-deterministic and hostile ones refused or contained, slow
ones timed out, and the checker still working after each (docs/azr.md)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from curricula import programs
from sandbox import SandboxLimits, SandboxPool
from selfplay.engines.tools import ToolSettings
from selfplay.loops.azr.settings import AzrSettings
from selfplay.loops.azr.tasks import ABDUCTION, DEDUCTION, INDUCTION, Checker, Task


# ------------------------------------------------------------------ static checks
def test_one_function_renamed_f_with_its_recursive_calls() -> None:
    checked = programs.check_program("def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)")
    assert checked.ok and "def f(n)" in checked.program and "f(n - 1)" in checked.program
    assert "fact" not in checked.program


@pytest.mark.parametrize("code, why", [
    ("def f(a):\n    return a\ndef g(a):\n    return a", "2 function definitions"),
    ("x = 1", "0 function definitions"),
    ("def f(a):\n    return a\nprint(f(1))", "top-level code"),
    ("def f(a) return a", "syntax error"),
    ("async def f(a):\n    return a", "async"),
])
def test_invalid_shapes(code: str, why: str) -> None:
    checked = programs.check_program(code)
    assert not checked.ok and why in checked.why


@pytest.mark.parametrize("body, hit", [
    ("import random\ndef f(a):\n    return random.random()", "random"),
    ("from random import randint\ndef f(a):\n    return randint(0, a)", "random"),
    ("import time\ndef f(a):\n    return a", "time"),
    ("from datetime import date\ndef f(a):\n    return a", "datetime"),
    ("import os\ndef f(a):\n    return os.environ.get('HOME')", "os.environ"),
    ("from os import path\ndef f(a):\n    return a", "os.path"),
    ("import os.path\ndef f(a):\n    return a", "os.path"),
    ("import os\ndef f(a):\n    return os.sys.platform", "os.sys"),
    ("import sys\ndef f(a):\n    sys.exit(0)", "sys.exit"),
    ("def f(a):\n    return __import__('hashlib').md5(a).hexdigest()", "hashlib"),
    ("def f(a):\n    import threading\n    return a", "threading"),
])
def test_ban_list(body: str, hit: str) -> None:
    checked = programs.check_program(body)
    assert not checked.ok and checked.why == f"uses banned {hit}"


def test_allowed_imports_and_constants() -> None:
    code = "import math\nLIMIT = 3\ndef f(a):\n    return math.isqrt(a) + LIMIT"
    assert programs.check_program(code).program == code


# ------------------------------------------------------------------ parsing
def test_program_and_input_in_every_accepted_form() -> None:
    fenced = "```python\ndef f(a):\n    return a\n```\n```input\n'x', 2\n```"
    assert programs.parse_program_input(fenced).inputs == ["'x', 2"]
    line = "```python\ndef f(a):\n    return a\n```\nInput: [1, 2]\nOutput: [1, 2]"
    assert programs.parse_program_input(line).inputs == ["[1, 2]"]
    call = "```python\ndef f(a):\n    return a\nprint(f(3))  # prints 3\n```"
    parsed = programs.parse_program_input(call)
    assert parsed.inputs == ["3"] and parsed.program == "def f(a):\n    return a"
    unclosed = "```python\ndef f(a):\n    return a\nInput: 'Hello'\nOutput: 'Hello'"
    assert programs.parse_program_input(unclosed).program == "def f(a):\n    return a"
    assert programs.parse_program_input("def f(a): return a").why == "no program"
    assert programs.parse_program_input("```python\ndef f(a):\n    return a\n```").why == "no input"


def test_induction_inputs_and_message() -> None:
    reply = "<message>doubles</message>\n```input\n1\n```\n```input\n2\n```\n```input\n1\n```"
    parsed = programs.parse_inputs_message(reply)
    assert parsed.message == "doubles" and parsed.inputs == ["1", "2"]  # distinct, in order
    assert programs.parse_inputs_message("```input\n1\n```").why == "no message"
    lenient = programs.parse_inputs_message("f(1) gives 2, f(f(5)) and f('a)')", False)
    assert lenient.inputs == ["1", "f(5)", "'a)'"]


def test_answers_strict_and_lenient() -> None:
    reply = "<think>it adds one</think> <answer>3</answer>"
    assert programs.parse_answer(reply) == "3"
    assert programs.parse_answer("<answer>3</answer>") is None  # strict: no <think>
    assert programs.parse_answer("<answer>3</answer>", lenient=True) == "3"
    assert programs.parse_answer("<answer> 'ab'\nmore", lenient=True) == "'ab'"
    assert programs.parse_answer("3", lenient=True) is None
    # lenient reads the first answer: what follows is the model inventing more examples
    assert programs.parse_answer("<answer>1</answer>\n<answer>2</answer>", lenient=True) == "1"
    assert programs.parse_answer("<answer>1\nf(2) <answer>2</answer>", lenient=True) == "1"
    assert programs.parse_answer("<answer>\n'a'\n</answer>", lenient=True) == "'a'"
    assert programs.answer_input("f(2, 'x')") == "2, 'x'"
    code = "```python\ndef f(a):\n    return a\n```"
    assert programs.parse_program_answer(f"<think>t</think><answer>{code}</answer>") == (
        "def f(a):\n    return a")
    assert programs.parse_program_answer(code, lenient=True) == "def f(a):\n    return a"
    assert programs.parse_program_answer(code) is None


def test_lenient_readings_of_answers() -> None:
    # deduction: the text str(gold) prints counts; anything else does not
    assert programs.spelled_equal("'Hello world'", "Hello world")
    assert programs.spelled_equal("'2'", " 2 ")  # the string '2', written bare
    assert not programs.spelled_equal("'Hello world'", "hello world")
    assert not programs.spelled_equal("'Hello world'", "Hello world.")
    assert not programs.spelled_equal("[1, 2]", "1, 2")
    # abduction: as written (when it parses) and the string it spells (unless quoted)
    assert programs.lenient_inputs("Hello world") == ["'Hello world'"]
    assert programs.lenient_inputs("2") == ["2", "'2'"]
    assert programs.lenient_inputs("f('ab')") == ["'ab'"]
    assert programs.lenient_inputs("import os") == ["'import os'"]  # a string, never code
    # induction: the first function, without the top-level lines written after it
    reply = "import math\ndef f(v):\n    return v + 1\n\nprint(f(5))\n```\nThis adds one"
    assert programs.function_only(reply) == "import math\ndef f(v):\n    return v + 1"
    assert programs.function_only("no function") == "no function"


# ------------------------------------------------------------------ the real sandbox
class _Caller:
    """What the checker asks of a policy while the sandbox runs (the tool awaits
    ``policy.elsewhere()`` so the engine can serve other episodes)."""

    version = 0

    @contextlib.asynccontextmanager
    async def elsewhere(self):
        yield


@pytest.fixture(scope="module")
def checker():
    settings = AzrSettings(induction_inputs=4, induction_shown=2, max_output_chars=200,
                           sandbox=ToolSettings(wall_s=2.0, pool_size=2))
    made = Checker(settings)
    yield made
    made.close()


def propose(checker: Checker, program: str, argument: str):
    reply = f"```python\n{program}\n```\nInput: {argument}"
    return asyncio.run(checker.propose(_Caller(), DEDUCTION, reply, None))


DETERMINISTIC = "def f(xs):\n    return sorted(xs)[::-1]"


def test_deterministic_program_accepted(checker) -> None:
    proposed = propose(checker, DETERMINISTIC, "[3, 1, 2]")
    assert proposed.outcome == "passed" and proposed.task.outputs == ["[3, 2, 1]"]


@pytest.mark.parametrize("program, argument, why", [
    # a global counter: the second call returns 2
    ("_calls = []\ndef f(a):\n    _calls.append(a)\n    return len(_calls)", "1",
     "not deterministic"),
    # id() of objects kept alive: two calls, two addresses
    ("_keep = []\ndef f(a):\n    _keep.append(object())\n    return id(_keep[-1])", "1",
     "not deterministic"),
    # the order of a set of fresh objects follows their addresses
    ("_keep = []\ndef f(n):\n    objs = [object() for _ in range(n)]\n    _keep.extend(objs)\n"
     "    return [objs.index(o) for o in set(objs)]", "64", "not deterministic"),
    # an object whose repr is its address: not comparable after eval(repr(.))
    ("def f(a):\n    return object()", "1", "not deterministic"),
])
@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_non_deterministic_refused(checker, program, argument, why) -> None:
    proposed = propose(checker, program, argument)
    assert proposed.outcome == "wrong" and proposed.why == why


@pytest.mark.parametrize("program, why", [
    ("def f(a):\n    return open('/etc/passwd').read()", "PermissionError"),
    ("import os\ndef f(a):\n    while True:\n        os.fork()", None),  # process limit
    ("def f(a):\n    while True:\n        pass", "timed out"),
    ("def f(a):\n    s = 0\n    for i in range(10 ** 10):\n        s += i\n    return s",
     "timed out"),
    ("def f(a):\n    return len(bytearray(10 ** 11))", "MemoryError"),
    ("def f(a):\n    raise SystemExit(0)", "SystemExit"),
    ("import os\ndef f(a):\n    os._exit(0)", "program failed"),
    ("def f(a):\n    return 'x' * 10 ** 6", "output too long"),
])
@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_hostile_and_slow_programs_refused_and_the_checker_survives(checker, program,
                                                                    why) -> None:
    proposed = propose(checker, program, "1")
    assert proposed.outcome == "wrong"
    if why is not None:
        assert proposed.why == why
    assert propose(checker, DETERMINISTIC, "[1, 2]").outcome == "passed"  # still working


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_a_program_stopped_by_the_cpu_limit_is_said_to_have_timed_out() -> None:
    # The checker's sandbox has cpu_s == wall_s, so a busy loop meets RLIMIT_CPU (SIGXCPU) and
    # the wall deadline within milliseconds of each other, and which comes first is a race the
    # hostile-programs test lost 2 runs in 3 on an idle machine ("program failed"). Here the
    # CPU limit always comes first: it must read as a time-out too.
    made = Checker(AzrSettings(sandbox=ToolSettings(wall_s=5.0, pool_size=1)))
    made.tool._pool = SandboxPool(size=1, limits=SandboxLimits(wall_s=5.0, cpu_s=1.0))
    try:
        proposed = propose(made, "def f(a):\n    while True:\n        pass", "1")
    finally:
        made.close()
    assert proposed.outcome == "wrong" and proposed.why == "timed out"


def test_shell_commands_stay_inside_the_sandbox(checker, tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    program = f"import os\ndef f(a):\n    return os.system('touch {target}')"
    propose(checker, program, "1")  # contained: whatever it returns, the host is untouched
    assert not target.exists()


def judge(checker: Checker, task: Task, reply: str) -> str:
    return asyncio.run(checker.judge(_Caller(), task, reply)).outcome


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_judging_each_mode(checker) -> None:
    think = "<think>t</think>"
    deduction = Task(DEDUCTION, "def f(a):\n    return a * 2", ["3"], ["6"])
    assert judge(checker, deduction, f"{think}<answer>6</answer>") == "passed"
    assert judge(checker, deduction, f"{think}<answer>3 * 2</answer>") == "passed"  # eval'd
    assert judge(checker, deduction, f"{think}<answer>7</answer>") == "wrong"
    assert judge(checker, deduction, "<answer>6</answer>") == "format"
    abduction = Task(ABDUCTION, "def f(a):\n    return a % 5", ["7"], ["2"])
    assert judge(checker, abduction, f"{think}<answer>12</answer>") == "passed"  # any input
    assert judge(checker, abduction, f"{think}<answer>f(2)</answer>") == "passed"
    assert judge(checker, abduction, f"{think}<answer>3</answer>") == "wrong"
    induction = Task(INDUCTION, "def f(a):\n    return a + 1", ["1", "2", "3", "4"],
                     ["2", "3", "4", "5"], "adds", shown=2)
    right = "```python\ndef g(x):\n    return x + 1\n```"
    assert judge(checker, induction, f"{think}<answer>{right}</answer>") == "passed"
    # right on the shown pairs only: f(1)=2, f(2)=3 but f(3)=3 → every hidden pair must pass
    shown_only = "```python\ndef f(x):\n    return min(x + 1, 3)\n```"
    assert judge(checker, induction, f"{think}<answer>{shown_only}</answer>") == "wrong"


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_induction_proposal_runs_every_input(checker) -> None:
    source = Task(DEDUCTION, "def f(a):\n    return a * a", ["2"], ["4"])
    reply = "<message>squares</message>\nInput: 1\nInput: 2\nInput: 'x'\nInput: 3\nInput: 4"
    proposed = asyncio.run(checker.propose(_Caller(), INDUCTION, reply, source))
    # 'x' * 'x' fails and is dropped; four inputs remain, two shown, two held out
    assert proposed.outcome == "passed"
    assert proposed.task.inputs == ["1", "2", "3", "4"]
    assert proposed.task.outputs == ["1", "4", "9", "16"]
    assert proposed.task.pairs(held_out=True) == [("3", "9"), ("4", "16")]
    short = asyncio.run(checker.propose(_Caller(), INDUCTION, "<message>m</message>\nInput: 1",
                                        source))
    assert short.outcome == "wrong" and short.why == "1 of 4 inputs run"


@pytest.fixture(scope="module")
def lenient_checker():
    settings = AzrSettings(induction_inputs=4, induction_shown=2, lenient=True,
                           sandbox=ToolSettings(wall_s=2.0, pool_size=1))
    made = Checker(settings)
    yield made
    made.close()


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_lenient_judging_only_in_the_lenient_checker(checker, lenient_checker) -> None:
    """An unquoted string counts only when lenient; a wrong value never does."""
    think = "<think>t</think>"
    identity = "def f(a):\n    return a"
    deduction = Task(DEDUCTION, identity, ["'Hello world'"], ["'Hello world'"])
    assert judge(lenient_checker, deduction, "<answer>Hello world</answer>") == "passed"
    assert judge(lenient_checker, deduction, "<answer>Hello</answer>") == "wrong"
    assert judge(checker, deduction, f"{think}<answer>Hello world</answer>") == "wrong"
    abduction = Task(ABDUCTION, identity, ["'Hello world'"], ["'Hello world'"])
    assert judge(lenient_checker, abduction, "<answer>Hello world</answer>") == "passed"
    assert judge(checker, abduction, f"{think}<answer>Hello world</answer>") == "wrong"
    numbers = Task(ABDUCTION, "def f(a):\n    return a % 5", ["7"], ["2"])
    assert judge(lenient_checker, numbers, "<answer>12</answer>") == "passed"  # as written
    assert judge(lenient_checker, numbers, "<answer>3</answer>") == "wrong"  # 3 and '3' fail
    induction = Task(INDUCTION, "def f(a):\n    return a + 1", ["1", "2", "3", "4"],
                     ["2", "3", "4", "5"], "adds", shown=2)
    trailing = "```python\ndef f(x):\n    return x + 1\n\nprint(f(5))  # 6"
    assert judge(lenient_checker, induction, trailing) == "passed"
    assert judge(checker, induction, f"{think}<answer>{trailing}```</answer>") == "wrong"
