"""How the learner's new weights reach the engines after a step, and the check that they did:
the whole weight sync on the learner's side (vLLM's side: ``engines/vllm_sync.py``,
``engines/buckets.py``).

One interface, ``WeightTransport.send(learner, engine)``, four transports chosen by where the
engines are (``sync.transport``, docs/scale.md):

- ``inprocess``: the engine lives in the driver's process (the ``hf`` engine, an in-process vLLM);
  tensors are handed over in memory;
- ``object_store``: a Ray engine pool; the tensors are put in Ray's object store once and every
  replica fetches them (``RayEnginePool.load_weights``);
- ``filesystem``: safetensors files and a ``STABLE`` marker in a folder (prime-rl's transport):
  works across machines that share the folder, and is the default for engines on other
  machines; the sharded learner's rank 0 writes the files itself;
- ``nccl``: a broadcast from the trainer to vLLM's workers on other GPUs, in per-layer buckets
  packed by dtype (``engines/buckets.py``); full weights only (LoRA moves megabytes through the
  others), and only with CUDA: refused on a CPU in one line. The trainer's end (``NcclSending``)
  lives in whichever process holds the weights whole: the one-process learner, or rank 0.

LoRA runs move adapter weights only. Every sync can be verified (``sync.verify``): the engine
answers a fixed probe greedily and the learner scores the same tokens; their log-probs must
agree, or the sync did not reach the engine (the silent failure users report most across RL
frameworks: rollouts keep sampling the old policy).
"""

from __future__ import annotations

import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from selfplay.core.errors import RunStopped, UserError, disk_full
from selfplay.engines.base import STABLE, Engine
from selfplay.engines.policy import BatchingPolicy
from selfplay.training.base import Learner
from selfplay.types import Request, Sample, SamplingParams, Turn

TRANSPORTS = ("auto", "inprocess", "object_store", "filesystem", "nccl")
PROBE_TEXT = "Count from one to ten, in words."


class SyncError(RuntimeError):
    """The engine does not serve the weights the learner just trained."""


def nbytes(weights: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in weights.values())


class WeightTransport(Protocol):
    name: str

    def send(self, learner: Learner, engine: Engine) -> int:
        """Install the learner's current weights in ``engine``; returns the bytes moved."""


@dataclass
class DirectTransport:
    """The engine's own ``load_weights``: in memory (``inprocess``) or through a Ray pool's
    object store (``object_store``)."""

    name: str = "inprocess"

    def send(self, learner: Learner, engine: Engine) -> int:
        moved = 0
        if learner.adapters:
            for adapter in learner.adapters:
                weights = learner.adapter_weights(adapter)
                engine.load_weights(adapter, weights)
                moved += nbytes(weights)
        else:
            weights = learner.full_weights()
            engine.load_weights(None, weights)
            moved += nbytes(weights)
        return moved


