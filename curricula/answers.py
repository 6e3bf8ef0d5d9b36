"""Answer extraction and verification shared by every loop that grades text answers.

Parsing is *lenient but honest*: the model's answer is the content of its last ``\\boxed{...}``;
with ``lenient=True`` and no box, the last number it wrote counts as its answer (small models
rarely box). Nothing else is guessed: a response without either has no answer.
"""

from __future__ import annotations

import atexit
import json
import re
import select
import subprocess
import sys
import threading
from collections import OrderedDict
from pathlib import Path

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:/\d+)?")


DEFAULT_VERIFY_TIMEOUT_S = 5.0
_WORKER_START_TIMEOUT_S = 120.0  # importing sympy in a fresh process, on a busy machine
_WORKER = Path(__file__).with_name("_verify_worker.py")


class MathVerifier:
    """Math-Verify equivalence with a per-call deadline that works from any thread.

    One persistent worker process (``curricula/_verify_worker.py``, started as a script, so it
    never re-imports the parent's program) does the checking; calls are serialised by a lock
    and cached. When a call misses its deadline the worker is killed (sympy can loop for minutes
    on a tower of exponents) and a new one starts on the next call.
    """

    def __init__(self, cache_size: int = 65536) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._cache_size = cache_size
        self.timeouts = 0  # calls that missed their deadline (a health figure)

    def equal(self, predicted: str, gold: str, timeout_s: float) -> bool:
        key = (predicted, gold)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            process = self._ensure_started()
            process.stdin.write(json.dumps([gold, predicted]) + "\n")
            process.stdin.flush()
            reply = _read_line(process, timeout_s)
            if reply is None:
                self.timeouts += 1
                self._stop()
            result = reply == "true"
            self._cache[key] = result
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return result

    def _ensure_started(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        process = subprocess.Popen(
            [sys.executable, str(_WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        if _read_line(process, _WORKER_START_TIMEOUT_S) != "ready":
            process.kill()
            raise RuntimeError("the math-verify worker process did not start")
        self._process = process
        return process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(5)
            for stream in (process.stdin, process.stdout):
                stream.close()

    def close(self) -> None:
        with self._lock:
            self._stop()


def _read_line(process: subprocess.Popen, timeout_s: float) -> str | None:
    """The worker's next line, or None when none arrives within ``timeout_s`` (or it died).

    Request and reply alternate strictly, so the reader's buffer never holds a line ahead and
    ``select`` on the pipe tells the truth."""
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    if not ready:
        return None
    line = process.stdout.readline()
    return line.strip() or None


VERIFIER = MathVerifier()
atexit.register(VERIFIER.close)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces allowed), or None."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start : i - 1].strip()
    return None


def extract_answer(text: str, lenient: bool = False) -> tuple[str | None, bool]:
    """(answer, was_boxed). Lenient mode falls back to the last number in the text."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed, True
    if lenient:
        numbers = _NUMBER.findall(text)
        if numbers:
            return numbers[-1].replace(",", ""), False
    return None, False


def _normalised(text: str) -> str:
    return " ".join(str(text).split()).lower()


def answers_equal(
    predicted: str | None, gold: str, timeout_s: float = DEFAULT_VERIFY_TIMEOUT_S
) -> bool:
    """Exact match after normalising whitespace, else Math-Verify equivalence within
    ``timeout_s`` seconds (a verification that runs longer counts as *not equal*).

    Safe on any thread: Math-Verify's own timeouts use ``signal.alarm``, which only works on the
    main thread, and async rollouts grade on a producer thread. So the check runs in a small
    persistent worker process with those timeouts off, and the caller waits with a deadline
    (``MathVerifier``); a worker stuck in sympy is killed and replaced.
    """
    if predicted is None:
        return False
    if _normalised(predicted) == _normalised(gold):
        return True
    return VERIFIER.equal(str(predicted), str(gold), timeout_s)


def grade_answer(text: str, entry: dict, dataset, lenient: bool = False) -> dict:
    """Grade a response to a reasoning-gym entry: its verifier first, then Math-Verify.

    Returns answer, boxed, score (the verifier's, in [0, 1]) and correct (score 1).
    """
    answer, boxed = extract_answer(text, lenient=lenient)
    score = score_extracted(answer, entry, dataset)
    return {"answer": answer, "boxed": boxed, "score": score, "correct": score >= 1.0}


# a reference that is one number (or a number with a decimal part): its value is the answer
_PLAIN_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?\s*$")


def score_extracted(answer: str | None, entry: dict, dataset) -> float:
    """The verifier's score of an extracted answer, raised to 1 where Math-Verify finds it
    equal to a reference that is a plain number ("4.0" for "4"). Not for a reference whose form
    is the answer: Math-Verify evaluates "3 × 11" and "6/8" to values, so "33" would pass for
    the prime factorization "3 × 11" and "6/8" for the simplified "3/4"; the verifier judges
    those (it gives them partial credit, which is not correct)."""
    if answer is None:
        return 0.0
    try:
        score = float(dataset.score_answer(answer, entry))
    except Exception:  # a verifier that chokes on odd model output scores it 0
        score = 0.0
    reference = str(entry["answer"])
    if score < 1.0 and _PLAIN_NUMBER.match(reference) and answers_equal(answer, reference):
        score = 1.0
    return score


# ---------------------------------------------------------------------- typed answers
# Questions with a declared answer type (SPICE's: a letter of options A-D, an integer, an
# expression, or a string of at most three words) are graded by type, not by a verifier.
LETTERS = ("A", "B", "C", "D")
MAX_STRING_WORDS = 3
_LETTER = re.compile(r"^\s*(?:option\s+)?\(?([A-Da-d])\)?(?=[\s\).:,]|$)")
_TYPED_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_STATED = re.compile(r"answer\s*(?:is|:)\s*[:\s]*(.+?)\s*(?:[.\n]|$)", re.IGNORECASE)


def option_letter(answer: str, options: dict[str, str]) -> str | None:
    """ "B", "(b)", "B) Paris", "option B" → "B"; an option's own text → its letter."""
    match = _LETTER.match(answer)
    if match:
        return match.group(1).upper()
    wanted = normalise_text(answer)
    for letter, text in options.items():
        if wanted and normalise_text(text) == wanted:
            return letter
    return None


def normalise_text(text: str) -> str:
    """Lower case, no punctuation or articles, single spaces (exact match of short strings)."""
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", str(text)).lower()
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(word for word in text.split() if word not in ("a", "an", "the"))


def typed_answer(text: str, answer_type: str, lenient: bool = True) -> str | None:
    """The answer in a reply to a typed question: its last ``\\boxed{}``; leniently, "answer is
    X", the last option letter (mc), the last number (integer / expression) or a reply of ≤ 3
    words (string)."""
    boxed = last_boxed(text)
    if boxed is not None or not lenient:
        return boxed
    _, opened, tail = text.rpartition("\\boxed{")
    if opened and tail.strip():  # a box the reply opened (or its prefill did) but never closed
        return tail.strip().splitlines()[0].strip()
    stated = _STATED.findall(text)
    if stated:
        return stated[-1]
    if answer_type == "mc":
        letters = re.findall(r"\b([A-D])\b", text)
        return letters[-1] if letters else None
    if answer_type in ("integer", "expression"):
        numbers = _TYPED_NUMBER.findall(text)
        return numbers[-1] if numbers else None
    short = text.strip()
    return short if short and len(short.split()) <= MAX_STRING_WORDS else None


def typed_correct(
    predicted: str | None,
    gold: str,
    answer_type: str,
    options: dict[str, str] | None = None,
    timeout_s: float = 2.0,
) -> bool:
    """1[â = a*]: option letters and short strings by normalised exact match, integers and
    expressions by Math-Verify equivalence (within ``timeout_s``)."""
    if predicted is None:
        return False
    if answer_type == "mc":
        return option_letter(predicted, options or {}) == gold
    if answer_type == "string":
        return normalise_text(predicted) == normalise_text(gold)
    return answers_equal(predicted.replace(",", ""), gold, timeout_s=timeout_s)
