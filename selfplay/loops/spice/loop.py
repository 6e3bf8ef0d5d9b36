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
3. The **reasoner** sees only the question: K = ``solver_samples`` samples of every valid
   question, all in one wave. Its reward is 1[â = a*]: Math-Verify equivalence for integers and
   expressions, normalised exact match for option letters and short strings.
4. The challenger's reward is r_C = f(p̂) for a valid question (``challenger_reward``:
   ``variance``, exp(−(p̂(1−p̂) − ¼)² / (2·0.01)), or the R-Zero / AZR / threshold ablations)
   and ρ for an invalid one.

Advantages are Dr. GRPO per role (docs/algorithms.md#losses), no KL: the challenger's attempts
on one document form a group, and each question's K reasoner samples form a group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from corpora.documents import load_documents, manifest_path
from curricula.curriculum import Curriculum, Group
from curricula.questions import (
    ANSWER_HINTS,
    ANSWER_TYPES,
    FREE_FORM_END,
    GeneratedTask,
    is_correct,
    parse_challenger,
    reasoner_answer,
)
from selfplay.engines.models import tokenizer_for
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.propose import Proposal, mean, proposal_metrics, proposer_reward, solve_groups
from selfplay.loops.spice.documents import contamination_guard, document_ids, document_sampler
from selfplay.loops.spice.settings import SpiceSettings
from selfplay.types import Collected, Episode

CHALLENGER, REASONER = "challenger", "reasoner"


@dataclass(kw_only=True)
class Attempt(Proposal):
    """One challenger reply on one document, and what the reasoner made of its question."""

    slot: int  # which of the step's documents
    document: int | None  # index into the corpus chunks (None: ungrounded)
    number: int  # attempt number within the slot, over all rounds
    round: int
    format: str  # "mc" | "free": what the prompt asked for
    task: GeneratedTask | None
    contaminated: bool = False

    def info(self) -> dict:
        """The challenger episode's ``info``."""
        return {"format": self.format, "round": self.round, "reason": self.reason,
                "contaminated": self.contaminated, "parsed": self.task is not None,
                "p_hat": self.p_hat}


class SpiceLoop(Loop):
    name = "spice"
    Settings = SpiceSettings
    spec = LoopSpec(
        roles={CHALLENGER: ("document", "format"), REASONER: ("question", "answer_hint")},
        tasks="documents",  # the corpus chunks, one curriculum task each
        reasoner=REASONER, reasoner_fields={"answer_hint": "the final answer"},
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SpiceSettings = self.settings
        self.reward = proposer_reward(s.challenger_reward, s.solver_samples)
        self.documents = (load_documents(s.corpus, s.corpus_cache, tokenizer_for)
                          if s.grounded else [])
        # the documents are the curriculum's task space: one task per chunk, family = its source
        self.curriculum = Curriculum(document_sampler(s, config.curriculum), seed=config.seed)
        self.curriculum.buffer.add_many(
            document_ids(self.documents),
            [d.source for d in self.documents],
            [math.nan] * len(self.documents),
        )
        self.guard = contamination_guard(
            s.contamination, [t.entry["question"] for t in self.held_out]
        )
        self._document_text: dict[int, str] = {}

    def inputs(self) -> dict[str, Path]:
        """The manifest of the corpus read (which documents, chunked and embedded how)."""
        s = self.settings
        return {"corpus/manifest.json": manifest_path(s.corpus, s.corpus_cache)} if s.grounded \
            else {}

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

    async def attempt(self, policy: BatchingPolicy, step, slot, document, number, round_
                      ) -> Attempt:
        """One challenger reply on ``document``, parsed into a question (or why it is not one)."""
        fields = {
            "document": self.document_text(document, policy.tokenizer),
            "format": self.attempt_format(slot, number),
        }
        # a free-form reply is complete at the closing `"}` of its JSON (an mc reply has a `"}`
        # after its options, before the answer)
        stop = (FREE_FORM_END,) if fields["format"] == "free" else ()
        request = self.request(CHALLENGER, stop=stop, **fields)
        completion = await policy(request)
        task, reason = parse_challenger(completion.reply, self.allowed_formats())
        return Attempt(
            task_id=f"s{step}-d{slot}-q{number}", turn=self.turn(request, completion, policy),
            question=task.text() if task else None, reason=reason,
            answer=task.answer if task else None, slot=slot, document=document, number=number,
            round=round_, format=fields["format"], task=task,
        )

    def screen(self, attempts: list[Attempt]) -> None:
        """Drop valid questions that nearly copy an evaluation item (counted per attempt)."""
        valid = [a for a in attempts if a.valid]
        if self.guard is None or not valid:
            return
        for attempt, copied in zip(valid, self.guard.check([a.question for a in valid]),
                                   strict=True):
            if copied:
                attempt.contaminated, attempt.reason = True, "near-duplicate of an evaluation item"

    # ------------------------------------------------------------------ the reasoner
    async def solve(self, policy: BatchingPolicy, attempt: Attempt) -> Episode:
        """One reasoner answer to the attempt's question, rewarded 1[â = a*]."""
        task = attempt.task
        request = self.request(REASONER, question=task.text(),
                               answer_hint=ANSWER_HINTS[task.answer_type])
        completion = await policy(request)
        answer = reasoner_answer(completion.reply, task, self.settings.lenient)
        correct = is_correct(answer, task, self.settings.verify_timeout_s)
        return Episode(
            loop=self.name, env=f"{REASONER}/{task.answer_type}",
            turns=[self.turn(request, completion, policy)], rewards={REASONER: float(correct)},
            group_id=attempt.task_id,  # the K samples of a question
            info={"answer": answer, "gold": task.answer}, correct=correct,
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
                self.attempt(policy, step, slot, documents[slot], round_ * per_round + i, round_)
                for slot in pending
                for i in range(per_round)
            )
            self.screen(wave)
            attempts += wave
            done = {a.slot for a in wave if a.valid}
            pending = [slot for slot in pending if slot not in done]
        valid = [a for a in attempts if a.valid]
        groups = await solve_groups(policy, valid, s.solver_samples,
                                    lambda a: self.solve(policy, a))
        for attempt, group in zip(valid, groups, strict=True):
            attempt.answers = [e.info["answer"] for e in group]
            attempt.scores = [float(e.correct) for e in group]
        for attempt in attempts:  # f(p̂) for a valid question, ρ for an invalid or dropped one
            attempt.reward = (float(self.reward(attempt.p_hat)) if attempt.valid
                              else s.invalid_reward)
        self.record_documents(valid, step)
        answers = [e for group in groups for e in group]
        return Collected(
            [self.challenger_episode(step, a) for a in attempts] + answers,
            self.curriculum.metrics(step) | self.metrics(attempts, answers),
            [a.row(step, self.name, CHALLENGER, answer_type=a.task.answer_type if a.task else None,
                   document=None if a.document is None else self.documents[a.document].id)
             for a in attempts],
        )

    def record_documents(self, valid: list[Attempt], step: int) -> None:
        """One curriculum group per valid question: its K reasoner samples on its document, so
        a document's p̂ is the reasoners' pass rate on the questions written from it."""
        self.curriculum.report([
            Group(task=a.document, successes=sum(a.scores), attempts=len(a.scores),
                  rewards=list(a.scores))
            for a in valid if a.document is not None and a.scores
        ], step)

    def challenger_episode(self, step: int, attempt: Attempt) -> Episode:
        return Episode(
            loop=self.name, env=CHALLENGER, turns=[attempt.turn],
            rewards={CHALLENGER: attempt.reward},
            group_id=f"s{step}-d{attempt.slot}",  # the attempts on one document
            info=attempt.info(),
        )

    def metrics(self, attempts: list[Attempt], answers: list[Episode]) -> dict[str, float]:
        """The shared figures of the challenger's questions, and SPICE's: parse and
        contamination counts, the answer-type mix; the reasoner's accuracy on them."""
        valid = [a for a in attempts if a.valid]
        metrics = proposal_metrics("spice/challenger", attempts) | {
            "spice/challenger/parse_rate": mean(a.task is not None for a in attempts),
            "spice/challenger/contamination_drops": float(sum(a.contaminated for a in attempts)),
            "spice/challenger/not_self_contained": float(
                sum(a.reason == "not self-contained" for a in attempts)),
            "spice/challenger/valid_reward": mean(a.reward for a in valid),
        } | {f"spice/challenger/type/{kind}": mean(a.task.answer_type == kind for a in valid)
             for kind in ANSWER_TYPES}
        if answers:
            metrics["spice/reasoner/accuracy"] = mean(e.correct for e in answers)
            metrics["spice/reasoner/answered_rate"] = mean(
                e.info["answer"] is not None for e in answers)
        return metrics
