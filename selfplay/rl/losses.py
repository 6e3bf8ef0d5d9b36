"""Token objectives, aggregation modes, TIS and the KL estimators (docs/algorithms.md#losses).

The learner computes, for every model token t of every sample, a token loss ℓ_t and multiplies
it by a *coefficient* c_t fixed by the aggregation mode over the whole batch, so that
Σ_t c_t·ℓ_t is the batch loss. Because c_t is fixed before the batch is split into micro-batches,
gradient accumulation gives exactly the full-batch gradient in every mode.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

import torch

from selfplay.types import Sample

Objective = Literal["ppo", "reinforce", "cispo"]
Aggregation = Literal[
    "token-mean", "seq-mean-token-sum-norm", "seq-mean-token-mean", "prompt-level"
]
KlEstimator = Literal["k1", "k2", "k3"]
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

    A scored move (``turn.choice``) is one decision: its length is 1 and its constant
    normaliser 1, so every mode weighs a batch of moves as the mean over them.
    """
    lengths = [max(s.turn.num_model_tokens, 1) for s in samples]
    n = len(samples)
    if mode == "token-mean":
        return [1.0 / sum(lengths)] * n
    if mode == "seq-mean-token-sum-norm":
        return [1.0 / (n * (1 if s.turn.choice is not None else max_new_tokens)) for s in samples]
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


# k3's clamps, as verl's low_var_kl: the log-ratio to ±20 (e^20 ≈ 5e8 still fits every float
# type; e^80 overflows fp32) and the estimate to ±10, so one token the reference finds nearly
# impossible cannot take over the batch's loss (and gets no gradient beyond the cap)
K3_LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0


def kl_estimate(
    logp: torch.Tensor, logp_ref: torch.Tensor, estimator: KlEstimator
) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from tokens sampled from π_θ (Schulman's k1/k2/k3).

    With ℓ = log π_θ − log π_ref:
    k1 = ℓ                (unbiased, high variance, negative on some tokens)
    k2 = ½·ℓ²             (biased, low variance)
    k3 = e^{−ℓ} − 1 + ℓ   (unbiased, ≥ 0, low variance; ℓ clamped to ±20, k3 to ±10 as in verl)
    The gradient flows through ``logp`` only: the reference has none.
    """
    log_ratio = logp - logp_ref.detach()
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        clamped = log_ratio.clamp(-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
        value = torch.exp(-clamped) - 1 + clamped
        return value.clamp(-K3_VALUE_CLAMP, K3_VALUE_CLAMP)
    raise ValueError(f"unknown KL estimator {estimator!r}; choose k1, k2 or k3")


@dataclass(frozen=True)
class LogitTransform:
    """What a model does to ``hidden @ lm_head.weight.T`` before its logits, in this order:
    add the ``lm_head`` bias (Phi, GPT-J), multiply by ``scale`` (Cohere's ``logit_scale``,
    Granite's ``1 / logits_scaling``), soft-cap as ``cap·tanh(z / cap)`` (Gemma 2/3's
    ``final_logit_softcapping``). The learner must apply the same, or it trains on different
    log-probs than the engine samples (the engine reads the model's own logits).
    """

    scale: float = 1.0
    softcap: float | None = None


PLAIN_LOGITS = LogitTransform()


def nucleus_mask(logits: torch.Tensor, top_p: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """True where a token lies *outside* its row's top-p nucleus (the hf engine's rule: sort
    probabilities, keep every token whose preceding mass is ≤ p, so the token crossing p stays).

    ``top_p`` [N] (rows with p ≥ 1 keep everything); ``keep`` [N] token ids that are never
    masked: the sampled token is inside the nucleus the engine drew it from, but the trainer's
    own nucleus can differ slightly (numerics, or a policy that moved between PPO epochs), and
    a masked target would get log-prob −inf.
    """
    with torch.no_grad():
        probs = torch.softmax(logits.float(), -1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        sorted_outside = sorted_probs.cumsum(-1) - sorted_probs > top_p[:, None]
        sorted_outside &= (top_p < 1.0)[:, None]
        outside = torch.zeros_like(sorted_outside).scatter(1, order, sorted_outside)
        outside[torch.arange(len(keep), device=keep.device), keep] = False
    return outside


def _chunk_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor | None,
    transform: LogitTransform,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    logits = logits.float()
    if transform.scale != 1.0:
        logits = logits * transform.scale
    if transform.softcap is not None:
        logits = transform.softcap * torch.tanh(logits / transform.softcap)
    logits = logits / temperature[:, None]
    outside = None
    if top_p is not None and bool((top_p < 1.0).any()):
        # log π_nucleus(y) = z_y − logsumexp over the nucleus: the distribution sampled from
        outside = nucleus_mask(logits, top_p, targets)
        logits = logits.masked_fill(outside, float("-inf"))
    logz = logits.logsumexp(-1)
    with torch.no_grad():
        probs = torch.softmax(logits, -1)
        finite = logits if outside is None else logits.masked_fill(outside, 0.0)
        entropy = logz - (probs * finite).sum(-1)
    return logits.gather(1, targets[:, None]).squeeze(1) - logz, entropy


def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    chunk_size: int = 1024,
    *,
    bias: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    transform: LogitTransform = PLAIN_LOGITS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(target) and entropy for [N, H] hidden states, never materialising [N, V] at once.

    π is the distribution the engine sampled from: logits = transform(hidden·Wᵀ + bias) / T,
    restricted to the top-p nucleus and renormalised when ``top_p`` [N] has entries < 1
    (TIS needs the probability the token was really drawn with; docs/algorithms.md#losses).
    ``temperature``
    is a number or a per-token [N] tensor. Each chunk's logits are recomputed in the backward
    pass (activation checkpointing), so the peak holds one chunk of logits instead of the whole
    batch's full-vocabulary log-softmax.
    """
    from torch.utils.checkpoint import checkpoint

    n = hidden.shape[0]
    if not isinstance(temperature, torch.Tensor):
        temperature = torch.full((n,), float(temperature), device=hidden.device)
    temperature = temperature.float()
    logps, entropies = [], []
    for start in range(0, n, chunk_size):
        part = slice(start, start + chunk_size)
        args = (
            hidden[part],
            weight,
            bias,
            targets[part],
            temperature[part],
            None if top_p is None else top_p[part],
            transform,
        )
        if torch.is_grad_enabled():
            logp, entropy = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            logp, entropy = _chunk_logprobs(*args)
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps), torch.cat(entropies)
