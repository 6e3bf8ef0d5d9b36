"""Scored moves (``spiral.action: scored``): a policy over the legal moves, not over free text.

In the style of GLAM (Carta et al., ICML 2023) and TWOSOME (Tan et al., ICLR 2024): each legal
move's reply, ``\\boxed{<move>}`` (after the prompt's prefill, if the prefill starts it), is
scored by the policy's log-probability given the prompt, S_k = Σ_j log p(w_kj | prompt, w_k<j);
π(a_k | s) is the softmax over the legal moves of S_k / d_k, with d_k = 1 (``sum``: GLAM, the
joint probability renormalised over the legal set), the reply's token count (``token``) or the
move's word count (``word``: TWOSOME's two normalisations against the bias toward short
replies). A move is drawn from π (the most likely one when greedy), so no move is ever invalid;
the probability the model put outside the legal replies, 1 − Σ_k exp(S_k), is recorded. The
learner trains log π(chosen | s) over the same candidates (``training.batches``), so the
gradient reaches every legal move's score.

A reply's tokens are the candidate text tokenised alone and appended to the prompt's ids; the
learner scores exactly those ids, so the policy it trains is the one that played (REFERENCE's
tokenisation-boundary pitfall does not arise between rollout and learner).
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Literal

from selfplay.engines.policy import BatchingPolicy, Likelihoods
from selfplay.types import Choice, Request, Turn

ActionForm = Literal["text", "scored"]
Normalisation = Literal["sum", "token", "word"]


def reply_text(move: str, prefill: str = "") -> str:
    """The reply that plays ``move``, less the prefill the prompt already wrote (when the
    prefill is the start of it: a started reply ``\\boxed{[``)."""
    answer = f"\\boxed{{{move}}}"
    return answer[len(prefill):] if prefill and answer.startswith(prefill) else answer


def candidates(tokenizer, request: Request, names: list[str]) -> list[list[int]]:
    """Each legal move's reply as token ids continuing ``request``'s prompt."""
    return [
        tokenizer(reply_text(name, request.prefill), add_special_tokens=False).input_ids
        for name in names
    ]


def divisors(names: list[str], replies: list[list[int]], norm: Normalisation) -> list[float]:
    if norm == "sum":
        return [1.0] * len(names)
    if norm == "token":
        return [float(max(len(reply), 1)) for reply in replies]
    return [float(max(len(name.strip("[]").split()), 1)) for name in names]


def log_policy(logprobs: list[list[float]], divs: list[float]) -> list[float]:
    """log π(a_k | s): the log-softmax of Σ log p / d over the candidates."""
    logits = [sum(lp) / d for lp, d in zip(logprobs, divs, strict=True)]
    top = max(logits)
    norm = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - norm for x in logits]


def outside_mass(logprobs: list[list[float]]) -> float:
    """The model's probability of a reply other than the candidates (never below 0)."""
    return max(0.0, 1.0 - sum(math.exp(sum(lp)) for lp in logprobs))


def draw(log_pi: list[float], greedy: bool, rng: random.Random, explore: float = 0.0) -> int:
    """The most likely move (greedy), or a draw from (1 − explore)·π + explore·uniform."""
    if greedy:
        return max(range(len(log_pi)), key=lambda k: (log_pi[k], -k))
    weights = [(1 - explore) * math.exp(x) + explore / len(log_pi) for x in log_pi]
    return rng.choices(range(len(log_pi)), weights=weights)[0]


async def scored_move(
    policy: BatchingPolicy,
    request: Request,
    names: list[str],
    norm: Normalisation,
    greedy: bool,
    rng: random.Random | None,
    explore: float = 0.0,
) -> Turn:
    """Score every legal move's reply, draw one from π (mixed with ``explore``·uniform in
    training), and return the turn that records it (``turn.choice`` holds the candidates;
    ``names[turn.choice.chosen]`` is the move)."""
    replies = candidates(policy.tokenizer, request, names)
    scored: Likelihoods = await policy.likelihoods(request, replies)
    divs = divisors(names, replies, norm)
    log_pi = log_policy(scored.logprobs, divs)
    explore = 0.0 if greedy else explore
    chosen = draw(log_pi, greedy, rng, explore)
    choice = Choice(replies, list(names), chosen, divs, log_pi, outside_mass(scored.logprobs),
                    explore)
    return Turn(
        role=request.role,
        prompt_ids=scored.prompt_ids,
        completion_ids=list(replies[chosen]),
        engine_logprobs=list(scored.logprobs[chosen]),
        loss_mask=[1] * len(replies[chosen]),
        text=reply_text(names[chosen], request.prefill),
        adapter=request.adapter,
        prompt_text=request.messages[-1]["content"] if request.messages else "",
        policy_version=scored.policy_version,
        temperature=1.0,
        top_p=1.0,
        finish_reason="stop",
        prefill=request.prefill,
        choice=choice,
    )


def state_policy(
    logprobs: list[list[float]], names: list[str], replies: list[list[int]], norm: Normalisation
) -> tuple[list[float], float]:
    """(π over the legal moves, the mass outside them) at one state, for measurements."""
    log_pi = log_policy(logprobs, divisors(names, replies, norm))
    return [math.exp(x) for x in log_pi], outside_mass(logprobs)


def played_as(turn: Turn, move: int) -> Turn:
    """``turn`` as if it had played candidate ``move`` (the same prompt and candidates); its
    engine log-prob is π_t(move), so the learner's importance weight is 1."""
    choice = dataclasses.replace(turn.choice, chosen=move, explore=0.0)
    candidate = choice.candidates[move]
    return dataclasses.replace(turn, completion_ids=list(candidate), choice=choice,
                               loss_mask=[1] * len(candidate),
                               engine_logprobs=[0.0] * len(candidate),
                               text=reply_text(choice.names[move], turn.prefill))
