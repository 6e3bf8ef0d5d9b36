"""Token objectives, aggregation modes and TIS (REFERENCE.md §1).

The learner computes, for every model token t of every sample, a token loss ℓ_t and multiplies
it by a *coefficient* c_t fixed by the aggregation mode over the whole batch, so that
Σ_t c_t·ℓ_t is the batch loss. Because c_t is fixed before the batch is split into micro-batches,
gradient accumulation gives exactly the full-batch gradient in every mode.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import torch

from selfplay.types import Sample

Objective = Literal["ppo", "reinforce", "cispo"]
Aggregation = Literal[
    "token-mean", "seq-mean-token-sum-norm", "seq-mean-token-mean", "prompt-level"
]
AGGREGATIONS = ("token-mean", "seq-mean-token-sum-norm", "seq-mean-token-mean", "prompt-level")

# Each named loss preset = token objective + advantage estimator + default aggregation.
LOSS_PRESETS: dict[str, tuple[Objective, str, Aggregation]] = {
    "grpo": ("ppo", "grpo", "seq-mean-token-mean"),
    "drgrpo": ("ppo", "drgrpo", "seq-mean-token-sum-norm"),
    "rloo": ("ppo", "rloo", "seq-mean-token-sum-norm"),
    "reinforce": ("reinforce", "drgrpo", "seq-mean-token-sum-norm"),
    "cispo": ("cispo", "drgrpo", "token-mean"),
}


def token_coefficients(
    samples: list[Sample], mode: Aggregation, max_new_tokens: int
) -> list[float]:
    """Per-sample coefficient c applied to each of its model tokens (see module docstring).

    token-mean:              1 / (tokens in batch)
    seq-mean-token-sum-norm: 1 / (sequences · max_new_tokens)   (Dr. GRPO: constant normaliser)
    seq-mean-token-mean:     1 / (sequences · own length)       (GRPO)
    prompt-level:            1 / (groups · tokens in own group) (ScaleRL)
    """
    lengths = [max(s.turn.num_model_tokens, 1) for s in samples]
    n = len(samples)
    if mode == "token-mean":
        return [1.0 / sum(lengths)] * n
    if mode == "seq-mean-token-sum-norm":
        return [1.0 / (n * max_new_tokens)] * n
    if mode == "seq-mean-token-mean":
        return [1.0 / (n * length) for length in lengths]
    if mode == "prompt-level":
        group_tokens: dict[str, int] = defaultdict(int)
        for sample, length in zip(samples, lengths, strict=True):
            group_tokens[sample.group_id] += length
        n_groups = len(group_tokens)
        return [1.0 / (n_groups * group_tokens[s.group_id]) for s in samples]
    raise ValueError(f"unknown aggregation {mode!r}; choose one of {AGGREGATIONS}")


def tis_weights(
    logp_old: torch.Tensor, logp_engine: torch.Tensor, cap: float | None
) -> torch.Tensor:
    """Truncated importance sampling: min(exp(logp_trainer_old − logp_engine), C), no gradient."""
    if cap is None:
        return torch.ones_like(logp_old)
    return torch.exp(logp_old - logp_engine).clamp(max=cap).detach()


def token_losses(
    objective: Objective,
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: torch.Tensor,
    cispo_eps_max: float = 5.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss (to minimise) and a 0/1 tensor of tokens where the ratio was clipped.

    ppo:       −min(ρ·Â, clip(ρ, 1−ε_low, 1+ε_high)·Â), ρ = π_θ/π_old
    reinforce: −Â·log π_θ
    cispo:     −sg(min(ρ, ε_max))·Â·log π_θ (ScaleRL)
    """
    if objective == "reinforce":
        return -advantages * logp, torch.zeros_like(logp)
    ratio = torch.exp(logp - logp_old)
    if objective == "cispo":
        weight = ratio.clamp(max=cispo_eps_max).detach()
        return -weight * advantages * logp, (ratio > cispo_eps_max).float()
    if objective == "ppo":
        clipped_ratio = torch.minimum(torch.maximum(ratio, 1 - eps_low + 0 * ratio), 1 + eps_high)
        unclipped, clipped = ratio * advantages, clipped_ratio * advantages
        return -torch.minimum(unclipped, clipped), (clipped < unclipped).float()
    raise ValueError(f"unknown objective {objective!r}")


def _chunk_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (hidden @ weight.T).float() / temperature
    logz = logits.logsumexp(-1)
    with torch.no_grad():
        probs = torch.softmax(logits, -1)
        entropy = logz - (probs * logits).sum(-1)
    return logits.gather(1, targets[:, None]).squeeze(1) - logz, entropy


def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(target) and entropy for [N, H] hidden states, never materialising [N, V] at once.

    Each chunk's logits are recomputed in the backward pass (activation checkpointing), so the
    peak holds one chunk of logits instead of the whole batch's full-vocabulary log-softmax.
    """
    from torch.utils.checkpoint import checkpoint

    logps, entropies = [], []
    for start in range(0, hidden.shape[0], chunk_size):
        part = slice(start, start + chunk_size)
        if torch.is_grad_enabled():
            logp, entropy = checkpoint(
                _chunk_logprobs,
                hidden[part],
                weight,
                targets[part],
                temperature,
                use_reentrant=False,
            )
        else:
            logp, entropy = _chunk_logprobs(hidden[part], weight, targets[part], temperature)
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps), torch.cat(entropies)
