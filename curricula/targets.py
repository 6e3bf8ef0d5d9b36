"""Target answers a proposer writes questions for (SSP): a JSONL file of answers, or short spans
mined from a corpus's chunks (numbers and capitalised names, the kind of answer a search can
find and an exact match can check)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from curricula.answers import normalise_text
from selfplay.core.errors import UserError
from selfplay.core.jsonl import read_rows

# a number (3.12, 1991, 0x10 not: digits only), or one to three capitalised words; a sentence's
# first word is skipped (capitalised because it starts the sentence, not because it is a name)
_NUMBER = re.compile(r"(?<![\w.])\d{1,4}(?:\.\d+)?(?![\w.]*\w)")
_NAME = re.compile(r"(?<![\w.])[A-Z][a-z]{2,}(?: [A-Z][a-z]{2,}){0,2}(?![\w(])")
_SENTENCE_START = re.compile(r"(?:^|[.!?:]\s+|\n\s*)$")
_COMMON_WORDS = (  # words that start sentences or headings, not names
    "The This That These Those There Then When Where What Which While With For From Each If "
    "It Its In On An And Or But Not No Note See Also Changed New Added Deprecated Version Example "
    "Examples Otherwise However Since Only Some All Any Both One Two Three"
)
_COMMON = frozenset(_COMMON_WORDS.split())


@dataclass(frozen=True)
class Target:
    """An answer to write a question for, and the chunk it was mined from (None: from a file)."""

    answer: str
    chunk_id: str | None = None


def mine_targets(chunks, limit: int) -> list[Target]:
    """Up to ``limit`` distinct spans from the chunks' text, in corpus order."""
    found: list[Target] = []
    seen: set[str] = set()
    for chunk in chunks:
        for answer in spans(chunk.text):
            key = normalise_text(answer)
            if key and key not in seen:
                seen.add(key)
                found.append(Target(answer, chunk.id))
                if len(found) >= limit:
                    return found
    return found


def spans(text: str) -> list[str]:
    """Numbers of ≥ 2 digits and capitalised names not at a sentence's start, in text order."""
    hits = [(m.start(), m.group()) for m in _NUMBER.finditer(text) if len(m.group()) >= 2]
    for m in _NAME.finditer(text):
        words = m.group().split()
        if words[0] in _COMMON or _SENTENCE_START.search(text[: m.start()]):
            continue
        hits.append((m.start(), m.group()))
    return [span for _, span in sorted(hits)]


def read_targets(path: str) -> list[Target]:
    """The ``answer`` of every row of a JSONL file (a row without one is a one-line error)."""
    targets = []
    for number, row in read_rows(path, what="ssp.targets file"):
        answer = str(row.get("answer", "")).strip()
        if not answer:
            raise UserError(f"{path}:{number}: a target row needs a non-empty `answer` field")
        targets.append(Target(answer))
    if not targets:
        raise UserError(f"{path}: no targets (one JSON object with an `answer` per line)")
    return targets
