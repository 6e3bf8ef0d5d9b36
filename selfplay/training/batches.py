"""Samples → micro-batches: the tensors one forward and backward pass take.

Aggregation coefficients are fixed over the whole batch before it is cut (so accumulating the
gradients of micro-batches, on one process or on many ranks, gives the gradient of the whole
batch). Samples of one adapter share a micro-batch (peft trains one active adapter per forward).

Two layouts (``share_prefixes``):

- **prefix trees** (the default): a micro-batch's rows (prompt + completion; a scored move's
  prompt + each candidate reply) are packed into one prefix tree (``engines.tree``): every
  beginning the rows share, however they differ afterwards, is one node computed once, and its
  gradient gathers what every row under it sends back. Samples are taken in the order of their
  token ids (rows sharing beginnings sit together) and cut when the tree would pass
  ``tree_tokens`` nodes;
- **padded rows**: one row per sequence, ``micro_batch_size`` rows at a time, sorted by length.

A scored move (``Turn.choice``) is one *decision*: its rows are the candidate replies, its
tokens are every candidate's tokens (scored at temperature 1, no nucleus), and the loss is taken
per decision over log π(chosen | s), the softmax over the candidates of their normalised summed
log-probs (``decision_logprobs``). A micro-batch holds either text samples or decisions.
Micro-batches are built on the CPU and moved to a device by whoever runs them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from selfplay.engines.prefix import common_prefix_length
from selfplay.engines.tree import PrefixTree, pack_rows
from selfplay.rl.losses import Aggregation, token_coefficients
from selfplay.types import Sample

DEFAULT_TREE_TOKENS = 2048


@dataclass
class MicroBatch:
    """One forward/backward pass. ``rows``/``cols``/``targets``/``temperature``/``top_p`` are
    per scored token [N]; the loss's tensors (``advantages``, ``coefficients``, ``eps_high``,
    ``engine_logprobs``, ``logp_old``, ``logp_ref``) are per token too, or per decision [D] in a
    batch of scored moves (``chosen`` set)."""

    adapter: str
    input_ids: torch.Tensor  # [B, T] (a prefix tree: [1, nodes])
    attention: torch.Tensor  # [B, T]
    rows: torch.Tensor  # [N] batch row of each scored token
    cols: torch.Tensor  # [N] position (tree: node) whose hidden state predicts the token
    targets: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N] or [D] Â·scale
    coefficients: torch.Tensor  # [N] or [D] aggregation coefficient c
    eps_high: torch.Tensor  # [N] or [D]
    engine_logprobs: torch.Tensor  # [N] or [D] (a decision: log π_behaviour(chosen | s))
    temperature: torch.Tensor  # [N]
    top_p: torch.Tensor  # [N] nucleus each token was sampled from (1: none)
    logp_old: torch.Tensor | None = None  # first-pass log-probs (PPO epochs)
    logp_ref: torch.Tensor | None = None  # the initial policy's (train.kl_coef > 0)
    # a prefix-tree batch: the packed row's position ids and ancestor structure
    tree: PrefixTree | None = None
    # a batch of scored moves: the candidate of each token [N], each candidate's decision [C]
    # and divisor [C], each decision's chosen candidate [D]
    token_candidate: torch.Tensor | None = None
    candidate_decision: torch.Tensor | None = None
    candidate_divisor: torch.Tensor | None = None
    chosen: torch.Tensor | None = None

    @property
    def tokens(self) -> int:
        return int(self.targets.numel())

    @property
    def units(self) -> int:
        """What the loss is summed over: tokens, or decisions."""
        return int(self.advantages.numel())

    def to(self, device: torch.device) -> MicroBatch:
        tensors = {
            f.name: value.to(device)
            for f in dataclasses.fields(self)
            if isinstance(value := getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, **tensors)


def decision_logprobs(
    token_logp: torch.Tensor, batch: MicroBatch
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(chosen | s) [D], entropy of π(· | s) [D]) from the candidates' token log-probs:
    π is the softmax, within each decision, of Σ_tokens log p / divisor over its candidates."""
    candidates = batch.candidate_decision.numel()
    decisions = batch.chosen.numel()
    summed = token_logp.new_zeros(candidates).index_add(0, batch.token_candidate, token_logp)
    logits = summed / batch.candidate_divisor
    group = batch.candidate_decision
    # a per-decision logsumexp: shift by each decision's max (no gradient through the shift)
    top = logits.new_full((decisions,), float("-inf")).scatter_reduce(
        0, group, logits.detach(), "amax"
    )
    shifted = torch.exp(logits - top[group])
    norm = top + torch.log(shifted.new_zeros(decisions).index_add(0, group, shifted))
    log_pi = logits - norm[group]  # [C]
    entropy = -log_pi.new_zeros(decisions).index_add(0, group, log_pi.exp() * log_pi)
    return log_pi[batch.chosen], entropy.detach()  # the entropy is reported, not trained


