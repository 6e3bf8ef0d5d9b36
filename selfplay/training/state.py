"""Learner state on disk: trainable weights, optimizer and version as a sharded
``torch.distributed.checkpoint`` folder, written and read the same way by the one-process learner
and by N FSDP2 ranks, so a run saved on N ranks resumes on M (DCP reshards on load).

Only trainable parameters are saved (LoRA: the adapters; the frozen base is the model itself).
The optimizer's state is created for every trainable parameter when the optimizer is made (zero
moments, step 0: what AdamW would create lazily at a parameter's first update, so the numbers
are the same), so every checkpoint holds the same keys whatever was trained before it.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

OPTIONS = StateDictOptions(ignore_frozen_params=True)
# loading only the trainable part: the frozen weights are the model's own, so not strict
LOAD_OPTIONS = StateDictOptions(ignore_frozen_params=True, strict=False)
META = "learner.json"


def adamw(
    model: torch.nn.Module, lr: float, weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, its state created up front."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)
    for param in params:
        optimizer.state[param] = {
            "step": torch.tensor(0.0, dtype=_scalar_dtype()),
            "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
        }
    return optimizer


def scheduled_lr(settings, version: int) -> float:
    """The learning rate of the update after ``version`` updates: ``settings.lr`` decayed
    (``lr_schedule``) to ``lr * lr_final`` at update ``schedule_steps - 1``, held there after.
    A function of the version alone, so a resumed run continues the same schedule."""
    if settings.lr_schedule == "constant":
        return settings.lr
    progress = min(version / max(settings.schedule_steps - 1, 1), 1.0)
    if settings.lr_schedule == "linear":
        share = 1.0 - progress
    else:  # cosine
        share = 0.5 * (1.0 + math.cos(math.pi * progress))
    return settings.lr * (settings.lr_final + (1.0 - settings.lr_final) * share)


def lr_metric(settings, lr: float) -> dict[str, float]:
    """``train/lr`` when a schedule moves it (a constant lr is in the run's config already)."""
    return {} if settings.lr_schedule == "constant" else {"train/lr": lr}


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def _scalar_dtype() -> torch.dtype:
    """The dtype AdamW gives its ``step`` counter (float32 unless the default is float64)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


@contextlib.contextmanager
def _quiet():
    """DCP warns that one process without a process group saves alone: that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _single() -> bool:
    """One process, no process group: DCP reads and writes the whole state itself."""
    return not dist.is_initialized()


def _is_writer() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _state(model: torch.nn.Module, optimizer) -> dict:
    """{"model": trainable weights, "optim": optimizer state}, both by parameter name. A tied
    weight appears once (``lm_head.weight`` tied to a frozen embedding is not trainable, though
    ``get_state_dict`` would keep it under its second name)."""
    model_state, optim_state = get_state_dict(model, optimizer, options=OPTIONS)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    return {"model": {k: v for k, v in model_state.items() if k in trainable}, "optim": optim_state}


def save(model: torch.nn.Module, optimizer, version: int, folder: Path) -> None:
    """Every rank calls this with its shards (one process: the whole state)."""
    folder = Path(folder)
    with _quiet():
        dcp.save(_state(model, optimizer), checkpoint_id=str(folder), no_dist=_single())
    if _is_writer():
        (folder / META).write_text(json.dumps({"version": version}))


def load(model: torch.nn.Module, optimizer, folder: Path) -> int:
    """Load ``folder`` into this process's model and optimizer (shards resharded to this
    world size); returns the learner version it was saved at."""
    folder = Path(folder)
    state = _state(model, optimizer)
    with _quiet():
        dcp.load(state, checkpoint_id=str(folder), no_dist=_single())
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=LOAD_OPTIONS,
    )
    return int(json.loads((folder / META).read_text())["version"])


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The trainable weights a learner folder holds, as full CPU tensors by parameter name
    (no model, no process group needed: for evaluation, export and cross-play)."""
    reader = dcp.FileSystemReader(str(folder))
    metadata = reader.read_metadata().state_dict_metadata
    wanted = {
        key.removeprefix("model."): torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.items()
        if key.startswith("model.") and hasattr(meta, "size")
    }
    state = {"model": wanted}
    with _quiet():
        dcp.load(state, storage_reader=reader, no_dist=True)
    return state["model"]

