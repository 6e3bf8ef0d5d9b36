"""``selfplay bench sync``: seconds and bytes per weight sync for each transport that runs on this
machine, LoRA and full fine-tuning, and the probe check's own cost.

The baseline, measured in the same run, is ``inprocess`` (the engine in the driver's process
takes the tensors in memory). ``object_store`` puts them in Ray's object store for a pool of
one replica; ``filesystem`` writes safetensors files and the ``STABLE`` marker, and the engine
(in this process, and in a Ray replica) reads them back. ``nccl`` needs GPUs: not measured here.
Each figure is the median of ``syncs`` syncs after one warm-up.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

MIB = 2**20
CASES = (  # (transport, where the engine is)
    ("inprocess", "local"),
    ("filesystem", "local"),
    ("object_store", "ray"),
    ("filesystem", "ray"),
)


def _config(model: str, finetune: str, cluster: str):
    from selfplay.loops import validate

    return validate({
        "name": f"bench-sync-{finetune}", "loop": "rlvr", "model": {"path": model},
        "train": {"finetune": finetune, "lora": {"r": 16, "alpha": 32}},
        "cluster": {"backend": cluster, "replicas": 1},
        "roles": {"solver": {"prompt": "solver_terse"}},
        "rlvr": {"tasks": [{"name": "chain_sum"}]},
        "logging": {"wandb": "disabled", "progress": False},
    }, "bench")


def _measure(model: str, finetune: str, transport: str, cluster: str, syncs: int) -> dict:
    from selfplay.engines.models import resolve_model_path, tokenizer_for
    from selfplay.engines.policy import BatchingPolicy
    from selfplay.running.runner import build_engine
    from selfplay.training.learner import LocalLearner
    from selfplay.training.make import learner_settings
    from selfplay.training.sync import Probe, choose_transport, probe_gap

    config = _config(model, finetune, cluster)
    path = resolve_model_path(model)
    learner = LocalLearner(path, learner_settings(config), config.adapters())
    engine = build_engine(config, path)
    policy = BatchingPolicy(engine)
    probe = Probe.of(tokenizer_for(model), tokens=8)
    seconds, probes, moved = [], [], 0
    with tempfile.TemporaryDirectory() as folder:
        sender = choose_transport(transport, engine, Path(folder), learner, 256 * MIB)
        for _ in range(syncs + 1):  # the first one warms up
            learner.version += 1
            start = time.perf_counter()
            moved = sender.send(learner, engine)
            seconds.append(time.perf_counter() - start)
            start = time.perf_counter()
            gap = probe_gap(learner, engine, policy, probe)
            probes.append(time.perf_counter() - start)
            if gap > 1e-3:
                raise RuntimeError(f"{transport}: the sync did not reach the engine ({gap:.3g})")
    engine.close()
    return {"finetune": finetune, "transport": transport, "engine": cluster, "bytes": moved,
            "seconds": statistics.median(seconds[1:]), "probe": statistics.median(probes[1:])}


def bench_sync(model: str = "embedded", syncs: int = 3,
               finetunes: tuple[str, ...] = ("lora", "full")) -> list[dict]:
    rows = [_measure(model, finetune, transport, cluster, syncs)
            for finetune in finetunes for transport, cluster in CASES]
    table = Table(title=f"weight sync on {model}: median of {syncs} syncs")
    for column in ("fine-tuning", "transport", "engine", "MiB", "s/sync", "vs inprocess",
                   "MiB/s", "probe s"):
        table.add_column(column, justify="right")
    for row in rows:
        base = next(r for r in rows if r["finetune"] == row["finetune"]
                    and r["transport"] == "inprocess")
        table.add_row(row["finetune"], row["transport"],
                      "Ray replica" if row["engine"] == "ray" else "this process",
                      f"{row['bytes'] / MIB:.1f}", f"{row['seconds']:.3f}",
                      f"{row['seconds'] / base['seconds']:.2f}x",
                      f"{row['bytes'] / MIB / max(row['seconds'], 1e-9):.0f}",
                      f"{row['probe']:.3f}")
    Console().print(table)
    return rows