def micro_batches(
    samples: list[Sample],
    adapters: list[str],
    *,
    aggregation: Aggregation,
    max_new_tokens: int,
    micro_batch_size: int,
    eps_high: float,
    share_prefixes: bool,
    tree_tokens: int = DEFAULT_TREE_TOKENS,
    tree_scope: str = "common",
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
    for adapter, items in by_adapter.items():
        for scored in (False, True):
            kind = [item for item in items if (item[0].turn.choice is not None) == scored]
            if not kind:
                continue
            if share_prefixes:
                chunks = tree_chunks(kind, tree_tokens, tree_scope == "prompt")
            else:
                kind.sort(key=lambda item: max(len(row) for row in sample_rows(item[0])))
                chunks = [kind[i : i + micro_batch_size]
                          for i in range(0, len(kind), micro_batch_size)]
            batches += [collate(adapter, chunk, eps_high, share_prefixes) for chunk in chunks]
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
        tree_tokens=settings.tree_tokens,
        tree_scope=settings.tree_scope,
    )


def sample_rows(sample: Sample) -> list[list[int]]:
    """The sequences a sample is scored on: prompt + completion, or prompt + each candidate."""
    turn = sample.turn
    if turn.choice is None:
        return [turn.prompt_ids + turn.completion_ids]
    return [turn.prompt_ids + candidate for candidate in turn.choice.candidates]


def tree_chunks(
    items: list[tuple[Sample, float]], budget: int, same_prompt: bool = False
) -> list[list[tuple[Sample, float]]]:
    """Items in the order of their token ids, cut so that each chunk's tree stays within
    ``budget`` nodes (counted against the previous row: an upper bound of the trie's size). An
    item larger than the budget is a chunk of its own; with ``same_prompt`` a chunk also ends
    where the prompt changes (only exactly repeated prompts are shared)."""
    keyed = sorted(items, key=lambda item: tuple(sample_rows(item[0])[0]))
    chunks: list[list[tuple[Sample, float]]] = []
    nodes, previous, prompt = 0, (), None
    for item in keyed:
        if same_prompt and item[0].turn.prompt_ids != prompt:
            prompt, previous, nodes = item[0].turn.prompt_ids, (), budget + 1  # a new chunk
        added, last = 0, previous
        for row in sorted(tuple(r) for r in sample_rows(item[0])):
            added += len(row) - common_prefix_length(last, row)
            last = row
        if chunks and nodes + added <= budget:
            chunks[-1].append(item)
            nodes += added
        else:
            chunks.append([item])
            nodes = sum(len(r) for r in sample_rows(item[0]))
        previous = last
    return chunks


@dataclass
class _Columns:
    """The per-token and per-unit lists a micro-batch is made of."""

    rows: list[int] = dataclasses.field(default_factory=list)
    cols: list[int] = dataclasses.field(default_factory=list)
    targets: list[int] = dataclasses.field(default_factory=list)
    temperature: list[float] = dataclasses.field(default_factory=list)
    top_p: list[float] = dataclasses.field(default_factory=list)
    advantages: list[float] = dataclasses.field(default_factory=list)
    coefficients: list[float] = dataclasses.field(default_factory=list)
    eps_high: list[float] = dataclasses.field(default_factory=list)
    engine: list[float] = dataclasses.field(default_factory=list)
    token_candidate: list[int] = dataclasses.field(default_factory=list)
    candidate_decision: list[int] = dataclasses.field(default_factory=list)
    candidate_divisor: list[float] = dataclasses.field(default_factory=list)
    chosen: list[int] = dataclasses.field(default_factory=list)

    def unit(self, sample: Sample, c: float, eps_high: float, engine: float) -> None:
        self.advantages.append(sample.advantage * sample.advantage_scale)
        self.coefficients.append(c)
        self.eps_high.append(sample.eps_high if sample.eps_high is not None else eps_high)
        self.engine.append(engine)

    def token(self, row: int, col: int, target: int, temperature: float, top_p: float) -> None:
        self.rows.append(row)
        self.cols.append(col)
        self.targets.append(target)
        self.temperature.append(temperature)
        self.top_p.append(top_p)