@dataclass
class FilesystemTransport:
    """``folder/v<version>/<adapter>.safetensors`` and then ``STABLE``; engines read the files
    (a Ray replica on another machine reads them there). The last ``keep`` versions stay.

    A file the engine cannot read (cut short on a shared folder, damaged in transit) is written
    again once; a second failure stops the run in one line. A full disk is not retried."""

    folder: Path
    keep: int = 2
    name: str = "filesystem"

    def send(self, learner: Learner, engine: Engine) -> int:
        try:
            return self._send(learner, engine)
        except Exception as exc:
            if disk_full(exc):
                raise
            print(f"weight sync: the engine could not read v{learner.version:06d} "
                  f"({type(exc).__name__}); writing it again", file=sys.stderr)
            try:
                return self._send(learner, engine)
            except Exception as again:
                if disk_full(again):
                    raise
                raise RunStopped(
                    f"weight sync (filesystem): the engine could not read the weights of "
                    f"version {learner.version} in {self.folder} twice ({type(again).__name__}: "
                    f"{_first_line(again)}); `selfplay resume RUN` continues from its last "
                    "checkpoint") from again

    def _send(self, learner: Learner, engine: Engine) -> int:
        target = Path(self.folder) / f"v{learner.version:06d}"
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        files = {name: tmp / f"{name}.safetensors" for name in learner.adapters or ["full"]}
        for name, path in files.items():
            learner.write_weights(None if name == "full" else name, path)
        moved = sum(path.stat().st_size for path in files.values())
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        (target / STABLE).touch()  # readers load nothing from a folder without it
        for name in files:
            engine.load_weights_from(None if name == "full" else name,
                                     str(target / f"{name}.safetensors"))
        self._prune()
        return moved

    def _prune(self) -> None:
        versions = sorted(p for p in Path(self.folder).glob("v*") if p.is_dir())
        for old in versions[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


class NcclTransport:
    """A broadcast from the trainer to vLLM's workers (engines/vllm_sync.py) in per-layer
    buckets packed by dtype. Needs CUDA on both sides; full fine-tuning only."""

    name = "nccl"

    def __init__(self, learner: Learner, engine: Engine, bucket_bytes: int) -> None:
        if not torch.cuda.is_available():
            raise UserError("sync.transport: nccl broadcasts between GPUs and this machine has "
                            "none; use inprocess, object_store or filesystem")
        if learner.adapters:
            raise UserError("sync.transport: nccl moves full weights; a LoRA run syncs "
                            "adapters (megabytes): use inprocess, object_store or filesystem")
        if engine.nccl_workers() == 0:
            raise UserError("sync.transport: nccl needs engine.backend: vllm")
        self.bucket_bytes = bucket_bytes
        host, port = learner.nccl_address()
        world_size = 1 + engine.nccl_workers()
        # both ends block until the group is whole: the engine's side on a thread
        with ThreadPoolExecutor(1) as pool:
            joining = pool.submit(engine.nccl_join, host, port, world_size)
            learner.nccl_open(host, port, world_size)
            joining.result()

    def send(self, learner: Learner, engine: Engine) -> int:
        plan = learner.nccl_plan(self.bucket_bytes)  # rank 0 gathers the weights and plans
        with ThreadPoolExecutor(1) as pool:
            receiving = pool.submit(engine.nccl_receive, plan)
            sent = learner.nccl_send()
            receiving.result()
        return sent


def choose_transport(
    setting: str, engine: Engine, folder: Path, learner: Learner, bucket_bytes: int
) -> WeightTransport:
    """The transport ``sync.transport`` names; ``auto``: in process for an engine in this
    process, the object store for a Ray pool on one machine, the filesystem for a pool on a
    cluster (``cluster.address``)."""
    pool = engine.placement == "pool"
    if setting == "auto":
        setting = ("filesystem" if engine.address else "object_store") if pool else "inprocess"
    if setting == "filesystem":
        return FilesystemTransport(folder)
    if setting == "nccl":
        return NcclTransport(learner, engine, bucket_bytes)
    if setting == "object_store" and not pool:
        raise UserError("sync.transport: object_store needs a Ray engine pool "
                        "(cluster.backend: ray)")
    return DirectTransport(setting)


# ---------------------------------------------------------------------- weights, files, NCCL
def adapter_weights_from_trainable(trainable: dict[str, torch.Tensor], adapter: str) -> dict:
    """peft state-dict names of one adapter from the learner's trainable parameter names:
    ``...q_proj.lora_A.<adapter>.weight`` → ``...q_proj.lora_A.weight`` (what
    ``get_peft_model_state_dict`` returns and ``engine.load_weights`` takes)."""
    weights = {}
    for name, value in trainable.items():
        for part in ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B"):
            marker = f".{part}.{adapter}."
            if marker in name:
                weights[name.replace(marker, f".{part}.")] = value
            elif name.endswith(f".{part}.{adapter}"):
                weights[name[: -len(adapter) - 1]] = value
    return weights


def save_weights_file(weights: dict[str, torch.Tensor], path) -> None:
    """Tensors to a safetensors file (contiguous CPU copies; tied tensors saved once each)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous().clone() for k, v in weights.items()}, str(path))


def local_address() -> tuple[str, int]:
    """This machine's address and a free port on it (where a NCCL group meets)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    try:
        import ray

        host = ray.util.get_node_ip_address()
    except Exception:  # no Ray: a one-machine run
        host = "127.0.0.1"
    return host, port


class NcclSending:
    """The trainer's end of the NCCL weight transport, for the process that holds the whole
    weights (the one-process learner, or rank 0 of the sharded one). GPU only."""

    def __init__(self) -> None:
        self.sender = None
        self.weights: dict[str, torch.Tensor] = {}
        self.plan: list = []

    def open(self, host: str, port: int, world_size: int) -> None:
        from selfplay.engines.vllm_sync import TrainerSender

        self.sender = TrainerSender(host, port, world_size)

    def prepare(self, weights: dict[str, torch.Tensor], bucket_bytes: int) -> list[dict]:
        """Keep ``weights`` for ``send`` and return their bucket plan for the receivers."""
        from selfplay.engines.buckets import plan
        from selfplay.engines.vllm_sync import plan_to_wire

        self.weights, self.plan = weights, plan(weights, bucket_bytes)
        return plan_to_wire(self.plan)

    def send(self) -> int:
        sent = self.sender.send(self.weights, self.plan)
        self.weights = {}
        return sent


# ---------------------------------------------------------------------- verification
@dataclass
class Probe:
    """A fixed prompt the engine answers greedily after every sync, for each adapter."""

    prompt_ids: list[int]
    tokens: int

    @classmethod
    def of(cls, tokenizer, tokens: int) -> Probe:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": PROBE_TEXT}], add_generation_prompt=True, tokenize=False
        )
        return cls(tokenizer(text, add_special_tokens=False).input_ids, tokens)


