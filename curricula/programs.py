"""Programs as tasks (Absolute Zero, arXiv 2505.03335; docs/algorithms.md#azr): checking a
model-written Python function, running it on inputs, and checking answers to the three task
modes. One copy, used by the AZR loop and by Agent0's ``code_io`` tasks.

A task is a triplet (program p, input i, output o); a mode hides one part:

- deduction: given p and i, predict o (checked as ``eval(o) == eval(answer)``);
- abduction: given p and o, give any i' with ``p(i') == o`` (checked by running p);
- induction: given a message and some (i, o) pairs, write p (checked on held-out pairs: every
  one must pass).

Everything here is text processing: the functions that end in ``_code`` WRITE a program that the
sandbox (``sandbox/``) runs, and ``read_*`` parse what it printed. Nothing model-written is ever
executed in this process (``ast.literal_eval`` of literals aside). Dependency-free: standard
library only.

Validity of a proposed program (the released AZR code's rules, ``check_program``): it parses,
has exactly one top-level function definition (renamed ``f``), imports nothing and touches
nothing on the ban list (``BANNED``), and, when run, gives the same result twice in ONE process
(``run_code``: ``f(i)`` is called twice and the results compared, as the released code does;
the paper says it executes j = 2 times) within the sandbox's time limit.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

# modules and attributes a program may not import or touch (the released AZR config's list):
# randomness, clocks, threads and processes, hashing, the environment, exiting the interpreter
BANNED: tuple[str, ...] = (
    "logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime",
    "time", "hashlib", "hmac", "bcrypt", "calendar", "os.sys", "os.path", "os.environ",
    "sys.exit",
)
# the top-level statements a program may have beside its one function: imports, constants and
# a docstring (a call such as ``print(f(3))`` is the proposal's input, which the parser removes)
_ALLOWED_TOP = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.Expr)
DEDUCTION, ABDUCTION, INDUCTION = "deduction", "abduction", "induction"  # the task modes
# what the solver of each mode gives (``tasks.jsonl``'s ``answer_type``)
ANSWER_TYPES = {DEDUCTION: "code_output", ABDUCTION: "code_input", INDUCTION: "code_program"}
MARK = "@@programs@@"  # the line the sandbox code prints its results on
IDENTITY = "def f(a):\n    return a"  # the paper's seed program, on the input "Hello world"
SEED_INPUT = "'Hello world'"


@dataclass(frozen=True)
class Checked:
    """A program after the static checks: ``program`` (its function renamed ``f``) when it
    passes, else None and ``why``."""

    program: str | None
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.program is not None


def _dotted(node: ast.AST) -> str | None:
    """``os.path.join`` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _hits(name: str, banned: tuple[str, ...]) -> str | None:
    """The ban entry that dotted ``name`` falls under (``random.randint`` under ``random``)."""
    for entry in banned:
        if name == entry or name.startswith(entry + "."):
            return entry
    return None


def banned_use(tree: ast.AST, banned: tuple[str, ...] = BANNED) -> str | None:
    """The first banned module or attribute ``tree`` imports or touches, else None: ``import
    random``, ``from os import path``, ``os.environ[...]``, ``sys.exit()``,
    ``__import__('time')``."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [n for n in [_dotted(node)] if n]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("__import__", "import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        for name in names:
            hit = _hits(name, banned)
            if hit:
                return hit
    return None


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def check_program(code: str, banned: tuple[str, ...] = BANNED, name: str = "f") -> Checked:
    """The static half of validity: parses, one top-level function (renamed ``name``), only
    imports / constants beside it, nothing banned."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as error:  # ValueError: a NUL byte in the source
        return Checked(None, f"syntax error: {str(error)[:80]}")
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if len(functions) != 1:
        return Checked(None, f"{len(functions)} function definitions (need exactly one)")
    if isinstance(functions[0], ast.AsyncFunctionDef):
        return Checked(None, "an async function")
    others = [n for n in tree.body if n is not functions[0]]
    if any(not isinstance(n, _ALLOWED_TOP) for n in others) or any(
        isinstance(n, ast.Expr) and not isinstance(n.value, ast.Constant) for n in others
    ):
        return Checked(None, "top-level code beside the function")
    hit = banned_use(tree, banned)
    if hit:
        return Checked(None, f"uses banned {hit}")
    old = functions[0].name
    if old != name:
        functions[0].name = name
        tree = _Rename(old, name).visit(tree)
    return Checked(ast.unparse(tree) if old != name else code.strip("\n"))


