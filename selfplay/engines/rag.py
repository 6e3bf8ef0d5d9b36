"""The retrieval-augmented (RAG) check of a question (SSP's, docs/ssp.md): can it be answered
from the documents its proposer retrieved? A judge answers it from those documents plus
``noisy`` documents others retrieved, shuffled together; it passes on a normalised exact match
with the target.

``retrieval_check`` needs only a policy, a question, its target and documents, so a held-out
corpus and question set can be run through it (``check_questions``) as well as a loop's
proposals. SSP's judge is the policy being trained, greedy (the paper uses an external judge
LLM and, failing an exact match, its equivalence ruling; we keep the rule only).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from curricula.ssp_rewards import exact_match, last_tag
from selfplay.types import Completion, Request

ANSWER_OPEN = "<answer>"


@dataclass
class RagVerdict:
    """The judge's answer to one question and whether it matched the target."""

    question: str
    target: str
    documents: list[str]  # what the judge read, in the order shown
    answer: str | None
    passed: bool
    completion: Completion | None = None
    request: Request | None = None


def judge_answer(reply: str) -> str | None:
    """The last ``<answer>…</answer>``; an answer tag left open (the judge stops on its close,
    or the token budget ends it) counts to the end of its line."""
    closed = last_tag(reply, "answer")
    if closed is not None:
        return closed
    _, opened, tail = reply.rpartition(ANSWER_OPEN)
    line = tail.strip().splitlines()[0].strip() if opened and tail.strip() else ""
    return line or None


def mixed_documents(own: list[str], others: list[str], noisy: int, rng: random.Random) -> list[str]:
    """The proposer's documents plus up to ``noisy`` others (not already among them), shuffled."""
    pool = sorted({d for d in others if d not in set(own)})
    chosen = own + rng.sample(pool, min(noisy, len(pool)))
    rng.shuffle(chosen)
    return chosen


def documents_text(documents: list[str]) -> str:
    return "\n".join(f"Doc {k}: {text}" for k, text in enumerate(documents, 1))


async def retrieval_check(
    policy,
    make_request: Callable[..., Request],
    question: str,
    target: str,
    documents: list[str],
) -> RagVerdict:
    """The judge answers ``question`` from ``documents`` (``make_request(documents=...,
    question=...)`` builds its greedy request); passed = exact match with ``target``."""
    request = make_request(documents=documents_text(documents), question=question)
    completion = await policy(request)
    answer = judge_answer(completion.reply)
    return RagVerdict(question, target, documents, answer, exact_match(answer, target),
                      completion, request)


async def check_questions(
    policy,
    make_request: Callable[..., Request],
    corpus,
    rows: list[dict],
    top_k: int = 3,
    noisy: int = 4,
    seed: int = 0,
) -> list[RagVerdict]:
    """Held-out questions through the RAG check. Each row has ``question`` and ``answer`` and
    optionally ``documents`` (texts); without them the corpus is searched with the question
    (top-k chunks). Every row's noise is drawn from the other rows' documents."""
    own = [
        list(row["documents"]) if row.get("documents")
        else [chunk.text for chunk, _ in corpus.search([row["question"]], top_k)[0]]
        for row in rows
    ]
    rng = random.Random(seed)
    shown = [
        mixed_documents(docs, [d for j, other in enumerate(own) if j != i for d in other],
                        noisy, rng)
        for i, docs in enumerate(own)
    ]
    return await policy.gather(
        retrieval_check(policy, make_request, row["question"], str(row["answer"]), docs)
        for row, docs in zip(rows, shown, strict=True)
    )
