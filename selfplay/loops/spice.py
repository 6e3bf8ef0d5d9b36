"""SPICE: a challenger grounded in corpus documents against a reasoner without them (REFERENCE §4).

One policy plays two roles with shared weights. Each step:

1. The document sampler picks ``documents_per_step`` corpus chunks (none when ungrounded).
2. The **challenger** reads a chunk and writes a question with its gold answer, multiple choice
   (A–D) or free form (integer / expression / string of ≤ 3 words), ``attempts_per_document``
   times. All attempts of the step go to the engine as one wave; documents still without a valid
   question get another round (up to ``max_rounds``). A question is valid when it parses, is
   self-contained (no "according to the text") and is not a near-copy of an evaluation item
   (the contamination guard).
3. The **reasoner** sees only the question: K samples of every valid question, all in one wave.
   Its reward is 1[â = a*]: Math-Verify equivalence for integers and expressions, normalised
   exact match for option letters and short strings.
4. The challenger's reward is r_C = f(p̂) for a valid question (``variance``:
   exp(−(p̂(1−p̂) − ¼)² / (2·0.01)), or the R-Zero / AZR / threshold ablations) and ρ for an
   invalid one.

Advantages are Dr. GRPO per role (REFERENCE §1), no KL: the challenger's attempts on one
document form a group, and each question's K reasoner samples form a group.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from curricula.answers import answers_equal, grade_answer, last_boxed
from curricula.rewards import resolve_reward
from curricula.samplers import Curriculum, Group
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop
from selfplay.loops.rlvr import build_tasks
from selfplay.types import Episode, Request

CHALLENGER, REASONER = "challenger", "reasoner"
ANSWER_TYPES = ("mc", "integer", "expression", "string")
LETTERS = ("A", "B", "C", "D")
MAX_STRING_WORDS = 3
MIN_QUESTION_WORDS = 3
FREE_FORM_END = '"}'
ANSWER_HINTS = {
    "mc": "the letter of the correct option (A, B, C or D)",
    "integer": "an integer",
    "expression": "a number or a math expression",
    "string": "at most three words",
}

# ---------------------------------------------------------------------- the challenger's reply


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
_LETTER = re.compile(r"^\s*(?:option\s+)?\(?([A-Da-d])\)?(?=[\s\).:,]|$)")
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
    return _NOT_SELF_CONTAINED.search(text) is None


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


# ---------------------------------------------------------------------- the reasoner's answer
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")
_STATED = re.compile(r"answer\s*(?:is|:)\s*[:\s]*(.+?)\s*(?:[.\n]|$)", re.IGNORECASE)


def reasoner_answer(text: str, task: GeneratedTask, lenient: bool = True) -> str | None:
    """The reasoner's answer: its last ``\\boxed{}``; leniently, "answer is X", the last option
    letter (mc), the last number (integer / expression) or a reply of ≤ 3 words (string)."""
    boxed = last_boxed(text)
    if boxed is not None or not lenient:
        return boxed
    _, opened, tail = text.rpartition("\\boxed{")
    if opened and tail.strip():  # a box the reply opened (or its prefill did) but never closed
        return tail.strip().splitlines()[0].strip()
    stated = _STATED.findall(text)
    if stated:
        return stated[-1]
    if task.answer_type == "mc":
        letters = re.findall(r"\b([A-D])\b", text)
        return letters[-1] if letters else None
    if task.answer_type in ("integer", "expression"):
        numbers = _NUMBER.findall(text)
        return numbers[-1] if numbers else None
    short = text.strip()
    return short if short and len(short.split()) <= MAX_STRING_WORDS else None


def is_correct(predicted: str | None, task: GeneratedTask, timeout_s: float = 2.0) -> bool:
    """1[â = a*]: option letters and short strings by normalised exact match, integers and
    expressions by Math-Verify equivalence (within ``timeout_s``)."""
    if predicted is None:
        return False
    if task.answer_type == "mc":
        return option_letter(predicted, task.options) == task.answer
    if task.answer_type == "string":
        return normalise_text(predicted) == normalise_text(task.answer)
    return answers_equal(predicted.replace(",", ""), task.answer, timeout_s=timeout_s)


# ---------------------------------------------------------------------- document choice
def document_sampler(settings, curriculum_settings):
    """The curriculum settings that choose documents: ``curriculum.sampler``, or ``learnability``
    when the legacy ``spice.sampler: near_half`` asks for documents whose questions land near
    p̂ = ½ (p̂(1 − p̂) is largest there; docs/spice.md)."""
    if settings.sampler != "near_half":
        return curriculum_settings
    if curriculum_settings.sampler not in ("uniform", "learnability"):
        raise UserError(
            f"spice.sampler: near_half is an alias of curriculum.sampler: learnability; "
            f"it conflicts with curriculum.sampler: {curriculum_settings.sampler} (drop one)"
        )
    return curriculum_settings.model_copy(update={"sampler": "learnability"})


def document_ids(documents) -> list[str]:
    """Curriculum task ids: the chunk ids (a hash of the text), ``#k`` added to a repeated one
    so that task index k is always document k."""
    ids: list[str] = []
    taken: set[str] = set()
    for k, document in enumerate(documents):
        task_id = document.id if document.id not in taken else f"{document.id}#{k}"
        taken.add(task_id)
        ids.append(task_id)
    return ids


# ---------------------------------------------------------------------- documents and guard
def load_documents(settings) -> list:
    """The corpus chunks the challenger reads ([] when ungrounded)."""
    if not settings.grounded:
        return []
    from corpora import DEFAULT_CORPUS, ensure_default_corpus, load_corpus

    cache = Path(settings.corpus_cache) if settings.corpus_cache else None
    name = settings.corpus or DEFAULT_CORPUS
    corpus = ensure_default_corpus(cache) if name == DEFAULT_CORPUS else load_corpus(name, cache)
    if not corpus.chunks:
        raise UserError(f"corpus {name!r} holds no chunks")
    return list(corpus.chunks)


def read_eval_questions(path: str) -> list[str]:
    """The ``question`` of every row of a local JSONL file of evaluation items."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"spice.contamination.eval_files: {path} does not exist")
    questions = []
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or not str(row.get("question", "")).strip():
            raise UserError(f"{path}:{number}: a row needs a `question` field")
        questions.append(str(row["question"]))
    return questions


