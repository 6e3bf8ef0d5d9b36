"""SPICE's generated questions (docs/algorithms.md#spice): what a challenger's reply must hold to
be a valid question, and how a reasoner's reply to it is graded.

A question is multiple choice (four options A-D, the answer a letter) or free form with a typed
answer (an integer, an expression, or a string of at most three words). It is valid when it
parses, asks something ("?" for free form), does not give its answer away, and makes sense
without the document it was written from ("according to the passage" is refused). Small models
write broken JSON, so the reply is read as strict JSON first, then field by field, then as
``Question:`` / ``A)`` / ``Answer:`` lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from curricula.answers import (
    LETTERS,
    MAX_STRING_WORDS,
    option_letter,
    typed_answer,
    typed_correct,
)

ANSWER_TYPES = ("mc", "integer", "expression", "string")
MIN_QUESTION_WORDS = 3
FREE_FORM_END = '"}'
ANSWER_HINTS = {
    "mc": "the letter of the correct option (A, B, C or D)",
    "integer": "an integer",
    "expression": "a number or a math expression",
    "string": "at most three words",
}


@dataclass
class GeneratedTask:
    """A parsed challenger question: the stem, the gold answer (a letter for mc), its type."""

    question: str
    answer: str
    answer_type: str  # one of ANSWER_TYPES
    options: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """What the reasoner (and the contamination guard) sees: the stem, then the options."""
        lines = [self.question] + [f"{k}) {v}" for k, v in self.options.items()]
        return "\n".join(lines)


_NOT_SELF_CONTAINED = re.compile(
    r"\b(?:according to|based on|in|from|of|within|by)\s+(?:the|this|that)\s+"
    r"(?:given\s+|above\s+|following\s+|provided\s+|previous\s+)?"
    r"(?:text|passage|document|article|excerpt|context|paragraph|reading|snippet|section)\b"
    r"|\b(?:the|this)\s+(?:given\s+|above\s+|provided\s+)?"
    r"(?:passage|document|text|excerpt|article|paragraph)\s+"
    r"(?:above|below|says|states|mentions|describes|discusses)\b"
    r"|\b(?:this|the\s+given|the\s+above|the\s+provided)\s+(?:passage|document|text|excerpt|article)\b"
    r"|\bas\s+(?:mentioned|described|stated|discussed|shown)\s+(?:above|earlier|before)\b"
    r"|\bthe\s+(?:passage|excerpt|author)\b",
    re.IGNORECASE,
)
# "Is the following sentence a fact?": it points at something that is not there (nothing but a
# few words follows "the following" before the question ends: no colon, no quote, no options)
_POINTS_AT_NOTHING = re.compile(
    r"\b(?:the|these)\s+following(?:\s+[A-Za-z]+){0,5}\s*\?\s*$", re.IGNORECASE
)
# a JSON string value, closed by the quote that is followed by `,"`, `}` or the end of the line
# (a trailing comma allowed), so unescaped quotes inside a value, which small models write, do not
# cut it short
_JSON_VALUE = r'"\s*:\s*"(.*?)"\s*(?=,\s*"|,?\s*\}|,?\s*$)'
_JSON_FIELD = {
    name: re.compile(rf'"{name}{_JSON_VALUE}', re.IGNORECASE | re.MULTILINE)
    for name in ("question", "answer")
}
_NEXT_KEY = re.compile(r'"[\s,{]*"\w+"\s*:')
_JSON_OPTION = re.compile(rf'"([A-Da-d]){_JSON_VALUE}', re.MULTILINE)
_JSON_OPTION_LIST = re.compile(r'"(?:options|choices)"\s*:\s*\[(.*?)\]', re.IGNORECASE | re.DOTALL)
_LINE_FIELD = {
    "question": re.compile(r"^[\s*#]*question\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE),
    "answer": re.compile(
        r"^[\s*#]*(?:correct\s+)?answer\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE
    ),
}
_LINE_OPTION = re.compile(r"^\s*\(?([A-D])\s*[\).:]\s+(.+?)\s*$", re.MULTILINE)
_INTEGER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)")
_EXPRESSION_CHARS = re.compile(r"[\d\s.+\-*/^()=<>,\\{}\[\]a-zA-Z_!%|]*")


def _unescape(value: str) -> str:
    try:
        return json.loads(f'"{value}"')
    except ValueError:  # not valid JSON escapes: keep the text as written
        return value


def _json_object(text: str) -> dict | None:
    """The first JSON object in the text, if it decodes (trailing junk is fine)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _options_from(value) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k).strip().upper(): str(v).strip() for k, v in value.items()}
    if isinstance(value, list):
        return {letter: str(v).strip() for letter, v in zip(LETTERS, value, strict=False)}
    return {}


