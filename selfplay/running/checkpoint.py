"""Atomic, resumable checkpoints: learner weights and optimizer, RNG states, loop state.

``checkpoints/step-N/`` holds everything needed to start step N: ``state.pt`` (loop, snapshots,
RNG) and ``learner/`` (trainable weights, optimizer, version: a ``torch.distributed.checkpoint``
folder written by every rank, so a run resumes on any number of ranks). It is written into a
hidden temporary folder and renamed into place, then ``checkpoints/latest`` is replaced
atomically, so a crash at any moment leaves the previous checkpoint intact; a write that fails
(a full disk) removes its temporary folder, so nothing half-written stays behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from selfplay.training import state as learner_state

LEARNER = "learner"  # the learner's folder inside a checkpoint


def write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_torch(value, path: Path) -> None:
    """``torch.save`` through Python's file I/O: torch's own writer reports a full disk as an
    opaque ``RuntimeError``, this an ``OSError`` with ``ENOSPC`` (the runner says "disk full")."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    with path.open("wb") as handle:
        handle.write(buffer.getbuffer())


@contextlib.contextmanager
def temporary_folder(parent: Path) -> Iterator[Path]:
    """A hidden folder in ``parent`` to write a checkpoint into; removed if the writing fails."""
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=".tmp-"))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def rng_state() -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def restore_rng(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


class Checkpointer:
    """``keep`` full checkpoints for resuming; with ``archive_every`` N, also the trainable
    weights alone of every N-th step under ``checkpoints/archive/step-N/`` (never pruned; a few
    MB each with LoRA) for ``selfplay crossplay`` and ``selfplay evaluate --step``."""

    def __init__(self, run_dir: Path, keep: int = 2, archive_every: int = 0) -> None:
        self.root = run_dir / "checkpoints"
        self.root.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.archive_every = archive_every

    def save(self, next_step: int, state: dict, learner=None) -> Path:
        """``state`` (everything but the learner) and, with ``learner``, its own folder."""
        target = self.root / f"step-{next_step:06d}"
        with temporary_folder(self.root) as tmp:
            save_torch(state, tmp / "state.pt")
            if learner is not None:
                learner.save(tmp / LEARNER)
            (tmp / "meta.json").write_text(json.dumps({"next_step": next_step}))
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        write_text_atomic(self.root / "latest", target.name)
        if learner is not None and self.archive_every and next_step % self.archive_every == 0:
            self.archive(next_step, learner.trainable_weights(), learner.version)
        self._prune()
        return target

    def archive(self, next_step: int, trainable: dict, version: int) -> Path:
        """The learner's trainable weights (LoRA adapters, or the whole model when fully
        fine-tuned) and version, without optimizer, RNG or loop state."""
        folder = self.root / "archive"
        folder.mkdir(exist_ok=True)
        target = folder / f"step-{next_step:06d}"
        with temporary_folder(folder) as tmp:
            save_torch({"learner": {"trainable": trainable, "version": version}},
                       tmp / "state.pt")
            (tmp / "meta.json").write_text(json.dumps({"next_step": next_step, "archive": True}))
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        return target

    def latest(self) -> Path | None:
        pointer = self.root / "latest"
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        return path if (path / "state.pt").exists() else None

    def load(self) -> tuple[int, dict, Path] | None:
        """(the step to start, the saved state, the checkpoint folder) of the latest one."""
        path = self.latest()
        if path is None:
            return None
        meta = json.loads((path / "meta.json").read_text())
        return meta["next_step"], torch.load(path / "state.pt", weights_only=False), path

    def _prune(self) -> None:
        steps = sorted(p for p in self.root.glob("step-*") if p.is_dir())
        for old in steps[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        for tmp in [*self.root.glob(".tmp-*"), *self.root.glob("archive/.tmp-*")]:
            shutil.rmtree(tmp, ignore_errors=True)


def trainable_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The trainable weights of a full or archived checkpoint folder, by parameter name."""
    checkpoint = Path(checkpoint)
    if (checkpoint / LEARNER).is_dir():
        return learner_state.read_weights(checkpoint / LEARNER)
    return torch.load(checkpoint / "state.pt", weights_only=False)["learner"]["trainable"]
