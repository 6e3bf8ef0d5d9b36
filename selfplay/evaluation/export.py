"""``selfplay export RUN --out DIR``: a run's trained policy as folders that Hugging Face
libraries load with no selfplay installed.

- LoRA runs: one folder per adapter (``DIR/<adapter>/``, a role's weights), each a PEFT
  adapter (``adapter_config.json`` + ``adapter_model.safetensors``) over the run's base model:
  ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), DIR/<adapter>)``.
  With ``--merge``, each folder is instead the base with that adapter merged in, and the
  tokenizer: ``AutoModelForCausalLM.from_pretrained(DIR/<adapter>)``.
- Full fine-tuning: one folder, ``DIR/policy/``, the whole model and its tokenizer.

The weights come from the checkpoint of ``--step`` (default: the latest), full or archived,
one-process or sharded (both save the same parameter names).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from selfplay.analysis.rundata import RunData
from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.running.checkpoint import trainable_weights
from selfplay.running.runner import load_run_config

FULL_FOLDER = "policy"  # the folder name of a fully fine-tuned policy


def export(run_dir: Path, out: Path, step: int | None = None, merge: bool = False) -> list[Path]:
    """Write the run's policy at ``step`` under ``out``; returns the folders written."""
    config = load_run_config(run_dir, logging=False)
    step, checkpoint = _checkpoint(RunData.open(run_dir), step)
    trainable = trainable_weights(checkpoint)
    out.mkdir(parents=True, exist_ok=True)
    if config.train.finetune == "lora":
        folders = [_export_adapter(config, trainable, name, out / name, merge)
                   for name in config.adapters()]
    else:
        folders = [_export_full(config, trainable, out / FULL_FOLDER)]
    for folder in folders:
        _write_provenance(folder, run_dir, step, config, merge)
    return folders


def _checkpoint(run: RunData, step: int | None) -> tuple[int, Path]:
    saved = run.checkpoints()
    if not saved:
        raise UserError(f"{run.path} has no checkpoint to export (checkpoints/ is empty)")
    if step is None:
        return saved[-1]
    for found, path in saved:
        if found == step:
            return found, path
    steps = ", ".join(str(s) for s, _ in saved)
    raise UserError(f"{run.path} has no checkpoint of step {step} (saved: {steps})")


def _base_model(config: ExperimentConfig):
    from selfplay.engines.models import load_causal_lm, resolve_model_path

    path = resolve_model_path(config.model.path)
    return path, load_causal_lm(path, config.model.dtype)


def _load_into(model: torch.nn.Module, weights: dict[str, torch.Tensor], what: str) -> None:
    """Copy ``weights`` into ``model`` by name; every name must be one of its parameters."""
    params = dict(model.named_parameters())
    missing = [name for name in weights if name not in params]
    if missing:
        raise UserError(f"the checkpoint's {what} weights do not fit the run's model "
                        f"(e.g. {missing[0]}): was the config edited after the run?")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value.to(params[name].dtype))


def _export_adapter(config: ExperimentConfig, trainable: dict, adapter: str, folder: Path,
                    merge: bool) -> Path:
    from selfplay.engines.lora import attach_adapters, lora_spec

    base_path, base = _base_model(config)
    model = attach_adapters(base, lora_spec(config), [adapter])
    ours = {name: value for name, value in trainable.items() if f".{adapter}." in name
            or name.endswith(f".{adapter}")}
    if not ours:
        raise UserError(f"the checkpoint holds no weights of adapter {adapter!r}")
    _load_into(model, ours, f"adapter {adapter!r}")
    if merge:
        merged = model.merge_and_unload()
        merged.save_pretrained(folder)
        _save_tokenizer(base_path, folder)
        return folder
    model.peft_config[adapter].base_model_name_or_path = str(base_path)
    # peft writes a non-default adapter to a sub-folder of its name (this folder), and its model
    # card to the folder above: the card goes beside the adapter it describes
    card = folder.parent / "README.md"
    card_was_there = card.exists()
    model.save_pretrained(folder.parent, selected_adapters=[adapter])
    moved = ["adapter_config.json", "adapter_model.safetensors"] if adapter == "default" else []
    if not card_was_there and card.exists():
        moved.append("README.md")
    folder.mkdir(exist_ok=True)
    for name in moved:
        (folder.parent / name).replace(folder / name)
    return folder


def _export_full(config: ExperimentConfig, trainable: dict, folder: Path) -> Path:
    base_path, model = _base_model(config)
    _load_into(model, trainable, "policy")
    model.save_pretrained(folder)
    _save_tokenizer(base_path, folder)
    return folder


def _save_tokenizer(base_path: Path, folder: Path) -> None:
    from selfplay.engines.models import load_tokenizer

    load_tokenizer(base_path).save_pretrained(folder)


def _write_provenance(folder: Path, run_dir: Path, step: int, config: ExperimentConfig,
                      merge: bool) -> None:
    """Where the weights came from, beside them (a model card is the user's to write)."""
    record = {"run": str(run_dir.resolve()), "experiment": config.name, "step": step,
              "base_model": config.model.path, "finetune": config.train.finetune,
              "merged": merge}
    (folder / "selfplay_export.json").write_text(json.dumps(record, indent=2) + "\n")
