"""The model side of a learner step, shared by the one-process learner and every sharded rank:
log-probs of a micro-batch's tokens under the policy, and the loss and gradient of a list of
micro-batches accumulated into the model's ``.grad``.

Log-probs come from the decoder's hidden states in chunks (``losses.chunked_logprobs``), so the
batch's full-vocabulary log-softmax never exists at once; each token is scored under the
distribution the engine drew it from (its temperature, its top-p nucleus renormalised, and the
model's own logit head).

With ``train.kl_coef`` > 0 each micro-batch also gets the initial policy's log-probs of its
tokens, once per step (the reference never changes): the base model with the adapters disabled
(LoRA: no extra memory), or a frozen copy of the initial weights (full fine-tuning); the loss
then adds β·c_t·KL_t per token with the policy loss's own coefficients c_t.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from selfplay.engines.tree import tree_hidden
from selfplay.rl.losses import (
    LogitTransform,
    chunked_logprobs,
    kl_estimate,
    tis_weights,
    token_losses,
)
from selfplay.training.batches import MicroBatch, decision_logprobs

# kl: the KL estimate summed over the tokens that had a reference (kl_tokens; all of them when
# train.kl_coef > 0, none otherwise)
SUMS = ("loss", "clip", "entropy", "mismatch_k1", "mismatch_abs", "tis", "tokens", "kl",
        "kl_tokens")
Score = Callable[[MicroBatch], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Totals:
    """Sums over the scored tokens of the micro-batches a process ran (ranks add theirs up)."""

    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SUMS, 0.0))
    mismatch_max: float = 0.0

    def add(self, other: Totals) -> Totals:
        return Totals(
            {k: self.sums[k] + other.sums[k] for k in SUMS},
            max(self.mismatch_max, other.mismatch_max),
        )

    def metrics(self) -> dict[str, float]:
        """Token means over every micro-batch of the step (the loss: its sum, β·KL included)."""
        per_token = max(self.sums["tokens"], 1.0)
        kl_tokens = self.sums["kl_tokens"]
        kl = {"train/kl": self.sums["kl"] / kl_tokens} if kl_tokens else {}  # kl_coef > 0
        return kl | {
            "train/loss": self.sums["loss"],
            "train/clip_frac": self.sums["clip"] / per_token,
            "train/entropy": self.sums["entropy"] / per_token,
            # E_engine[log π_engine − log π_trainer] estimates KL(engine ‖ trainer)
            "train/mismatch_kl": self.sums["mismatch_k1"] / per_token,
            "train/mismatch_abs_mean": self.sums["mismatch_abs"] / per_token,
            "train/mismatch_abs_max": self.mismatch_max,
            "train/tis_weight_mean": self.sums["tis"] / per_token,
        }


def distinct_tokens(batch: MicroBatch):
    """(cols, targets, temperature, top_p, inverse): a tree batch's distinct scored (node,
    token, temperature, top-p), and where each scored token finds its own (``inverse``); a
    padded batch's tokens as they are (``inverse`` None)."""
    if batch.tree is None:
        return batch.cols, batch.targets, batch.temperature, batch.top_p, None
    key = torch.stack([batch.cols.double(), batch.targets.double(),
                       batch.temperature.double(), batch.top_p.double()], 1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    return (unique[:, 0].long(), unique[:, 1].long(), unique[:, 2].float(),
            unique[:, 3].float(), inverse)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The initial weights for the KL term of full fine-tuning: a copy nothing trains."""
    reference = copy.deepcopy(model).eval()
    reference.requires_grad_(False)
    return reference


class Scorer:
    """Scores micro-batches with ``model`` (a peft model with ``adapters``, or a plain model);
    ``reference``: the frozen initial weights (full fine-tuning with ``kl_coef`` > 0)."""

    def __init__(
        self, model, adapters: list[str], settings, transform: LogitTransform, device,
        reference: torch.nn.Module | None = None,
    ) -> None:
        self.model, self.adapters, self.settings = model, adapters, settings
        self.transform, self.device = transform, device
        self.reference = reference
        # what token_logprobs calls: ``compute`` itself, or on an FSDP2 model the same computation
        # registered as one of the root module's forward methods (so the root's own parameters,
        # embeddings, final norm and head, are gathered and their gradients reduced)
        self.entry: Score = self.compute
        self.reference_entry: Score = lambda batch: self.compute(batch, self.reference)

    def mark_trainable(self) -> None:
        """All adapters trainable (peft's set_adapter would freeze the inactive ones)."""
        if not self.adapters:
            for param in self.model.parameters():
                param.requires_grad_(True)
            return
        for name, param in self.model.named_parameters():
            param.requires_grad_(any(f".{a}." in name for a in self.adapters) and "lora_" in name)

    def token_logprobs(self, batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.entry(batch)

    def compute(
        self, batch: MicroBatch, model: torch.nn.Module | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of ``batch``'s tokens under ``model`` (the policy if None),
        or, in a batch of scored moves, of its decisions (log π(chosen | s) and the entropy of
        π(· | s) over the candidates)."""
        if model is None:
            model = self.model
            if self.adapters:
                model.set_adapter(batch.adapter)
                self.mark_trainable()
        core = model.get_base_model() if self.adapters else model
        hidden = self.predicting_hidden(core.get_decoder(), batch)
        head = core.get_output_embeddings()
        # A tree holds repeated rows once, so many scored tokens are one (node, token) pair: the
        # head (a [N, vocab] product) runs once per distinct pair, its result shared (and its
        # gradient summed) by every token that is that pair.
        cols, targets, temperature, top_p, inverse = distinct_tokens(batch)
        selected = hidden[batch.rows, cols] if inverse is None else hidden[0, cols]
        # the distribution the engine sampled each token from: the model's own logits
        # (bias, scaling, soft-capping), that token's temperature and top-p nucleus
        logp, entropy = chunked_logprobs(
            selected,
            head.weight,
            targets,
            temperature,
            self.settings.logprob_chunk_size,
            bias=getattr(head, "bias", None),
            top_p=top_p,
            transform=self.transform,
        )
        if inverse is not None:
            logp, entropy = logp[inverse], entropy[inverse]
        if batch.chosen is not None:  # scored moves: log π(chosen | s) over the candidates
            return decision_logprobs(logp, batch)
        return logp, entropy

    def predicting_hidden(self, decoder, batch: MicroBatch) -> torch.Tensor:
        """Hidden states indexed so that ``[row, col]`` predicts the token ``batch`` scores: the
        padded rows' own positions, or a prefix tree's nodes (one packed row, every shared
        beginning computed once; autograd sums the gradient of a shared node over every row
        under it, exactly as if each row had computed it alone)."""
        if batch.tree is not None:
            return tree_hidden(decoder, batch.tree, self.device)[None]  # [1, nodes, H]
        positions = (batch.attention.cumsum(-1) - 1).clamp(min=0)
        return decoder(
            input_ids=batch.input_ids, attention_mask=batch.attention, position_ids=positions
        ).last_hidden_state

    def first_pass(self, batches: list[MicroBatch]) -> None:
        """PPO epochs > 1: every batch keeps the log-probs of the policy before the update."""
        with torch.no_grad():
            for batch in batches:
                batch.logp_old = self.token_logprobs(batch)[0].detach()

    def reference_pass(self, batches: list[MicroBatch]) -> None:
        """``kl_coef`` > 0: every batch without them gets the initial policy's log-probs of its
        tokens, under the same temperature, nucleus and logit head as the policy's. Nothing
        when the KL term is off. On sharded ranks every rank runs the same number of batches
        here (padding included), so the collectives match."""
        if self.settings.kl_coef == 0:
            return
        missing = [batch for batch in batches if batch.logp_ref is None]
        if not missing:
            return
        with torch.no_grad(), self.reference_policy() as score:
            for batch in missing:
                batch.logp_ref = score(batch)[0].detach()

    @contextmanager
    def reference_policy(self) -> Iterator[Score]:
        """Scoring under the initial policy: LoRA's base with every adapter disabled (peft
        restores them on exit), or the frozen copy of full fine-tuning."""
        if self.adapters:
            with self.model.disable_adapter():
                yield self.entry
            return
        if self.reference is None:
            raise ValueError("train.kl_coef > 0 with full fine-tuning needs the frozen initial "
                             "weights, built with the learner: set kl_coef before building it")
        yield self.reference_entry

    def kl_estimate(self, batch: MicroBatch, logp: torch.Tensor) -> torch.Tensor | None:
        """Per-token KL to the initial policy (None while the term is off)."""
        if self.settings.kl_coef == 0 or batch.logp_ref is None:
            return None
        return kl_estimate(logp, batch.logp_ref, self.settings.kl_estimator)

    def accumulate(self, batches: list[MicroBatch], weights: list[float] | None = None) -> Totals:
        """Loss and gradient of ``batches`` into ``.grad``; ``weights`` scale each batch's loss
        (0 for a rank's padding passes: run for their collectives, counted nowhere). With
        ``kl_coef`` > 0 the reference log-probs come first (once: PPO epochs reuse them)."""
        self.reference_pass(batches)
        totals = Totals()
        for index, batch in enumerate(batches):
            weight = 1.0 if weights is None else weights[index]
            logp, entropy = self.token_logprobs(batch)
            logp_old = batch.logp_old if batch.logp_old is not None else logp.detach()
            losses, clipped = token_losses(
                self.settings.objective,
                logp,
                logp_old,
                batch.advantages,
                self.settings.eps_low,
                batch.eps_high,
                self.settings.cispo_eps_max,
            )
            tis = tis_weights(logp_old, batch.engine_logprobs, self.settings.tis_cap)
            kl = self.kl_estimate(batch, logp)
            loss = (losses * tis * batch.coefficients).sum()
            if kl is not None:  # in the loss, not the reward; no TIS weight (as verl's, TRL's)
                loss = loss + self.settings.kl_coef * (kl * batch.coefficients).sum()
            (loss * weight if weight != 1.0 else loss).backward()
            if weight == 0.0:
                continue
            diff = (batch.engine_logprobs - logp_old).detach()
            sums = totals.sums
            sums["tokens"] += int(logp.numel())
            sums["loss"] += loss.item()
            sums["clip"] += float(clipped.sum())
            sums["entropy"] += float(entropy.sum())
            sums["mismatch_k1"] += float(diff.sum())
            sums["mismatch_abs"] += float(diff.abs().sum())
            sums["tis"] += float(tis.sum())
            if kl is not None:
                sums["kl"] += float(kl.detach().sum())
                sums["kl_tokens"] += int(kl.numel())
            totals.mismatch_max = max(totals.mismatch_max, float(diff.abs().max()))
        return totals