# ---------------------------------------------------------------------- one challenger attempt
@dataclass
class Attempt:
    slot: int  # which of the step's documents
    document: int | None  # index into the corpus chunks (None: ungrounded)
    number: int  # attempt number within the slot, over all rounds
    round: int
    format: str  # "mc" | "free": what the prompt asked for
    turn: object
    reply: str
    task: GeneratedTask | None
    reason: str  # why it is invalid ("" when valid)
    contaminated: bool = False
    answers: list[str | None] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    reward: float = 0.0

    @property
    def valid(self) -> bool:
        return self.task is not None and not self.contaminated

    @property
    def p_hat(self) -> float | None:
        return sum(self.correct) / len(self.correct) if self.correct else None


class SpiceLoop(Loop):
    name = "spice"
    curriculum_tasks = "documents"  # the corpus chunks, one curriculum task each

    def __init__(self, config) -> None:
        super().__init__(config)
        self.require_roles(CHALLENGER, REASONER)
        self.settings = config.spice
        self.reward_function = resolve_reward(self.settings.challenger_reward)
        self.documents = load_documents(self.settings)
        # the documents are the curriculum's task space: one task per chunk, family = its source
        self.curriculum = Curriculum(
            document_sampler(self.settings, config.curriculum), seed=config.seed
        )
        self.curriculum.buffer.add_many(
            document_ids(self.documents),
            [d.source for d in self.documents],
            [math.nan] * len(self.documents),
        )
        self._step_metrics: dict[int, dict] = {}  # step → the curriculum's state after collect
        self.eval_tasks = (
            build_tasks(
                self.settings.eval_reasoning,
                self.settings.eval_reasoning_size,
                config.seed + 20_000,
            )
            if self.settings.eval_reasoning
            else []
        )
        self.guard = self._contamination_guard()
        self._document_text: dict[int, str] = {}

    def _contamination_guard(self):
        settings = self.settings.contamination
        if not settings.enabled:
            return None
        texts = [entry["question"] for _, entry, _ in self.eval_tasks]
        for path in settings.eval_files:
            texts += read_eval_questions(path)
        if not texts:
            return None
        from corpora.contamination import ContaminationGuard

        return ContaminationGuard(texts, threshold=settings.threshold)

    # ------------------------------------------------------------------ rewards
    def challenger_reward(self, attempt: Attempt) -> float:
        """f(p̂) for a valid question, ρ (``invalid_reward``) for an invalid or dropped one."""
        if not attempt.valid or attempt.p_hat is None:
            return self.settings.invalid_reward
        return float(self.reward_function(attempt.p_hat))

    # ------------------------------------------------------------------ prompts
    def document_text(self, document: int | None, tokenizer) -> str:
        """The chunk cut to ``chunk_max_tokens`` tokens of the policy's tokenizer (cached)."""
        if document is None:
            return ""
        if document not in self._document_text:
            text = self.documents[document].text
            ids = tokenizer(text, add_special_tokens=False).input_ids
            limit = self.settings.chunk_max_tokens
            self._document_text[document] = (
                text if len(ids) <= limit else tokenizer.decode(ids[:limit])
            )
        return self._document_text[document]

    def _request(
        self, role: str, tokenizer, max_tokens: int | None, greedy=False, stop=(), **fields
    ) -> Request:
        request = self.request(role, greedy=greedy, stop=stop, tokenizer=tokenizer, **fields)
        if max_tokens is not None:
            request.sampling = dataclasses.replace(request.sampling, max_new_tokens=max_tokens)
        return request

    def attempt_format(self, slot: int, number: int) -> str:
        formats = self.settings.formats
        if formats != "both":
            return formats
        return ("mc", "free")[(slot + number) % 2]

    def allowed_formats(self) -> tuple[str, ...]:
        formats = self.settings.formats
        return ("mc", "free") if formats == "both" else (formats,)

    # ------------------------------------------------------------------ one step
    async def _attempt(self, policy, slot, document, number, round_) -> Attempt:
        tokenizer = policy.engine.tokenizer
        fields = {
            "document": self.document_text(document, tokenizer),
            "format": self.attempt_format(slot, number),
        }
        # a free-form reply is complete at the closing `"}` of its JSON (an mc reply has a `"}`
        # after its options, before the answer)
        stop = (FREE_FORM_END,) if fields["format"] == "free" else ()
        request = self._request(
            CHALLENGER, tokenizer, self.settings.challenger_max_tokens, stop=stop, **fields
        )
        completion = await policy(request)
        turn = self.turn(request, completion, policy)
        turn.prompt_text = self.prompts[CHALLENGER].render(**fields)[-1]["content"]
        reply = self.reply_text(CHALLENGER, completion.text, **fields)
        task, reason = parse_challenger(reply, self.allowed_formats())
        return Attempt(slot, document, number, round_, fields["format"], turn, reply, task, reason)

    async def _solve(self, policy, attempt: Attempt) -> tuple[object, str | None, bool]:
        task = attempt.task
        fields = {"question": task.text(), "answer_hint": ANSWER_HINTS[task.answer_type]}
        tokenizer = policy.engine.tokenizer
        request = self._request(REASONER, tokenizer, self.settings.reasoner_max_tokens, **fields)
        completion = await policy(request)
        turn = self.turn(request, completion, policy)
        turn.prompt_text = self.prompts[REASONER].render(**fields)[-1]["content"]
        reply = self.reply_text(REASONER, completion.text, **fields)
        answer = reasoner_answer(reply, task, self.settings.lenient)
        return turn, answer, is_correct(answer, task, self.settings.verify_timeout_s)

    def _screen(self, attempts: list[Attempt]) -> None:
        """Drop valid questions that nearly copy an evaluation item (counted per attempt)."""
        valid = [a for a in attempts if a.valid]
        if self.guard is None or not valid:
            return
        for attempt, copied in zip(
            valid, self.guard.check([a.task.text() for a in valid]), strict=True
        ):
            if copied:
                attempt.contaminated, attempt.reason = True, "near-duplicate of an evaluation item"

    def choose_documents(self, step: int) -> list[int | None]:
        """``documents_per_step`` chunks drawn by the curriculum, distinct while there are
        enough (then the rest with replacement)."""
        count = self.settings.documents_per_step
        if not self.settings.grounded:
            return [None] * count
        chosen = self.curriculum.sample(min(count, len(self.documents)), step).tolist()
        if count > len(chosen):
            chosen += self.curriculum.sample(count - len(chosen), step, replace=True).tolist()
        return [int(d) for d in chosen]

    def record_documents(self, attempts: list[Attempt], step: int) -> None:
        """One curriculum group per valid question: its K reasoner samples on its document, so
        a document's p̂ is the reasoners' pass rate on the questions written from it."""
        groups = [
            Group(
                task=a.document,
                successes=float(sum(a.correct)),
                attempts=len(a.correct),
                rewards=[float(ok) for ok in a.correct],
            )
            for a in attempts
            if a.valid and a.document is not None and a.correct
        ]
        self.curriculum.record(groups, step)

    async def collect(self, policy: BatchingPolicy, step: int) -> list[Episode]:
        documents = self.choose_documents(step)
        attempts: list[Attempt] = []
        pending = list(range(len(documents)))
        per_round = self.settings.attempts_per_document
        for round_ in range(self.settings.max_rounds):
            if not pending:
                break
            wave = await policy.gather(  # every attempt of the round: one engine wave
                self._attempt(policy, slot, documents[slot], round_ * per_round + i, round_)
                for slot in pending
                for i in range(per_round)
            )
            self._screen(wave)
            attempts += wave
            pending = [s for s in pending if not any(a.valid and a.slot == s for a in wave)]
        valid = [a for a in attempts if a.valid]
        samples = self.settings.reasoner_samples
        solved = await policy.gather(  # every reasoner sample of the step: one engine wave
            self._solve(policy, attempt) for attempt in valid for _ in range(samples)
        )
        episodes = []
        for index, attempt in enumerate(valid):
            results = solved[index * samples : (index + 1) * samples]
            attempt.answers = [answer for _, answer, _ in results]
            attempt.correct = [ok for _, _, ok in results]
            episodes += self._reasoner_episodes(step, attempt, results)
        for attempt in attempts:
            attempt.reward = self.challenger_reward(attempt)
        self.record_documents(attempts, step)
        self._step_metrics[step] = self.curriculum.metrics(step)
        return [self._challenger_episode(step, a) for a in attempts] + episodes

    # ------------------------------------------------------------------ episodes
    def _question_group(self, step: int, attempt: Attempt) -> str:
        return f"s{step}-d{attempt.slot}-q{attempt.number}"

    def _challenger_episode(self, step: int, attempt: Attempt) -> Episode:
        task = attempt.task
        document = None if attempt.document is None else self.documents[attempt.document].id
        row = {
            "step": step,
            "iteration": None,
            "phase": CHALLENGER,
            "loop": self.name,
            "kind": "qa",
            "task_id": self._question_group(step, attempt),
            "question": task.text() if task else attempt.reply,
            "answer": task.answer if task else None,
            "answer_type": task.answer_type if task else None,
            "valid": attempt.valid,
            "pseudo_label": None,
            "p_hat": attempt.p_hat,
            "samples": len(attempt.correct),
            "solver_answers": attempt.answers,
            "tool_calls": None,
            "reward": attempt.reward,
            "kept": attempt.valid,
            "document": document,
        }
        return Episode(
            loop=self.name,
            env=CHALLENGER,
            turns=[attempt.turn],
            rewards={CHALLENGER: attempt.reward},
            group_id=f"s{step}-d{attempt.slot}",  # the attempts on one document
            info={
                "task_row": row,
                "format": attempt.format,
                "round": attempt.round,
                "reason": attempt.reason,
                "contaminated": attempt.contaminated,
                "parsed": attempt.task is not None,
                "pass_rate": attempt.p_hat,
            },
        )

    def _reasoner_episodes(self, step: int, attempt: Attempt, results) -> list[Episode]:
        return [
            Episode(
                loop=self.name,
                env=f"{REASONER}/{attempt.task.answer_type}",
                turns=[turn],
                rewards={REASONER: float(ok)},
                group_id=self._question_group(step, attempt),  # the K samples of one question
                info={"answer": answer, "gold": attempt.task.answer, "correct": ok},
            )
            for turn, answer, ok in results
        ]

    def task_rows(self, step: int, episodes: list[Episode]) -> list[dict]:
        return [e.info["task_row"] for e in episodes if "task_row" in e.info]

    # ------------------------------------------------------------------ metrics
    def summarize(self, episodes: list[Episode]) -> dict[str, float]:
        metrics = super().summarize(episodes)
        if self._step_metrics:  # the oldest step collected (async: the next may be in flight)
            metrics |= self._step_metrics.pop(min(self._step_metrics))
        attempts = [e for e in episodes if e.env == CHALLENGER]
        rows = [e.info["task_row"] for e in attempts]
        valid = [r for r in rows if r["valid"]]
        solved = [e for e in episodes if e.env.startswith(REASONER)]
        count = max(len(rows), 1)
        metrics["challenger/attempts"] = float(len(rows))
        metrics["challenger/valid_rate"] = len(valid) / count
        metrics["challenger/parse_rate"] = sum(e.info["parsed"] for e in attempts) / count
        metrics["challenger/reward"] = sum(r["reward"] for r in rows) / count
        metrics["challenger/contamination_drops"] = float(
            sum(e.info["contaminated"] for e in attempts)
        )
        metrics["challenger/not_self_contained"] = float(
            sum(e.info["reason"] == "not self-contained" for e in attempts)
        )
        if valid:
            p_hats = [r["p_hat"] for r in valid]
            metrics["challenger/informative_share"] = sum(0 < p < 1 for p in p_hats) / len(valid)
            metrics["challenger/p_hat"] = sum(p_hats) / len(valid)
            metrics["challenger/valid_reward"] = sum(r["reward"] for r in valid) / len(valid)
        for kind in ANSWER_TYPES:
            metrics[f"challenger/type/{kind}"] = (
                sum(r["answer_type"] == kind for r in valid) / len(valid) if valid else 0.0
            )
        if solved:
            metrics["reasoner/accuracy"] = sum(e.info["correct"] for e in solved) / len(solved)
            metrics["reasoner/answered_rate"] = sum(
                e.info["answer"] is not None for e in solved
            ) / len(solved)
        return metrics

    # ------------------------------------------------------------------ evaluation
    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy accuracy of the reasoner on held-out reasoning-gym tasks, per family."""
        if not self.eval_tasks:
            return {}
        tokenizer = policy.engine.tokenizer

        async def solve(family, entry, dataset):
            fields = {"question": entry["question"], "answer_hint": "the final answer"}
            request = self._request(
                REASONER, tokenizer, self.settings.reasoner_max_tokens, greedy=True, **fields
            )
            completion = await policy(request)
            reply = self.reply_text(REASONER, completion.text, **fields)
            return family, grade_answer(reply, entry, dataset, lenient=True)["correct"]

        results = await policy.gather(solve(*task) for task in self.eval_tasks)
        metrics: dict[str, float] = {}
        for family in sorted({f for f, _ in results}):
            scores = [ok for f, ok in results if f == family]
            metrics[f"eval/reasoning/{family}"] = sum(scores) / len(scores)
        metrics["eval/reasoning/mean"] = sum(ok for _, ok in results) / len(results)
        return metrics

    # ------------------------------------------------------------------ state
