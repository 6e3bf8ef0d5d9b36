"""SPICE (Liu et al. 2025, arXiv:2510.24684; docs/algorithms.md#spice): a challenger grounded in
corpus documents against a reasoner without them.

One policy plays two roles with shared weights. Each step:

1. The document sampler picks ``documents_per_step`` corpus chunks (none when ungrounded).
2. The **challenger** reads a chunk and writes a question with its gold answer, multiple choice
   (A–D) or free form (integer / expression / string of ≤ 3 words), ``attempts_per_document``
   times. All attempts of the step go to the engine as one wave; documents still without a valid
   question get another round (up to ``max_rounds``). A question is valid when it parses, is
   self-contained (no "according to the text") and is not a near-copy of an evaluation item
   (the contamination guard); ``curricula/questions.py`` holds the format.
3. The **reasoner** sees only the question: K samples of every valid question, all in one wave.
   Its reward is 1[â = a*]: Math-Verify equivalence for integers and expressions, normalised
   exact match for option letters and short strings.
4. The challenger's reward is r_C = f(p̂) for a valid question (``variance``:
   exp(−(p̂(1−p̂) − ¼)² / (2·0.01)), or the R-Zero / AZR / threshold ablations) and ρ for an
   invalid one.

Advantages are Dr. GRPO per role (docs/algorithms.md#losses), no KL: the challenger's attempts
on one document form a group, and each question's K reasoner samples form a group.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field

from curricula.curriculum import Curriculum, Group
from curricula.questions import (
    ANSWER_HINTS,
    FREE_FORM_END,
    is_correct,
    parse_challenger,
    reasoner_answer,
)
from curricula.rewards import resolve_reward
from selfplay.config import InputFile, Strict
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop, LoopSettings, LoopSpec
from selfplay.loops.reasoning import TaskSpec, build_tasks, reasoning_accuracy
from selfplay.loops.spice.documents import (
    contamination_guard,
    corpus_manifest,
    document_ids,
    document_sampler,
    load_documents,
)
from selfplay.loops.spice.records import Attempt, step_metrics
from selfplay.types import Collected, Episode

CHALLENGER, REASONER = "challenger", "reasoner"


class ContaminationSettings(Strict):
    """Generated questions that nearly copy an evaluation item are dropped (and counted).

    The items are the held-out reasoning-gym questions of ``spice.eval_reasoning`` plus the
    ``question`` field of every row of the JSONL files in ``eval_files``."""

    enabled: bool = True
    threshold: float = Field(0.9, gt=0, le=1)  # cosine similarity (MiniLM) that counts as a copy
    eval_files: list[InputFile] = []  # local JSONL files of {"question": ..., "answer": ...} rows


class SpiceSettings(LoopSettings):
    corpus: str | None = None  # None: corpora.DEFAULT_CORPUS (built on first use)
    corpus_cache: str | None = None  # None: the corpora package's cache folder
    grounded: bool = True  # false: no document in the challenger's prompt ("no corpus" ablation)
    chunk_max_tokens: int = Field(5992, ge=16)  # the chunk is cut to this many tokens in the prompt
    documents_per_step: int = Field(4, ge=1)
    attempts_per_document: int = Field(4, ge=1)  # challenger samples per document per round
    max_rounds: int = Field(1, ge=1)  # more rounds only for documents still without a valid one
    formats: Literal["mc", "free", "both"] = "both"  # "both": attempts alternate mc / free-form
    reasoner_samples: int = Field(8, ge=2)  # K = G
    invalid_reward: float = -0.1  # ρ; negative ρ has caused collapse elsewhere (docs/spice.md)
    challenger_reward: str = "variance"  # variance | uncertainty | learnability | threshold | m:f
    # documents are drawn by `curriculum.sampler`; near_half = an alias of its `learnability`
    sampler: Literal["uniform", "near_half"] = "uniform"
    challenger_max_tokens: int | None = Field(None, ge=8)  # None: sampling.max_new_tokens
    reasoner_max_tokens: int | None = Field(None, ge=1)
    lenient: bool = True  # reasoner answers without \boxed{}: the last number / option letter
    verify_timeout_s: float = Field(2.0, gt=0)  # math-verify per comparison
    contamination: ContaminationSettings = ContaminationSettings()
    eval_reasoning: list[TaskSpec] = []  # held-out reasoning-gym families (greedy accuracy)
    eval_reasoning_size: int = Field(32, ge=0)


class SpiceLoop(Loop):
    name = "spice"
    Settings = SpiceSettings
    spec = LoopSpec(
        roles={CHALLENGER: ("document", "format"), REASONER: ("question", "answer_hint")},
        tasks="documents",  # the corpus chunks, one curriculum task each
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SpiceSettings = self.settings
        self.reward_function = resolve_reward(s.challenger_reward)
        self.documents = load_documents(s)
        # the documents are the curriculum's task space: one task per chunk, family = its source
        self.curriculum = Curriculum(document_sampler(s, config.curriculum), seed=config.seed)
        self.curriculum.buffer.add_many(
            document_ids(self.documents),
            [d.source for d in self.documents],
            [math.nan] * len(self.documents),
        )
        self.eval_tasks = build_tasks(s.eval_reasoning, s.eval_reasoning_size, config.seed + 20_000)
        self.guard = contamination_guard(
            s.contamination, [t.entry["question"] for t in self.eval_tasks]
        )
        self._document_text: dict[int, str] = {}

    def inputs(self) -> dict[str, Path]:
        """The manifest of the corpus read (which documents, chunked and embedded how)."""
        manifest = corpus_manifest(self.settings)
        return {"corpus/manifest.json": manifest} if manifest is not None else {}

    # ------------------------------------------------------------------ the challenger
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

    def attempt_format(self, slot: int, number: int) -> str:
        formats = self.settings.formats
        if formats != "both":
            return formats
        return ("mc", "free")[(slot + number) % 2]

    def allowed_formats(self) -> tuple[str, ...]:
        formats = self.settings.formats
        return ("mc", "free") if formats == "both" else (formats,)

    def challenger_reward(self, attempt: Attempt) -> float:
        """f(p̂) for a valid question, ρ (``invalid_reward``) for an invalid or dropped one."""
        if not attempt.valid or attempt.p_hat is None:
            return self.settings.invalid_reward
        return float(self.reward_function(attempt.p_hat))

    async def attempt(self, policy: BatchingPolicy, slot, document, number, round_) -> Attempt:
        """One challenger reply on ``document``, parsed into a question (or why it is not one)."""
        fields = {
            "document": self.document_text(document, policy.tokenizer),
            "format": self.attempt_format(slot, number),
        }
        # a free-form reply is complete at the closing `"}` of its JSON (an mc reply has a `"}`
        # after its options, before the answer)
        stop = (FREE_FORM_END,) if fields["format"] == "free" else ()
        request = self.request(
            CHALLENGER, stop=stop, max_new_tokens=self.settings.challenger_max_tokens, **fields
        )
        completion = await policy(request)
        task, reason = parse_challenger(completion.reply, self.allowed_formats())
        turn = self.turn(request, completion, policy)
        return Attempt(
            slot, document, number, round_, fields["format"], turn, completion.reply, task, reason
        )

    def screen(self, attempts: list[Attempt]) -> None:
        """Drop valid questions that nearly copy an evaluation item (counted per attempt)."""
        valid = [a for a in attempts if a.valid]
        if self.guard is None or not valid:
            return
        for attempt, copied in zip(
            valid, self.guard.check([a.task.text() for a in valid]), strict=True
        ):
            if copied:
                attempt.contaminated, attempt.reason = True, "near-duplicate of an evaluation item"

    # ------------------------------------------------------------------ the reasoner
    async def solve(self, policy: BatchingPolicy, attempt: Attempt) -> Episode:
        """One reasoner answer to the attempt's question, rewarded 1[â = a*]."""
        task = attempt.task
        request = self.request(
            REASONER,
            max_new_tokens=self.settings.reasoner_max_tokens,
            question=task.text(),
            answer_hint=ANSWER_HINTS[task.answer_type],
        )
        completion = await policy(request)
        answer = reasoner_answer(completion.reply, task, self.settings.lenient)
        correct = is_correct(answer, task, self.settings.verify_timeout_s)
        return Episode(
            loop=self.name,
            env=f"{REASONER}/{task.answer_type}",
            turns=[self.turn(request, completion, policy)],
            rewards={REASONER: float(correct)},
            group_id="",  # the question's group, set by the caller
            info={"answer": answer, "gold": task.answer, "correct": correct},
        )

    # ------------------------------------------------------------------ one step
    def choose_documents(self, step: int) -> list[int | None]:
        """``documents_per_step`` chunks drawn by the curriculum, distinct while there are
        enough (then the rest with replacement)."""
        count = self.settings.documents_per_step
        if not self.settings.grounded:
            return [None] * count
        chosen = self.curriculum.draw(min(count, len(self.documents)), step).tolist()
        if count > len(chosen):
            chosen += self.curriculum.draw(count - len(chosen), step, replace=True).tolist()
        return [int(d) for d in chosen]

    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        documents = self.choose_documents(step)
        attempts: list[Attempt] = []
        pending, per_round = list(range(len(documents))), s.attempts_per_document
        for round_ in range(s.max_rounds):
            if not pending:
                break
            wave = await policy.gather(  # every attempt of the round: one engine wave
                self.attempt(policy, slot, documents[slot], round_ * per_round + i, round_)
                for slot in pending
                for i in range(per_round)
            )
            self.screen(wave)
            attempts += wave
            done = {a.slot for a in wave if a.valid}
            pending = [slot for slot in pending if slot not in done]
        valid = [a for a in attempts if a.valid]
        answers = await policy.gather(  # every reasoner sample of the step: one engine wave
            self.solve(policy, attempt) for attempt in valid for _ in range(s.reasoner_samples)
        )
        for index, attempt in enumerate(valid):
            group = answers[index * s.reasoner_samples : (index + 1) * s.reasoner_samples]
            for episode in group:
                episode.group_id = question_group(step, attempt)  # the K samples of a question
            attempt.answers = [e.info["answer"] for e in group]
            attempt.correct = [e.info["correct"] for e in group]
        for attempt in attempts:
            attempt.reward = self.challenger_reward(attempt)
        self.record_documents(attempts, step)
        return Collected(
            [self.challenger_episode(step, a) for a in attempts] + answers,
            self.curriculum.metrics(step) | step_metrics(attempts, answers),
            [a.row(step, question_group(step, a), self.document_id(a)) for a in attempts],
        )

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
        self.curriculum.report(groups, step)

    def document_id(self, attempt: Attempt) -> str | None:
        return None if attempt.document is None else self.documents[attempt.document].id

    def challenger_episode(self, step: int, attempt: Attempt) -> Episode:
        return Episode(
            loop=self.name,
            env=CHALLENGER,
            turns=[attempt.turn],
            rewards={CHALLENGER: attempt.reward},
            group_id=f"s{step}-d{attempt.slot}",  # the attempts on one document
            info=attempt.info(),
        )

    # ------------------------------------------------------------------ evaluation
    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy accuracy of the reasoner on held-out reasoning-gym tasks, per family."""
        if not self.eval_tasks:
            return {}
        return await reasoning_accuracy(
            policy,
            self.eval_tasks,
            lambda entry: self.request(
                REASONER,
                greedy=True,
                max_new_tokens=self.settings.reasoner_max_tokens,
                question=entry["question"],
                answer_hint="the final answer",
            ),
        )


def question_group(step: int, attempt: Attempt) -> str:
    return f"s{step}-d{attempt.slot}-q{attempt.number}"