def collate(
    adapter: str, items: list[tuple[Sample, float]], eps_high: float, packed: bool = False
) -> MicroBatch:
    """One micro-batch of (sample, coefficient) pairs; ``eps_high``: the clip ceiling of samples
    that carry none of their own (ADPO sets one per sample); ``packed``: one prefix tree."""
    rows: list[list[int]] = []
    out = _Columns()
    scored = items[0][0].turn.choice is not None
    for sample, c in items:
        turn = sample.turn
        prompt = len(turn.prompt_ids)
        if turn.choice is not None:
            choice = turn.choice
            decision = len(out.chosen)
            out.chosen.append(len(out.candidate_decision) + choice.chosen)
            out.unit(sample, c, eps_high, choice.behaviour_logprob)
            for candidate, divisor in zip(choice.candidates, choice.divisors, strict=True):
                index = len(out.candidate_decision)
                out.candidate_decision.append(decision)
                out.candidate_divisor.append(float(divisor))
                for k, token in enumerate(candidate):
                    out.token(len(rows), prompt + k - 1, token, 1.0, 1.0)
                    out.token_candidate.append(index)
                rows.append(turn.prompt_ids + candidate)
            continue
        # greedy turns (T = 0) carry T = 1 log-probs of the untruncated distribution
        greedy = turn.temperature <= 0
        for k, (token, mask) in enumerate(zip(turn.completion_ids, turn.loss_mask, strict=True)):
            if not mask:
                continue  # tool output: conditioned on, never trained on
            # the hidden state that predicts completion token k
            out.token(len(rows), prompt + k - 1, token, 1.0 if greedy else turn.temperature,
                      1.0 if greedy else turn.top_p)
            out.unit(sample, c, eps_high, turn.engine_logprobs[k])
        rows.append(turn.prompt_ids + turn.completion_ids)
    tree = pack_rows(rows) if packed else None
    if tree is not None:
        input_ids = torch.tensor([tree.ids], dtype=torch.long)
        attention = torch.ones_like(input_ids)
        cols = [tree.nodes[row][col] for row, col in zip(out.rows, out.cols, strict=True)]
        row_index = [0] * len(cols)
    else:
        width = max(len(row) for row in rows)
        input_ids = torch.zeros((len(rows), width), dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            input_ids[r, : len(row)] = torch.tensor(row)
            attention[r, : len(row)] = 1
        cols, row_index = out.cols, out.rows
    f32, i64 = {"dtype": torch.float32}, {"dtype": torch.long}
    return MicroBatch(
        adapter=adapter,
        input_ids=input_ids,
        attention=attention,
        rows=torch.tensor(row_index, **i64),
        cols=torch.tensor(cols, **i64),
        targets=torch.tensor(out.targets, **i64),
        advantages=torch.tensor(out.advantages, **f32),
        coefficients=torch.tensor(out.coefficients, **f32),
        eps_high=torch.tensor(out.eps_high, **f32),
        engine_logprobs=torch.tensor(out.engine, **f32),
        temperature=torch.tensor(out.temperature, **f32),
        top_p=torch.tensor(out.top_p, **f32),
        tree=tree,
        token_candidate=torch.tensor(out.token_candidate, **i64) if scored else None,
        candidate_decision=torch.tensor(out.candidate_decision, **i64) if scored else None,
        candidate_divisor=torch.tensor(out.candidate_divisor, **f32) if scored else None,
        chosen=torch.tensor(out.chosen, **i64) if scored else None,
    )