def extract_fields(text: str) -> dict:
    """question / answer / options from a reply: strict JSON first, then JSON-like fields read
    one by one (bad JSON), then ``Question:`` / ``A)`` / ``Answer:`` lines. Missing → absent."""
    fields: dict = {}
    decoded = _json_object(text)
    if decoded is not None:
        lowered = {str(k).lower(): v for k, v in decoded.items()}
        for name in ("question", "answer"):
            if isinstance(lowered.get(name), str | int | float) and str(lowered[name]).strip():
                fields[name] = str(lowered[name]).strip()
        options = _options_from(lowered.get("options", lowered.get("choices")))
        if options:
            fields["options"] = options
    for name, pattern in _JSON_FIELD.items():
        if name not in fields and (match := pattern.search(text)) and match.group(1).strip():
            value = _NEXT_KEY.split(match.group(1))[0]  # a value never holds the next key
            fields[name] = _unescape(value).strip()
    if "options" not in fields:
        options = {
            m.group(1).upper(): _unescape(m.group(2)).strip() for m in _JSON_OPTION.finditer(text)
        }
        if not options and (listed := _JSON_OPTION_LIST.search(text)):
            options = _options_from(re.findall(r'"((?:[^"\\]|\\.)*)"', listed.group(1)))
        if not options:
            options = {m.group(1): m.group(2).strip() for m in _LINE_OPTION.finditer(text)}
        if options:
            fields["options"] = options
    for name, pattern in _LINE_FIELD.items():
        if name not in fields and (match := pattern.search(text)):
            fields[name] = match.group(1).strip()
    return fields


def free_answer_type(answer: str) -> str | None:
    """integer, expression, string (≤ 3 words), or None (too long to check by exact match)."""
    value = answer.strip().strip("$").strip().rstrip(".,;").strip()
    if not value:
        return None
    if _INTEGER.fullmatch(value):
        return "integer"
    without_commands = re.sub(r"\\[a-zA-Z]+", "", value)
    if (
        _EXPRESSION_CHARS.fullmatch(value)
        and re.search(r"\d|\\(?:frac|sqrt|pi)", value)
        and not re.search(r"[A-Za-z]{3,}", without_commands)
    ):
        return "expression"
    return "string" if len(value.split()) <= MAX_STRING_WORDS else None


def gives_answer_away(task: GeneratedTask) -> bool:
    """A free-form numeric answer written out in the question itself ("The answer is the number
    11?" → 11): small models learn this fast, since the reasoner then copies it (p̂ > 0)."""
    if task.answer_type not in ("integer", "expression"):
        return False
    answer = re.escape(task.answer)
    return re.search(rf"(?<![\w.]){answer}(?![\w]|\.\d)", task.question) is not None


def is_self_contained(text: str) -> bool:
    return _NOT_SELF_CONTAINED.search(text) is None and _POINTS_AT_NOTHING.search(text) is None


def parse_challenger(
    text: str, allowed: tuple[str, ...] = ("mc", "free")
) -> tuple[GeneratedTask | None, str]:
    """(task, "") for a valid question, else (None, why it is invalid).

    A reply with four options A–D is a multiple-choice question; otherwise a free-form one.
    ``allowed`` names the formats this run accepts ("mc", "free")."""
    fields = extract_fields(text)
    question, answer = fields.get("question", ""), fields.get("answer", "")
    if not question:
        return None, "no question"
    if len(question.split()) < MIN_QUESTION_WORDS:
        return None, "question too short"
    if not answer:
        return None, "no answer"
    options = {k: v for k, v in fields.get("options", {}).items() if k in LETTERS and v}
    if len(options) == len(LETTERS):
        task, reason = _multiple_choice(question, answer, options)
        kind = "mc"
    else:
        task, reason = _free_form(question, answer)
        kind = "free"
    if task is None:
        return None, reason
    if kind == "free" and "?" not in question:  # mc stems may end in ":" ("... is:")
        return None, "not a question"
    if gives_answer_away(task):
        return None, "answer given in the question"
    if kind not in allowed:
        return None, "multiple choice not allowed" if kind == "mc" else "needs four options A-D"
    if not is_self_contained(task.text()):
        return None, "not self-contained"
    return task, ""


def _multiple_choice(
    question: str, answer: str, options: dict[str, str]
) -> tuple[GeneratedTask | None, str]:
    ordered = {letter: options[letter] for letter in LETTERS}
    if len({" ".join(v.lower().split()) for v in ordered.values()}) < len(LETTERS):
        return None, "duplicate options"
    letter = option_letter(answer, ordered)
    if letter is None:
        return None, "mc answer is not an option"
    return GeneratedTask(question, letter, "mc", ordered), ""


def _free_form(question: str, answer: str) -> tuple[GeneratedTask | None, str]:
    kind = free_answer_type(answer)
    if option_letter(answer, {}) is not None and len(answer.strip()) <= 3:
        return None, "option letter without options"  # an mc answer to a question without options
    if kind is None:
        return None, f"answer longer than {MAX_STRING_WORDS} words"
    gold = answer.strip().strip("$").strip().rstrip(".,;").strip()
    if kind == "integer":
        gold = gold.replace(",", "")
    return GeneratedTask(question, gold, kind), ""


def reasoner_answer(text: str, task: GeneratedTask, lenient: bool = True) -> str | None:
    """The reasoner's answer to ``task`` (``curricula.answers.typed_answer``)."""
    return typed_answer(text, task.answer_type, lenient)


def is_correct(predicted: str | None, task: GeneratedTask, timeout_s: float = 2.0) -> bool:
    """1[â = a*] for ``task`` (``curricula.answers.typed_correct``)."""
    return typed_correct(predicted, task.answer, task.answer_type, task.options, timeout_s)
