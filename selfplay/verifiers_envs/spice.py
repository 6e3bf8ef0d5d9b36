"""SPICE's grounded challenger and reasoner as a verifiers environment (Liu et al. 2025,
arXiv:2510.24684; docs/verifiers.md).

One task is one corpus chunk and its question format (``mc`` or ``free``; with ``both`` the
tasks alternate). One episode: the **challenger** reads the chunk on SPICE's prompt
(``roles/prompts/challenger.yaml``) and writes a question with its gold answer; when the
question is valid (``curricula.questions.parse_challenger``: it parses, is self-contained, does
not give its answer away), the **reasoner** answers it K times without the chunk
(``reasoner.yaml``), each answer rewarded 1[â = a*] (Math-Verify for expressions). The
challenger is rewarded f(p̂) on the reasoners' pass rate p̂ (``variance`` by default, or any
``curricula.rewards`` name), and ρ (``invalid_reward``) for an invalid question. Not carried
over from the loop: the contamination guard and the document curriculum (prime-rl samples the
tasks), and the chunk is cut by characters, not by the policy's tokens (no tokenizer here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from curricula.questions import (
    ANSWER_HINTS,
    GeneratedTask,
    is_correct,
    parse_challenger,
    reasoner_answer,
)
from curricula.rewards import resolve_reward
from roles import load_role
from selfplay.core.errors import UserError
from selfplay.core.jsonl import read_rows
from selfplay.verifiers_envs.harness import LOCAL, ReplyHarness


class SpiceTasksetConfig(vf.TasksetConfig):
    # the chunks: a JSONL file of {"text": ...} rows, else a built corpus (None: the default)
    documents_file: str | None = None
    corpus: str | None = None
    corpus_cache: str | None = None
    grounded: bool = True  # false: no chunk in the prompt ("no corpus" ablation)
    ungrounded_tasks: int = Field(64, ge=1)  # how many tasks an ungrounded taskset holds
    formats: Literal["mc", "free", "both"] = "both"
    chunk_max_chars: int = Field(24_000, ge=64)  # ~5,992 tokens, SPICE's chunk size


class SpiceData(vf.TaskData):
    info: dict  # the chunk (document: "" when ungrounded), its id and the question format


class SpiceTask(vf.Task[SpiceData, vf.State, vf.TaskConfig]):
    pass


def read_documents(config: SpiceTasksetConfig) -> list[tuple[str, str]]:
    """(id, text) of every chunk the challenger may read."""
    if not config.grounded:
        return [(f"ungrounded-{i}", "") for i in range(config.ungrounded_tasks)]
    if config.documents_file is not None:
        rows = read_rows(config.documents_file, what="taskset.documents_file:")
        documents = [(str(row.get("id", n)), str(row.get("text", ""))) for n, row in rows]
        if not all(text.strip() for _, text in documents):
            raise UserError(f"{config.documents_file}: every row needs a non-empty `text`")
        return documents
    from corpora.documents import load_documents
    from selfplay.engines.models import tokenizer_for

    chunks = load_documents(config.corpus, config.corpus_cache, tokenizer_for)
    return [(chunk.id, chunk.text) for chunk in chunks]


class SpiceTaskset(vf.Taskset[SpiceTask, SpiceTasksetConfig]):
    def load(self) -> Iterator[SpiceTask]:
        c = self.config
        documents = read_documents(c)
        if not documents:
            raise UserError("the SPICE taskset holds no documents")
        for i, (doc_id, text) in enumerate(documents):
            format_ = c.formats if c.formats != "both" else ("mc", "free")[i % 2]
            info = {"document": text[: c.chunk_max_chars], "document_id": doc_id,
                    "format": format_}
            yield SpiceTask(SpiceData(name=f"{doc_id}/{format_}", info=info), c.task)


class SpiceEnvConfig(vf.EnvConfig):
    challenger: vf.AgentConfig = vf.AgentConfig(runtime=LOCAL)
    reasoner: vf.AgentConfig = vf.AgentConfig(runtime=LOCAL)
    reasoner_samples: int = Field(8, ge=2)  # K: the reasoner's answers per question
    challenger_reward: str = "variance"  # variance | uncertainty | learnability | threshold | m:f
    invalid_reward: float = -0.1  # ρ
    lenient: bool = True  # reasoner answers without \boxed{}: the last number / option letter
    verify_timeout_s: float = Field(2.0, gt=0)


def role_task(role: str, **fields) -> vf.Task:
    """A single-turn task on one of SPICE's role prompts."""
    messages = load_role(role).render(**fields)
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    return vf.Task(vf.TaskData(prompt=messages[-1]["content"], system_prompt=system))


def parse_question(reply: str, format_: str) -> tuple[GeneratedTask | None, str]:
    """The challenger's question. Our engine starts the reply with the role's prefill
    (``{"question": "``); a chat model is not prefilled, so a reply that opens on the stem
    itself gets the prefill put back before it is parsed."""
    if '"question"' not in reply:
        reply = load_role("challenger").render_prefill() + reply
    return parse_challenger(reply, (format_,))


class SpiceEnv(vf.Env[SpiceEnvConfig]):
    def __init__(self, config: SpiceEnvConfig) -> None:
        super().__init__(config)
        self.reward_function = resolve_reward(config.challenger_reward)  # unknown: one line

    async def run(self, task, agents):
        info = task.data.info
        challenge = await agents.challenger.run(
            role_task("challenger", document=info["document"], format=info["format"])
        )
        question, reason = parse_question(challenge.last_reply, info["format"])
        challenge.record_metric("valid_question", float(question is not None))
        if question is None:
            challenge.info["invalid_reason"] = reason
            challenge.record_reward("spice_reward", self.config.invalid_reward)
            return
        challenge.info["question"] = {"text": question.text(), "answer": question.answer,
                                      "type": question.answer_type}
        answers = await asyncio.gather(*(
            agents.reasoner.run(role_task(
                "reasoner", question=question.text(),
                answer_hint=ANSWER_HINTS[question.answer_type],
            ))
            for _ in range(self.config.reasoner_samples)
        ))
        correct = [self.score(trace, question) for trace in answers]
        p_hat = sum(correct) / len(correct)
        challenge.record_metric("p_hat", p_hat)
        challenge.record_reward("spice_reward", float(self.reward_function(p_hat)))

    def score(self, trace: vf.Trace, question: GeneratedTask) -> bool:
        """1[â = a*] on the reasoner's trace; its answer kept beside it."""
        answer = reasoner_answer(trace.last_reply, question, self.config.lenient)
        correct = is_correct(answer, question, self.config.verify_timeout_s)
        trace.info["answer"] = answer
        trace.record_reward("spice_reward", float(correct))
        return correct


class SpiceHarness(ReplyHarness):
    """The in-process one-reply harness, exported so that it is the taskset's default."""


__all__ = ["SpiceEnv", "SpiceEnvConfig", "SpiceHarness", "SpiceTaskset", "SpiceTasksetConfig"]
