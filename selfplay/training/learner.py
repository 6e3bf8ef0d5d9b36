"""The learner in one process: LoRA (one shared adapter or one per role) or full fine-tuning on
one base model (``train.parallel.ranks: 1``; ``training/sharded.py`` is the same ``Learner``
over N FSDP2 ranks).

One ``step(samples)`` is one optimizer update (``epochs`` > 1 repeats it PPO-style on the same
samples against the log-probs of the first pass). The samples become micro-batches
(``training/batches.py``: coefficients fixed over the whole batch first, so gradient
accumulation over micro-batches is exact) scored by ``training/scoring.py``; the model's logit
head is reproduced from its hidden states (``logit_transform`` refuses a head it cannot
reproduce). Learner state (trainable weights, optimizer, version) is saved with
``torch.distributed.checkpoint`` (``training/state.py``), so a run resumes on any number of
ranks.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from selfplay.core.errors import UserError
from selfplay.engines.lora import attach_adapters
from selfplay.engines.models import load_causal_lm
from selfplay.rl.losses import LogitTransform, chunked_logprobs
from selfplay.training import state as learner_state
from selfplay.training.allocator import return_large_blocks
from selfplay.training.base import Learner, LearnerSettings
from selfplay.training.batches import MicroBatch, learner_batches
from selfplay.training.scoring import Scorer, frozen_copy
from selfplay.training.sync import NcclSending, local_address, save_weights_file
from selfplay.types import Sample


class LocalLearner(Learner):
    """The learner in this process (``train.parallel.ranks: 1``)."""

    def __init__(
        self,
        model_path: Path,
        settings: LearnerSettings,
        adapters: list[str] | None = None,
        device: str | None = None,
    ) -> None:
        self._settings = settings  # the scorer, made below, gets them too
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cpu":
            return_large_blocks()
        model = load_causal_lm(model_path, settings.dtype)
        self.logit_transform = logit_transform(model, model_path)
        # full fine-tuning's KL reference: the initial weights, copied before anything trains
        # (a resumed run builds it from the model file too, then loads its checkpoint)
        reference = frozen_copy(model) if settings.lora is None and settings.kl_coef else None
        self.adapters = list(adapters or []) if settings.lora else []
        if settings.lora is not None:
            if not self.adapters:
                raise ValueError("LoRA training needs at least one adapter name")
            model = attach_adapters(model, settings.lora, self.adapters)
        if settings.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
            if settings.lora is not None:
                model.enable_input_require_grads()
        self.model = model.to(self.device)
        self.scorer = Scorer(self.model, self.adapters, settings, self.logit_transform, self.device,
                             None if reference is None else reference.to(self.device))
        self.scorer.mark_trainable()
        self.optimizer = learner_state.adamw(self.model, settings.lr, settings.weight_decay,
                                            settings.adam_betas)
        self.version = 0  # number of optimizer steps taken
        self.nccl = NcclSending()

    @property
    def settings(self) -> LearnerSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: LearnerSettings) -> None:
        """New settings reach the scorer too (tests vary the loss on one loaded model)."""
        self._settings = settings
        self.scorer.settings = settings

    # ------------------------------------------------------------------ weights
    def adapter_weights(self, adapter: str) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.model, adapter_name=adapter)
        return {k: v.detach().clone() for k, v in state.items()}

    def full_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def trainable_weights(self) -> dict[str, torch.Tensor]:
        """What training changes, by parameter name: the LoRA tensors, or the whole model."""
        return {n: p.detach().cpu() for n, p in self.model.named_parameters() if p.requires_grad}

    def state_dict(self) -> dict:
        return {
            "trainable": self.trainable_weights(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, value in state["trainable"].items():
                params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = state["version"]

    def save(self, folder: Path) -> None:
        """Trainable weights, optimizer and version into ``folder`` (a sharded checkpoint that
        any number of ranks can load)."""
        learner_state.save(self.model, self.optimizer, self.version, folder)

    def load(self, folder: Path) -> None:
        self.version = learner_state.load(self.model, self.optimizer, folder)

    def close(self) -> None:
        """Nothing to release in one process (the sharded learner stops its ranks)."""

    # ------------------------------------------------------------------ weight transports
    def write_weights(self, adapter: str | None, path: Path) -> None:
        """One adapter's weights (or the whole model's) as a safetensors file."""
        weights = self.adapter_weights(adapter) if adapter is not None else self.full_weights()
        save_weights_file(weights, path)

    def nccl_address(self) -> tuple[str, int]:
        return local_address()

    def nccl_open(self, host: str, port: int, world_size: int) -> None:
        self.nccl.open(host, port, world_size)

    def nccl_plan(self, bucket_bytes: int) -> list[dict]:
        return self.nccl.prepare(self.full_weights(), bucket_bytes)

    def nccl_send(self) -> int:
        return self.nccl.send()

    # ------------------------------------------------------------------ training
    def step(self, samples: list[Sample]) -> dict[str, float]:
        """One optimizer update on ``samples`` (already filtered of zero advantages)."""
        start = time.perf_counter()
        if not samples:  # still a step: the version counts steps, and async rollouts wait on it
            self.version += 1
            return {"train/samples": 0.0}
        batches = self._micro_batches(samples)
        self.model.train()
        if self.settings.epochs > 1:
            self.scorer.first_pass(batches)
        lr = learner_state.scheduled_lr(self.settings, self.version)
        learner_state.set_lr(self.optimizer, lr)
        stats: dict[str, float] = {}
        for _ in range(self.settings.epochs):
            self.optimizer.zero_grad(set_to_none=True)
            stats = self._accumulate(batches)
            grad_norm = torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad],
                self.settings.max_grad_norm,
            )
            stats["train/grad_norm"] = float(grad_norm)
            self.optimizer.step()
        self.model.eval()
        self.version += 1
        tokens = sum(b.tokens for b in batches)
        elapsed = time.perf_counter() - start
        stats |= {
            "train/samples": float(len(samples)),
            "train/tokens": float(tokens),
            "train/tokens_per_s": tokens / max(elapsed, 1e-9),
            "train/seconds": elapsed,
        }
        return stats | learner_state.lr_metric(self.settings, lr)

    def _accumulate(self, batches: list[MicroBatch]) -> dict[str, float]:
        return self.scorer.accumulate(batches).metrics()

    def score(self, samples: list[Sample]) -> list[list[float]]:
        """Trainer log-probs of every model token of each sample (the sync probe, tests)."""
        out: list[list[float]] = []
        with torch.no_grad():
            for sample in samples:
                batch = self._micro_batches([sample])[0]
                out.append(self.scorer.token_logprobs(batch)[0].tolist())
        return out

    # ------------------------------------------------------------------ batching
    def _micro_batches(self, samples: list[Sample]) -> list[MicroBatch]:
        batches = learner_batches(samples, self.adapters, self.settings,
                                  share_prefixes=self.share_prefixes)
        return [batch.to(self.device) for batch in batches]

    @property
    def share_prefixes(self) -> bool:
        return self.settings.share_prefix


def logit_transform(model, model_path: Path | str) -> LogitTransform:
    """How ``model`` turns its last hidden state into logits, checked against its own forward.

    The learner computes log-probs from hidden states in chunks instead of calling the model's
    head, so it must reproduce whatever the head does beyond ``hidden @ lm_head.weight.T``.
    Known extras are read from the config (the ``lm_head`` bias is read at every step); a probe
    on a few tokens then compares the result with ``model(...).logits``, and a model whose
    logits still differ (an unknown head) is refused in one line rather than trained on
    log-probs the engine never samples from.
    """
    text = model.config.get_text_config(decoder=True)
    scale = float(getattr(text, "logit_scale", None) or 1.0)  # Cohere: logits · logit_scale
    if getattr(text, "logits_scaling", None):  # Granite: logits / logits_scaling
        scale /= float(text.logits_scaling)
    softcap = getattr(text, "final_logit_softcapping", None)  # Gemma 2/3
    transform = LogitTransform(scale=scale, softcap=float(softcap) if softcap else None)
    gap = _logit_probe_gap(model, transform)
    tolerance = 1e-3 if next(model.parameters()).dtype == torch.float32 else 5e-2
    if gap > tolerance:
        raise UserError(
            f"model {model_path}: its logits are not reproduced from its hidden states "
            f"(log-probs differ by {gap:.3g} on a probe; {type(model).__name__} may apply a "
            "logit transform the learner does not know), so it would train on other "
            "log-probs than the engine samples"
        )
    return transform


def _logit_probe_gap(model, transform: LogitTransform, length: int = 8) -> float:
    """Largest |log-prob difference| between the model's forward and ``chunked_logprobs`` on a
    few positions, at each position for the likeliest, the least likely and two fixed tokens
    (a scale or a cap moves the tails as well as the top)."""
    head = model.get_output_embeddings()
    vocab = head.weight.shape[0]
    ids = (torch.arange(1, length + 1) * 37 % vocab)[None].to(head.weight.device)
    with torch.no_grad():
        full = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)  # [L, V]
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state[0]  # [L, H]
        fixed = torch.tensor([0, vocab - 1], device=full.device).expand(length, 2)
        targets = torch.cat(
            [full.argmax(-1, keepdim=True), full.argmin(-1, keepdim=True), fixed], 1
        )
        ours, _ = chunked_logprobs(
            hidden.repeat_interleave(targets.shape[1], 0),
            head.weight,
            targets.flatten(),
            bias=getattr(head, "bias", None),
            transform=transform,
        )
    return float((ours - full.gather(1, targets).flatten()).abs().max())


def naive_logprobs(model, input_ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """Baseline for ``selfplay bench learner``: the full [B, T, V] log-softmax at once."""
    logits = model(input_ids=input_ids, attention_mask=attention).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    return logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
