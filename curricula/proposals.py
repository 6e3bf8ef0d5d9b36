"""Agent0's task formats (docs/algorithms.md#agent0): what a curriculum agent's proposal must look
like to be a task, and how an executor's answer to it is checked.

- ``qa``: a question and the proposer's own answer (``parse_qa``); the executor's answers are
  pseudo-labelled by self-consistency (``curricula.consistency``).
- ``code_io`` (Absolute Zero style): a Python function ``f`` and an input (``parse_code_io``); the
  sandbox runs it for the gold output and checks an executor's predicted output (deduction) or
  input (abduction) by running it, with the machinery AZR uses (``curricula/programs.py``:
  ``run_code``, ``answer_code``).

Pure text processing: the sandbox runs what these functions write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from curricula import programs
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


def parse_code_io(text: str) -> Proposal:
    """A ```python block defining ``f`` and an input, read by the program machinery AZR uses
    (``programs.parse_program_input``): an ```input block or an ``Input:`` line after the
    block, else the first top-level call ``f(…)`` / ``print(f(…))`` (the program is then the
    lines before it). Small models write the call far more often than the line
    (docs/agent0.md). Agent0's own rule beside it: the function must be named ``f``; AZR's
    one-function rule and ban list do not apply (docs/agent0.md#executor-verified-tasks)."""
    parsed = programs.parse_program_input(text)
    if parsed.program is None or "def f(" not in parsed.program:
        return Proposal(text, False, "code_io", why_invalid="no program defining f")
    if not parsed.ok:
        return Proposal(text, False, "code_io", program=parsed.program, why_invalid=parsed.why)
    return Proposal(text, True, "code_io", program=parsed.program, input=parsed.inputs[0])


def code_question(proposal: Proposal) -> str:
    """The task as the executor reads it: predict the output (deduction) or give an input
    (abduction)."""
    program = f"```python\n{proposal.program}\n```"
    if proposal.mode == programs.DEDUCTION:
        return f"{program}\nWhat does f({proposal.input}) return?"
    return f"{program}\nGive an input x such that f(x) returns {proposal.output}."


def degenerate(answer: str | None) -> bool:
    """No answer, or one with no letter or digit, or a null word (``None`` from a print of
    nothing): what a collapsing executor writes."""
    if answer is None or not _HAS_WORD.search(answer):
        return True
    return answer.strip().lower() in ("none", "null", "nan")
