"""The ``Learner`` over N FSDP2 ranks, the same numbers as the one-process ``LocalLearner``
(``train.parallel: {ranks: N, strategy: fsdp2}``). The ranks (``training/rank_worker.py``) are Ray
actors, or the processes torchrun started (``training/placement.py``).

The driver keeps what makes the numbers the one-process learner's: it cuts the step's samples
into micro-batches with every normaliser computed over the whole batch (Dr. GRPO's constant,
token-mean's token count, group coefficients, ADPO scales and ε_high, TIS reference), then deals
the micro-batches to the ranks. Ranks sum their gradients (reduce-scatter with no division),
clip by the global norm, and step their optimizer shards. Samples of one group may land on
different ranks. FSDP collectives must match across ranks, so every rank runs the same number of
forward and backward passes (padding passes have weight 0), every micro-batch runs its prompt
in full (no shared-prefix pass, which would run the layers twice), and a parameter a rank did
not use still takes part in the reduction with a zero gradient; parameters no rank used this
step (another role's adapter) get no gradient at all, so AdamW leaves them alone, as on one
process.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from selfplay.core.errors import UserError
from selfplay.training import state as learner_state
from selfplay.training.base import Learner, LearnerSettings
from selfplay.training.batches import MicroBatch, learner_batches
from selfplay.training.placement import RayRanks, TorchrunRanks, launched_by_torchrun
from selfplay.training.rank_worker import STRATEGIES, ParallelSettings
from selfplay.training.scoring import Totals
from selfplay.types import Sample


def deal(batches: list[MicroBatch], ranks: int) -> tuple[list[list[MicroBatch]], list[list[float]]]:
    """Micro-batches dealt to ranks, largest first to the least loaded, each rank padded to the
    same number of passes (a copy of one of its own batches, or of the smallest batch, with
    weight 0)."""
    shares: list[list[MicroBatch]] = [[] for _ in range(ranks)]
    load = [0] * ranks
    for batch in sorted(batches, key=lambda b: -b.input_ids.numel()):
        rank = min(range(ranks), key=lambda r: (load[r], r))
        shares[rank].append(batch)
        load[rank] += batch.input_ids.numel()
    passes = max(len(share) for share in shares)
    smallest = min(batches, key=lambda b: b.input_ids.numel())
    weights = []
    for share in shares:
        weights.append([1.0] * len(share) + [0.0] * (passes - len(share)))
        share += [share[0] if share else smallest] * (passes - len(share))
    return shares, weights


class ShardedLearner(Learner):
    """The ``Learner`` over ``parallel.ranks`` FSDP2 ranks (Ray actors or torchrun processes)."""

    def __init__(
        self,
        model_path: Path,
        settings: LearnerSettings,
        adapters: list[str] | None,
        parallel: ParallelSettings,
        where: type[RayRanks] | type[TorchrunRanks] | None = None,
    ) -> None:
        """``where``: the ranks' kind (None: torchrun's processes when torchrun started this
        one with several, else Ray actors)."""
        if parallel.strategy not in STRATEGIES:
            raise UserError(f"train.parallel.strategy {parallel.strategy!r} is not one of "
                            f"{', '.join(STRATEGIES)}")
        self.settings = settings
        self.adapters = list(adapters or []) if settings.lora else []
        self.ranks = parallel.ranks
        where = where or (TorchrunRanks if launched_by_torchrun() else RayRanks)
        self.group = where(model_path, self.settings, self.adapters, parallel)
        torch.set_rng_state(self._all("ready")[0])
        self.version = 0

    def _all(self, method: str, *args, per_rank: list[tuple] | None = None) -> list:
        """``method`` on every rank (a collective), their results in rank order."""
        return self.group.call(method, per_rank or [args] * self.ranks)

    # ------------------------------------------------------------------ training
    def step(self, samples: list[Sample]) -> dict[str, float]:
        start = time.perf_counter()
        if not samples:
            self.version += 1
            return {"train/samples": 0.0}
        batches = learner_batches(samples, self.adapters, self.settings,
                                  share_prefixes=self.settings.share_prefix)
        shares, weights = deal(batches, self.ranks)
        used = sorted({b.adapter for b in batches})
        lr = learner_state.scheduled_lr(self.settings, self.version)
        results = self._all("step", per_rank=[(s, w, used, lr)
                                              for s, w in zip(shares, weights, strict=True)])
        totals = Totals()
        for result in results:
            totals = totals.add(Totals(result["sums"], result["mismatch_max"]))
        self.version += 1
        tokens = sum(b.tokens for b in batches)
        elapsed = time.perf_counter() - start
        return totals.metrics() | {
            "train/grad_norm": results[0]["grad_norm"],
            "train/samples": float(len(samples)),
            "train/tokens": float(tokens),
            "train/tokens_per_s": tokens / max(elapsed, 1e-9),
            "train/seconds": elapsed,
        } | learner_state.lr_metric(self.settings, lr)

    def score(self, samples: list[Sample]) -> list[list[float]]:
        """Trainer log-probs of every model token of each sample (rank 0's answer; every rank
        runs the same passes)."""
        batches = [
            learner_batches([s], self.adapters, self.settings, share_prefixes=False,
                            micro_batch_size=1)[0]
            for s in samples
        ]
        return self._all("score", batches)[0]

    # ------------------------------------------------------------------ weights and state
    def adapter_weights(self, adapter: str) -> dict[str, torch.Tensor]:
        from selfplay.training.sync import adapter_weights_from_trainable

        return adapter_weights_from_trainable(self.trainable_weights(), adapter)

    def full_weights(self) -> dict[str, torch.Tensor]:
        return self._all("full_state", False)[0]

    def trainable_weights(self) -> dict[str, torch.Tensor]:
        return self._all("full_state", True)[0]

    def write_weights(self, adapter: str | None, path: Path) -> None:
        self._all("write_weights", adapter, str(path))

    def nccl_open(self, host: str, port: int, world_size: int) -> None:
        self._all("nccl_open", host, port, world_size)

    def nccl_plan(self, bucket_bytes: int) -> list[dict]:
        return self._all("nccl_plan", bucket_bytes)[0]

    def nccl_send(self) -> int:
        return self._all("nccl_send")[0]

    def memory(self) -> list[float]:
        """Each rank's peak bytes (``selfplay bench learner --ranks``)."""
        return self._all("memory")

    def nccl_address(self) -> tuple[str, int]:
        """Rank 0's address: the trainer end of the NCCL group lives there."""
        return self._all("address")[0]

    def save(self, folder: Path) -> None:
        self._all("save", str(folder), self.version)

    def load(self, folder: Path) -> None:
        self.version = self._all("load", str(folder))[0]

    def close(self) -> None:
        """Stop the ranks (Ray: their actors and placement group go)."""
        self.group.close()
