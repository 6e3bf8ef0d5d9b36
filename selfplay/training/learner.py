"""The learner: LoRA (one shared adapter or one per role) or full fine-tuning on one base model.

One ``step(samples)`` is one optimizer update (``epochs`` > 1 repeats it PPO-style on the same
samples against the log-probs of the first pass). Log-probs are computed from the decoder's
hidden states in chunks (``losses.chunked_logprobs``) so the batch's full-vocabulary
log-softmax never exists at once; each token is scored under the distribution the engine drew
it from (its temperature, its top-p nucleus renormalised, and the model's own logit head: bias,
scaling, soft-capping; ``logit_transform`` refuses a head it cannot reproduce). Samples of one
adapter share a micro-batch (peft trains one active adapter per forward); coefficients are fixed
over the whole batch first, so gradient accumulation over micro-batches is exact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from selfplay.core.errors import UserError
from selfplay.engines.hf import LoraSpec, attach_adapters
from selfplay.engines.models import load_causal_lm
from selfplay.rl.losses import (
    Aggregation,
    LogitTransform,
    Objective,
    chunked_logprobs,
    tis_weights,
    token_coefficients,
    token_losses,
)
from selfplay.types import Sample


@dataclass
class LearnerSettings:
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    objective: Objective = "ppo"
    aggregation: Aggregation = "seq-mean-token-sum-norm"
    eps_low: float = 0.2
    eps_high: float = 0.28
    cispo_eps_max: float = 5.0
    tis_cap: float | None = 2.0
    epochs: int = 1
    micro_batch_size: int = 8
    logprob_chunk_size: int = 1024
    max_new_tokens: int = 64  # Dr. GRPO's constant normaliser
    dtype: str = "float32"
    gradient_checkpointing: bool = False
    share_prefix: bool = True  # run a group's shared prompt once per micro-batch
    lora: LoraSpec | None = field(default_factory=LoraSpec)  # None → full fine-tuning


@dataclass
class _MicroBatch:
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
    # Shared-prefix batches (a GRPO group: one prompt, several completions): the prompt runs
    # once and its KV cache is expanded to every row; input_ids then holds completions only.
    prefix_ids: torch.Tensor | None = None  # [1, P]


class Learner:
    def __init__(
        self,
        model_path: Path,
        settings: LearnerSettings,
        adapters: list[str] | None = None,
        device: str | None = None,
    ) -> None:
        self.settings = settings
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model = load_causal_lm(model_path, settings.dtype)
        self.logit_transform = logit_transform(model, model_path)
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
        self._mark_trainable()
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=settings.lr,
            weight_decay=settings.weight_decay,
        )
        self.version = 0  # number of optimizer steps taken

    # ------------------------------------------------------------------ weights
    def _mark_trainable(self) -> None:
        """All adapters trainable (peft's set_adapter would freeze the inactive ones)."""
        if not self.adapters:
            for param in self.model.parameters():
                param.requires_grad_(True)
            return
        for name, param in self.model.named_parameters():
            param.requires_grad_(any(f".{a}." in name for a in self.adapters) and "lora_" in name)

    def adapter_weights(self, adapter: str) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.model, adapter_name=adapter)
        return {k: v.detach().clone() for k, v in state.items()}

    def full_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict:
        trainable = {
            n: p.detach().cpu() for n, p in self.model.named_parameters() if p.requires_grad
        }
        return {
            "trainable": trainable,
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
            with torch.no_grad():
                for batch in batches:
                    batch.logp_old = self._token_logprobs(batch)[0].detach()
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
        tokens = sum(int(b.targets.numel()) for b in batches)
        elapsed = time.perf_counter() - start
        stats |= {
            "train/samples": float(len(samples)),
            "train/tokens": float(tokens),
            "train/tokens_per_s": tokens / max(elapsed, 1e-9),
            "train/seconds": elapsed,
        }
        return stats

    def _accumulate(self, batches: list[_MicroBatch]) -> dict[str, float]:
        totals = {
            "loss": 0.0,
            "clip": 0.0,
            "entropy": 0.0,
            "mismatch_k1": 0.0,
            "mismatch_abs": 0.0,
            "tis": 0.0,
        }
        mismatch_max, n_tokens = 0.0, 0
        for batch in batches:
            logp, entropy = self._token_logprobs(batch)
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
            weights = tis_weights(logp_old, batch.engine_logprobs, self.settings.tis_cap)
            loss = (losses * weights * batch.coefficients).sum()
            loss.backward()
            diff = (batch.engine_logprobs - logp_old).detach()
            n = int(logp.numel())
            n_tokens += n
            totals["loss"] += loss.item()
            totals["clip"] += float(clipped.sum())
            totals["entropy"] += float(entropy.sum())
            totals["mismatch_k1"] += float(diff.sum())
            totals["mismatch_abs"] += float(diff.abs().sum())
            totals["tis"] += float(weights.sum())
            mismatch_max = max(mismatch_max, float(diff.abs().max()))
        per_token = max(n_tokens, 1)
        return {
            "train/loss": totals["loss"],
            "train/clip_frac": totals["clip"] / per_token,
            "train/entropy": totals["entropy"] / per_token,
            # E_engine[log π_engine − log π_trainer] estimates KL(engine ‖ trainer)
            "train/mismatch_kl": totals["mismatch_k1"] / per_token,
            "train/mismatch_abs_mean": totals["mismatch_abs"] / per_token,
            "train/mismatch_abs_max": mismatch_max,
            "train/tis_weight_mean": totals["tis"] / per_token,
        }

    def _token_logprobs(self, batch: _MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        if self.adapters:
            self.model.set_adapter(batch.adapter)
            self._mark_trainable()
        core = self.model.get_base_model() if self.adapters else self.model
        hidden = self._predicting_hidden(core.get_decoder(), batch)
        selected = hidden[batch.rows, batch.cols]
        head = core.get_output_embeddings()
        # the distribution the engine sampled each token from: the model's own logits
        # (bias, scaling, soft-capping), that token's temperature and top-p nucleus
        return chunked_logprobs(
            selected,
            head.weight,
            batch.targets,
            batch.temperature,
            self.settings.logprob_chunk_size,
            bias=getattr(head, "bias", None),
            top_p=batch.top_p,
            transform=self.logit_transform,
        )

    def _predicting_hidden(self, decoder, batch: _MicroBatch) -> torch.Tensor:
        """Hidden states indexed so that ``[row, col]`` predicts the token ``batch`` scores."""
        if batch.prefix_ids is None:
            positions = (batch.attention.cumsum(-1) - 1).clamp(min=0)
            return decoder(
                input_ids=batch.input_ids, attention_mask=batch.attention, position_ids=positions
            ).last_hidden_state
        from transformers import DynamicCache

        rows, width = batch.input_ids.shape
        prefix_len = batch.prefix_ids.shape[1]
        cache = DynamicCache()
        prefix = decoder(
            input_ids=batch.prefix_ids,
            position_ids=torch.arange(prefix_len, device=self.device)[None],
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state  # [1, P, H]
        # Autograd flows through the expanded cache, so every row's gradient reaches the prompt
        # computation exactly as if the prompt had been run once per row.
        cache.batch_repeat_interleave(rows)
        attention = torch.cat([batch.attention.new_ones((rows, prefix_len)), batch.attention], 1)
        positions = prefix_len + torch.arange(width, device=self.device)[None].expand(rows, -1)
        suffix = decoder(
            input_ids=batch.input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state  # [B, S, H]
        first = prefix[:, -1:].expand(rows, 1, prefix.shape[-1])  # predicts completion token 0
        return torch.cat([first, suffix[:, :-1]], dim=1)

    def score(self, samples: list[Sample]) -> list[list[float]]:
        """Trainer log-probs of every model token of each sample (for tests and diagnostics)."""
        out: list[list[float]] = []
        with torch.no_grad():
            for sample in samples:
                batch = self._micro_batches([sample])[0]
                out.append(self._token_logprobs(batch)[0].tolist())
        return out

    # ------------------------------------------------------------------ batching
    def _micro_batches(self, samples: list[Sample]) -> list[_MicroBatch]:
        coefficients = token_coefficients(
            samples, self.settings.aggregation, self.settings.max_new_tokens
        )
        by_adapter: dict[str, list[tuple[Sample, float]]] = {}
        for sample, c in zip(samples, coefficients, strict=True):
            adapter = (
                sample.turn.adapter
                if sample.turn.adapter in self.adapters
                else (self.adapters[0] if self.adapters else "full")
            )
            by_adapter.setdefault(adapter, []).append((sample, c))
        batches = []
        size = self.settings.micro_batch_size
        for adapter, items in by_adapter.items():
            by_prompt: dict[tuple[int, ...], list[tuple[Sample, float]]] = {}
            for item in items:
                by_prompt.setdefault(tuple(item[0].turn.prompt_ids), []).append(item)
            singles = []
            for group in by_prompt.values():
                if len(group) < 2 or not self.share_prefixes:
                    singles += group
                    continue
                for start in range(0, len(group), size):
                    batches.append(self._collate(adapter, group[start : start + size], True))
            singles.sort(
                key=lambda item: len(item[0].turn.prompt_ids) + len(item[0].turn.completion_ids)
            )
            for start in range(0, len(singles), size):
                batches.append(self._collate(adapter, singles[start : start + size]))
        return batches

    @property
    def share_prefixes(self) -> bool:
        # HF disables the KV cache under gradient checkpointing, which the prefix path needs.
        return self.settings.share_prefix and not self.settings.gradient_checkpointing

    def _collate(
        self, adapter: str, items: list[tuple[Sample, float]], shared_prefix: bool = False
    ) -> _MicroBatch:
        def row_ids(turn) -> list[int]:
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
            for k, (token, mask) in enumerate(
                zip(turn.completion_ids, turn.loss_mask, strict=True)
            ):
                if not mask:
                    continue  # tool output: conditioned on, never trained on
                rows.append(row)
                # the hidden state that predicts completion token k
                cols.append(k if shared_prefix else len(turn.prompt_ids) + k - 1)
                targets.append(token)
                adv.append(sample.advantage * sample.advantage_scale)
                coef.append(c)
                eps.append(
                    sample.eps_high if sample.eps_high is not None else self.settings.eps_high
                )
                engine.append(turn.engine_logprobs[k])
                # greedy turns (T = 0) carry T = 1 log-probs of the untruncated distribution
                greedy = turn.temperature <= 0
                temp.append(1.0 if greedy else turn.temperature)
                top_p.append(1.0 if greedy else turn.top_p)
        d = self.device
        f32 = {"dtype": torch.float32, "device": d}
        return _MicroBatch(
            adapter=adapter,
            input_ids=input_ids.to(d),
            attention=attention.to(d),
            rows=torch.tensor(rows, dtype=torch.long, device=d),
            cols=torch.tensor(cols, dtype=torch.long, device=d),
            targets=torch.tensor(targets, dtype=torch.long, device=d),
            advantages=torch.tensor(adv, **f32),
            coefficients=torch.tensor(coef, **f32),
            eps_high=torch.tensor(eps, **f32),
            engine_logprobs=torch.tensor(engine, **f32),
            temperature=torch.tensor(temp, **f32),
            top_p=torch.tensor(top_p, **f32),
            prefix_ids=torch.tensor([items[0][0].turn.prompt_ids], device=d)
            if shared_prefix
            else None,
        )


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