def probe_gap(learner: Learner, engine: Engine, policy: BatchingPolicy, probe: Probe) -> float:
    """Largest |engine − learner| log-prob over the probe's greedy tokens, every adapter.

    Greedy requests draw no random numbers, so a probe never changes what a run samples."""
    adapters = learner.adapters or ["shared"]
    requests = [
        Request(role="probe", prompt_ids=list(probe.prompt_ids), adapter=adapter,
                sampling=SamplingParams(temperature=0.0, max_new_tokens=probe.tokens))
        for adapter in adapters
    ]
    with policy.updating():
        completions = engine.generate(requests)
    samples = [
        Sample(Turn("probe", c.prompt_ids, c.token_ids, c.logprobs, [1] * len(c.token_ids), "",
                    adapter=adapter, temperature=0.0), advantage=0.0)
        for adapter, c in zip(adapters, completions, strict=True)
        if c.token_ids
    ]
    if not samples:
        return 0.0
    scored = learner.score(samples)
    return max(
        abs(engine_lp - learner_lp)
        for sample, learner_lps in zip(samples, scored, strict=True)
        for engine_lp, learner_lp in zip(sample.turn.engine_logprobs, learner_lps, strict=True)
    )


def default_tolerance(dtype: str, backend: str) -> float:
    """Engine and learner agree to ~1e-5 in fp32 on the hf engine; vLLM's kernels and 16-bit
    types leave more."""
    if dtype == "float32" and backend == "hf":
        return 1e-3
    return 5e-2


@dataclass
class WeightSync:
    """The runner's weight sync: a transport, then the probe check."""

    transport: WeightTransport
    probe: Probe | None
    tolerance: float

    def __call__(
        self, learner: Learner, engine: Engine, policy: BatchingPolicy
    ) -> dict[str, float]:
        asked = time.perf_counter()
        # no completion may be sampled from half-loaded weights or stamped with the wrong
        # version: with async rollouts a batch may be in flight on the producer thread
        with policy.updating():
            start = time.perf_counter()
            moved = self.transport.send(learner, engine)
            policy.version = learner.version
        seconds = time.perf_counter() - start
        metrics = {"sync/seconds": seconds, "sync/wait_seconds": start - asked,
                   "sync/bytes": float(moved)}
        if self.probe is not None:
            gap = probe_gap(learner, engine, policy, self.probe)
            metrics["sync/probe_gap"] = gap
            if gap > self.tolerance:
                raise SyncError(
                    f"weight sync ({self.transport.name}) did not reach the engine: its probe "
                    f"log-probs differ from the learner's by {gap:.3g} (tolerance "
                    f"{self.tolerance:g}), so rollouts would sample another policy"
                )
        return metrics