def check_arguments(arguments: str, banned: tuple[str, ...] = BANNED) -> str:
    """Why ``f(arguments)`` is not a call with these arguments ("" when it is)."""
    try:
        call = ast.parse(f"f({arguments})", mode="eval").body
    except (SyntaxError, ValueError):
        return "input does not parse"
    if not isinstance(call, ast.Call) or not (call.args or call.keywords):
        return "empty input"
    hit = banned_use(call, banned)
    return f"input uses banned {hit}" if hit else ""


# ------------------------------------------------------------------ code the sandbox runs
_RUN = '''import contextlib as _sp_ctx, io as _sp_io, json as _sp_json
{program}
_sp_calls = [{calls}]
_sp_results = []
for _sp_call in _sp_calls:
    try:
        with _sp_ctx.redirect_stdout(_sp_io.StringIO()):
            _sp_first = _sp_call()
            _sp_second = _sp_call()
        _sp_text = repr(_sp_first)
        _sp_same = _sp_text == repr(_sp_second) and bool(_sp_first == _sp_second)
        if not _sp_same:
            _sp_results.append({{"ok": False, "error": "not deterministic"}})
        elif len(_sp_text) > {max_chars}:
            _sp_results.append({{"ok": False, "error": "output too long"}})
        elif not bool(eval(_sp_text) == _sp_first):
            _sp_results.append({{"ok": False, "error": "output not comparable"}})
        else:
            _sp_results.append({{"ok": True, "output": _sp_text}})
    except BaseException as _sp_error:
        _sp_results.append({{"ok": False, "error": type(_sp_error).__name__}})
print({mark!r} + _sp_json.dumps(_sp_results))
'''


def run_code(program: str, inputs: list[str], max_chars: int = 1000) -> str:
    """Code that calls ``f(i)`` twice per input in one process and prints, on one line after
    ``MARK``, per input: the output's repr, or why there is none (an exception, unequal
    results, an output longer than ``max_chars`` or one ``eval(repr(·))`` does not give
    back). The program's own prints are swallowed."""
    calls = ", ".join(f"lambda: f({i})" for i in inputs)
    return _RUN.format(program=program, calls=calls, max_chars=max_chars, mark=MARK)


_MATCH = '''import contextlib as _sp_ctx, io as _sp_io, json as _sp_json
{program}
_sp_pairs = [{pairs}]
_sp_results = []
for _sp_call, _sp_gold in _sp_pairs:
    try:
        with _sp_ctx.redirect_stdout(_sp_io.StringIO()):
            _sp_results.append(bool(_sp_call() == _sp_gold()))
    except BaseException:
        _sp_results.append(False)
print({mark!r} + _sp_json.dumps(_sp_results))
'''


def match_code(program: str, pairs: list[tuple[str, str]]) -> str:
    """Code printing, per (input, output) pair, whether ``f(input) == output`` (abduction:
    the proposer's program on the solver's input; induction: the solver's program on the
    held-out pairs)."""
    rendered = ", ".join(f"(lambda: f({i}), lambda: ({o}))" for i, o in pairs)
    return _MATCH.format(program=program, pairs=rendered, mark=MARK)


def equal_code(gold: str, predicted: str) -> str:
    """Code printing whether ``eval(gold) == eval(predicted)`` (deduction)."""
    return (
        "import json as _sp_json\ntry:\n"
        f"    _sp_same = bool(eval({gold!r}) == eval({predicted!r}))\n"
        "except BaseException:\n    _sp_same = False\n"
        f"print({MARK!r} + _sp_json.dumps([_sp_same]))\n"
    )


def answer_code(mode: str, program: str, output: str, answer: str) -> str:
    """Code printing whether ``answer`` solves a deduction (``eval(output) ==
    eval(answer)``) or an abduction (``f(answer) == output``) task."""
    if mode == DEDUCTION:
        return equal_code(output, answer)
    return match_code(program, [(answer, output)])


