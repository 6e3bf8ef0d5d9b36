"""Weights between naming schemes: the learner's trainable parameter names and the peft
state-dict names an engine's ``load_weights`` takes."""

from __future__ import annotations

import torch


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
