"""Samples → micro-batches: the tensors one forward and backward pass take.

Aggregation coefficients are fixed over the whole batch before it is cut (so accumulating the
gradients of micro-batches, on one process or on many ranks, gives the gradient of the whole
batch). Samples of one adapter share a micro-batch (peft trains one active adapter per forward);
samples that share a prompt (a GRPO group) share a micro-batch whose prompt runs once.
Micro-batches are built on the CPU and moved to a device by whoever runs them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from selfplay.rl.losses import Aggregation, token_coefficients
from selfplay.types import Sample, Turn


@dataclass
class MicroBatch:
    adapter: str
    input_ids: torch.Tensor  # [B, T]
    attention: torch.Tensor  # [B, T]
    rows: torch.Tensor  # [N] batch row of each scored token
    cols: torch.Tensor  # [N] position whose hidden state predicts the token
    targets: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N] Â·scale
    coefficients: torch.Tensor  # [N] aggregation coefficient c_t
    eps_high: torch.Tensor  # [N]
    engine_logprobs: torch.Tensor  # [N]
    temperature: torch.Tensor  # [N]
    top_p: torch.Tensor  # [N] nucleus each token was sampled from (1: none)
    logp_old: torch.Tensor | None = None  # [N], first-pass log-probs (PPO epochs)
    logp_ref: torch.Tensor | None = None  # [N], the initial policy's (train.kl_coef > 0)
    # Shared-prefix batches (a GRPO group: one prompt, several completions): the prompt runs
    # once and its KV cache is expanded to every row; input_ids then holds completions only.
    prefix_ids: torch.Tensor | None = None  # [1, P]

    @property
    def tokens(self) -> int:
        return int(self.targets.numel())

    def to(self, device: torch.device) -> MicroBatch:
        tensors = {
            f.name: value.to(device)
            for f in dataclasses.fields(self)
            if isinstance(value := getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, **tensors)


def micro_batches(
    samples: list[Sample],
    adapters: list[str],
    *,
    aggregation: Aggregation,
    max_new_tokens: int,
    micro_batch_size: int,
    eps_high: float,
    share_prefixes: bool,
) -> list[MicroBatch]:
    """The batch's micro-batches (CPU tensors), adapter by adapter; a sample whose adapter the
    learner does not train goes to its first adapter ("full" when fully fine-tuned)."""
    coefficients = token_coefficients(samples, aggregation, max_new_tokens)
    by_adapter: dict[str, list[tuple[Sample, float]]] = {}
    for sample, c in zip(samples, coefficients, strict=True):
        adapter = (
            sample.turn.adapter
            if sample.turn.adapter in adapters
            else (adapters[0] if adapters else "full")
        )
        by_adapter.setdefault(adapter, []).append((sample, c))
    batches = []
    size = micro_batch_size
    for adapter, items in by_adapter.items():
        by_prompt: dict[tuple[int, ...], list[tuple[Sample, float]]] = {}
        for item in items:
            by_prompt.setdefault(tuple(item[0].turn.prompt_ids), []).append(item)
        singles = []
        for group in by_prompt.values():
            if len(group) < 2 or not share_prefixes:
                singles += group
                continue
            for start in range(0, len(group), size):
                batches.append(collate(adapter, group[start : start + size], eps_high, True))
        singles.sort(
            key=lambda item: len(item[0].turn.prompt_ids) + len(item[0].turn.completion_ids)
        )
        for start in range(0, len(singles), size):
            batches.append(collate(adapter, singles[start : start + size], eps_high))
    return batches



def learner_batches(samples: list[Sample], adapters: list[str], settings, *,
                    share_prefixes: bool, micro_batch_size: int | None = None) -> list[MicroBatch]:
    """``micro_batches`` with a learner's settings (``micro_batch_size`` overrides its own)."""
    return micro_batches(
        samples,
        adapters,
        aggregation=settings.aggregation,
        max_new_tokens=settings.max_new_tokens,
        micro_batch_size=micro_batch_size or settings.micro_batch_size,
        eps_high=settings.eps_high,
        share_prefixes=share_prefixes,
    )

def collate(
    adapter: str, items: list[tuple[Sample, float]], eps_high: float, shared_prefix: bool = False
) -> MicroBatch:
    """One micro-batch of (sample, coefficient) pairs; ``eps_high``: the clip ceiling of samples
    that carry none of their own (ADPO sets one per sample)."""

    def row_ids(turn: Turn) -> list[int]:
        return turn.completion_ids if shared_prefix else turn.prompt_ids + turn.completion_ids

    width = max(len(row_ids(s.turn)) for s, _ in items)
    input_ids = torch.zeros((len(items), width), dtype=torch.long)
    attention = torch.zeros((len(items), width), dtype=torch.long)
    rows, cols, targets, adv, coef, eps, engine, temp, top_p = ([] for _ in range(9))
    for row, (sample, c) in enumerate(items):
        turn = sample.turn
        ids = row_ids(turn)
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        for k, (token, mask) in enumerate(zip(turn.completion_ids, turn.loss_mask, strict=True)):
            if not mask:
                continue  # tool output: conditioned on, never trained on
            rows.append(row)
            # the hidden state that predicts completion token k
            cols.append(k if shared_prefix else len(turn.prompt_ids) + k - 1)
            targets.append(token)
            adv.append(sample.advantage * sample.advantage_scale)
            coef.append(c)
            eps.append(sample.eps_high if sample.eps_high is not None else eps_high)
            engine.append(turn.engine_logprobs[k])
            # greedy turns (T = 0) carry T = 1 log-probs of the untruncated distribution
            greedy = turn.temperature <= 0
            temp.append(1.0 if greedy else turn.temperature)
            top_p.append(1.0 if greedy else turn.top_p)
    f32 = {"dtype": torch.float32}
    return MicroBatch(
        adapter=adapter,
        input_ids=input_ids,
        attention=attention,
        rows=torch.tensor(rows, dtype=torch.long),
        cols=torch.tensor(cols, dtype=torch.long),
        targets=torch.tensor(targets, dtype=torch.long),
        advantages=torch.tensor(adv, **f32),
        coefficients=torch.tensor(coef, **f32),
        eps_high=torch.tensor(eps, **f32),
        engine_logprobs=torch.tensor(engine, **f32),
        temperature=torch.tensor(temp, **f32),
        top_p=torch.tensor(top_p, **f32),
        prefix_ids=torch.tensor([items[0][0].turn.prompt_ids]) if shared_prefix else None,
    )