def read_results(stdout: str) -> list | None:
    """What a ``*_code`` program printed after ``MARK`` (None: it never got there)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                results = json.loads(line[len(MARK):])
            except ValueError:
                return None
            return results if isinstance(results, list) else None
    return None


def literal_equal(gold: str, predicted: str) -> bool | None:
    """``gold == predicted`` as Python literals, in process (safe: ``ast.literal_eval``);
    None when either is not a plain literal (then the sandbox decides)."""
    try:
        return bool(ast.literal_eval(gold) == ast.literal_eval(predicted))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def spelled_equal(gold: str, predicted: str) -> bool:
    """Lenient deduction (small models): ``predicted`` is the text ``str(gold)`` prints, as
    when a model answers ``Hello world`` for the string ``'Hello world'``. Honest: the same
    value, written without its quotes. In process (``ast.literal_eval`` of the gold only)."""
    try:
        value = ast.literal_eval(gold)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return predicted.strip() == str(value)


def lenient_inputs(answer: str, banned: tuple[str, ...] = BANNED) -> list[str]:
    """Lenient abduction: the input as written (when it is a call's arguments), and, unless it
    is already a quoted string, the string it spells (``Hello world`` → ``'Hello world'``):
    the task passes when either gives the output. Strict mode reads it as written only."""
    given = answer_input(answer)
    found = [] if check_arguments(given, banned) else [given]
    quoted = isinstance(_literal(given), str)
    return found if quoted or not given else [*found, repr(given)]


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def function_only(code: str) -> str:
    """Lenient induction (small models): the program up to the end of its first function, the
    top-level lines the model wrote after it (``print(f(5))``, ``f(1) == 1``, a closing fence,
    prose) dropped; what came before it (imports, constants) kept."""
    lines = code.splitlines()
    start = next((k for k, line in enumerate(lines) if line.startswith("def ")), None)
    if start is None:
        return code
    end = next((k for k in range(start + 1, len(lines))
                if lines[k].strip() and not lines[k].startswith((" ", "\t"))), len(lines))
    return "\n".join(lines[:end]).rstrip()


# ------------------------------------------------------------------ parsing replies
@dataclass
class Parsed:
    """A parsed reply: what the mode needs, or ``why`` it could not be read (a format error)."""

    program: str | None = None
    inputs: list[str] = field(default_factory=list)
    message: str = ""
    answer: str | None = None
    why: str = ""

    @property
    def ok(self) -> bool:
        return not self.why


_BLOCK = re.compile(r"```(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_INPUT_BLOCK = re.compile(r"```input[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_INPUT_LINE = re.compile(r"^[ \t]*Input:[ \t]*(.+?)[ \t]*$", re.M | re.I)
_MESSAGE = re.compile(r"<message>(.*?)</message>|^[ \t]*Message:[ \t]*(.+?)[ \t]*$", re.S | re.M)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_THINK_ANSWER = re.compile(r"<think>.*?</think>\s*<answer>(.*?)</answer>", re.S)


def _balanced(text: str, open_at: int) -> int | None:
    """The index of the ``)`` closing the ``(`` at ``open_at`` (quotes respected), else None."""
    depth, quote, index = 0, "", open_at
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return index if char == ")" else None
        index += 1
    return None


def call_arguments(line: str) -> str | None:
    """The arguments of a line that starts with a call ``f(…)`` or ``print(f(…))``; what
    follows the call (a comment, ``returns 3``) is ignored. None for any other line."""
    line = line.strip()
    if line.startswith("print(f("):
        line = line[len("print("):]
    if not line.startswith("f("):
        return None
    close = _balanced(line, 1)
    return line[2:close] if close is not None else None


def calls_in(text: str) -> list[str]:
    """The arguments of every call ``f(…)`` written anywhere in ``text``, in order (a call
    inside another's arguments is part of them)."""
    found, start = [], 0
    for match in re.finditer(r"(?<![\w.])f\(", text):
        if match.start() < start:
            continue
        close = _balanced(text, match.end() - 1)
        if close is not None:
            found.append(text[match.end():close])
            start = close
    return found


def _top_level_calls(lines: list[str]) -> list[tuple[int, str]]:
    return [(index, args) for index, line in enumerate(lines)
            if not line.startswith((" ", "\t")) and (args := call_arguments(line)) is not None]


def _inputs_after(text: str, anywhere: bool = False) -> list[str]:
    """Inputs written after a program: ```input blocks, else ``Input:`` lines, else lines
    that start with a call ``f(…)`` (``anywhere``: calls anywhere in the text)."""
    blocks = [b.strip() for b in _INPUT_BLOCK.findall(text) if b.strip()]
    if blocks:
        return [call_arguments(b) or b for b in blocks]
    lines = [line.strip() for line in _INPUT_LINE.findall(text)]
    if lines:
        return [call_arguments(line) or line for line in lines]
    if anywhere:
        return calls_in(text)
    return [args for _, args in _top_level_calls(text.splitlines())]


def parse_program_input(text: str) -> Parsed:
    """A proposal of a program and one input (deduction, abduction): a ```python block
    defining a function, and the input as an ```input block, an ``Input:`` line after the
    block, or the block's first top-level call ``f(…)`` / ``print(f(…))`` (then the program is
    the lines before it): small models write the call far more often (docs/agent0.md)."""
    block = _BLOCK.search(text)
    if block is None or "def " not in block.group(1):
        return Parsed(why="no program")
    lines = block.group(1).rstrip().splitlines()
    given = [k for k, line in enumerate(lines) if _INPUT_LINE.fullmatch(line)]
    if given:  # an unclosed block: its first top-level ``Input:`` line ends the program
        text, lines = "\n".join(lines[given[0]:]), lines[: given[0]]
        block = None
    inputs = _inputs_after(text[block.end():] if block else text)
    if not inputs:
        calls = _top_level_calls(lines)
        if not calls:
            return Parsed(program="\n".join(lines), why="no input")
        index, argument = calls[0]
        lines, inputs = lines[:index], [argument]
    program = "\n".join(lines).rstrip()
    if not inputs[0].strip():
        return Parsed(program=program, why="empty input")
    return Parsed(program=program, inputs=[inputs[0].strip()])


def parse_inputs_message(text: str, require_message: bool = True) -> Parsed:
    """An induction proposal: a message (``<message>…</message>`` or a ``Message:`` line) and
    inputs (```input blocks, ``Input:`` lines or ``f(…)`` lines), distinct and in order."""
    found = _MESSAGE.search(text)
    message = ((found.group(1) or found.group(2)) or "").strip() if found else ""
    if require_message and not message:
        return Parsed(why="no message")
    inputs = list(dict.fromkeys(
        i.strip() for i in _inputs_after(text, anywhere=True) if i.strip()))
    if not inputs:
        return Parsed(message=message, why="no input")
    return Parsed(inputs=inputs, message=message)


def parse_answer(text: str, lenient: bool = False) -> str | None:
    """The answer of a solver reply. Strict (the released code's format): the content of
    ``<answer>…</answer>`` after ``<think>…</think>``. Lenient (small models): the FIRST
    ``<answer>``, up to its ``</answer>`` or the end of its line, whichever comes first. The
    first, because a small model whose reply starts with ``<answer>`` answers there and then
    goes on to invent more examples with answers of their own."""
    if not lenient:
        found = _THINK_ANSWER.search(text)
        return found.group(1).strip() if found else None
    start = text.find("<answer>")
    if start < 0:
        return None
    answer = text[start + len("<answer>"):].lstrip()
    answer = answer.split("</answer>", 1)[0].split("\n", 1)[0].strip()
    return answer or None


def answer_program(answer: str) -> str:
    """The program of an induction answer: its ```python block, else the answer itself."""
    block = _BLOCK.search(answer)
    return block.group(1).strip("\n") if block else answer.strip("\n")


def parse_program_answer(text: str, lenient: bool = False) -> str | None:
    """The program of an induction solver's reply: inside the answer (strict); lenient, the
    first closed answer, else a ```python block, else the text from ``def`` on."""
    if not lenient:
        answer = parse_answer(text)
        return (answer_program(answer) or None) if answer is not None else None
    closed = _ANSWER.findall(text)
    if closed:
        return answer_program(closed[0]) or None
    block = _BLOCK.search(text)
    if block and "def " in block.group(1):
        return block.group(1).strip("\n")
    start = text.find("def ")
    return text[start:].strip("\n") if start >= 0 else None


def answer_input(answer: str) -> str:
    """The input of an abduction answer: ``f(3)`` and ``print(f(3))`` mean ``3``."""
    return call_arguments(answer) or answer.strip()
