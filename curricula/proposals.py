"""Agent0's task formats (docs/algorithms.md#agent0): what a curriculum agent's proposal must look
like to be a task, and how an executor's answer to it is checked.

- ``qa``: a question and the proposer's own answer (``parse_qa``); the executor's answers are
  pseudo-labelled by self-consistency (``curricula.consistency``).
- ``code_io`` (Absolute Zero style): a Python function ``f`` and an input (``parse_code_io``); the
  sandbox runs it for the gold output (``run_program_code``) and checks an executor's predicted
  output (deduction) or input (abduction) by running it (``check_code``).

Pure text processing: the sandbox runs what these functions write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from curricula.answers import last_boxed


@dataclass
class Proposal:
    """One parsed proposal. For ``code_io``, ``answer`` is the gold output the sandbox gave."""

    text: str
    valid: bool
    kind: str = "qa"
    question: str | None = None  # what the executor sees
    answer: str | None = None
    answer_type: str | None = None
    program: str | None = None
    input: str | None = None
    output: str | None = None
    mode: str | None = None  # code_io: deduction | abduction
    why_invalid: str = ""


_TAGGED = re.compile(r"<question>(.*?)</question>", re.S)
_QUESTION_ANSWER = re.compile(r"Question:\s*(.+?)\s*\n\s*Answer:[ \t]*([^\n]*)", re.S)
_HAS_WORD = re.compile(r"[0-9A-Za-z]")


def parse_qa(text: str) -> Proposal:
    """``<question>…</question>`` then ``\\boxed{answer}`` (the paper's format), or
    ``Question: … / Answer: …`` on two lines (the CPU prompt's)."""
    tagged = _TAGGED.search(text)
    if tagged:
        question, answer = tagged.group(1).strip(), last_boxed(text[tagged.end() :])
    else:
        match = _QUESTION_ANSWER.search(text)
        if match is None:
            return Proposal(text, False, why_invalid="no question/answer")
        question, answer = match.group(1).strip(), match.group(2).strip()
        answer = last_boxed(answer) or answer.rstrip(".").strip()
    if len(question) < 8:
        return Proposal(text, False, why_invalid="question too short")
    if not answer or not _HAS_WORD.search(answer):
        return Proposal(text, False, question=question, why_invalid="no answer")
    answer_type = "integer" if re.fullmatch(r"-?\d+", answer) else "expression"
    return Proposal(text, True, "qa", question, answer, answer_type)


_CODE_BLOCK = re.compile(r"```(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S)
_INPUT_LINE = re.compile(r"^[ \t]*Input:[ \t]*(.+?)[ \t]*$", re.M)
_CALL = re.compile(r"f\((?P<args>.*)\)")


def _call_args(line: str) -> str | None:
    """The arguments of ``f(…)`` or ``print(f(…))`` on one line, else None."""
    line = line.strip()
    if line.startswith("print(") and line.endswith(")"):
        line = line[len("print(") : -1].strip()
    match = _CALL.fullmatch(line)
    return match.group("args") if match else None


def parse_code_io(text: str) -> Proposal:
    """A ```python block defining ``f`` and an input: an ``Input:`` line after the block, or
    the block's first top-level call ``f(…)`` / ``print(f(…))`` (the program is then the lines
    before it). Small models write the call far more often than the line (docs/agent0.md)."""
    block = _CODE_BLOCK.search(text)
    if block is None or "def f(" not in block.group(1):
        return Proposal(text, False, "code_io", why_invalid="no program defining f")
    lines = block.group(1).rstrip().splitlines()
    given = _INPUT_LINE.search(text[block.end() :])
    if given:
        argument = given.group(1).strip()
        argument = _call_args(argument) or argument
    else:
        calls = [
            (index, args)
            for index, line in enumerate(lines)
            if not line.startswith((" ", "\t")) and (args := _call_args(line)) is not None
        ]
        if not calls:
            return Proposal(text, False, "code_io", why_invalid="no input")
        index, argument = calls[0]
        lines = lines[:index]
    program = "\n".join(lines).rstrip()
    if not argument.strip():
        return Proposal(text, False, "code_io", program=program, why_invalid="empty input")
    return Proposal(text, True, "code_io", program=program, input=argument.strip())


def run_program_code(program: str, argument: str) -> str:
    """Code printing repr(f(input)); the value must survive eval(repr(·)) to be checkable."""
    return (
        f"{program}\n_value = f({argument})\n"
        "assert eval(repr(_value)) == _value, 'output not comparable'\n"
        "print(repr(_value))"
    )


def check_code(proposal: Proposal, predicted: str) -> str:
    """Code printing True when ``predicted`` solves the task (run in the sandbox: it is model
    text)."""
    if proposal.mode == "deduction":
        return f"print(({predicted}) == ({proposal.output}))"
    return f"{proposal.program}\nprint(f({predicted}) == ({proposal.output}))"


def code_question(proposal: Proposal) -> str:
    program = f"```python\n{proposal.program}\n```"
    if proposal.mode == "deduction":
        return f"{program}\nWhat does f({proposal.input}) return?"
    return f"{program}\nGive an input x such that f(x) returns {proposal.output}."


def degenerate(answer: str | None) -> bool:
    """No answer, or one with no letter or digit, or a null word (``None`` from a print of
    nothing): what a collapsing executor writes."""
    if answer is None or not _HAS_WORD.search(answer):
        return True
    return answer.strip().lower() in ("none", "null", "nan")
