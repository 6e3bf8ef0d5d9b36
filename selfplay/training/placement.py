"""Where the sharded learner's ranks live, behind one small interface (``call`` a method on
every rank, ``close``):

- ``RayRanks``: long-lived Ray actors in a placement group, one per GPU (one per CPU core with
  gloo in tests), each starting ``torch.distributed`` itself, as verl and OpenRLHF do. The
  default: the same config runs on one machine or a Ray cluster.
- ``TorchrunRanks``: the processes ``torchrun --nproc-per-node N -m selfplay run ...`` started
  on one node. Rank 0 is the driver itself (loops, engines, run folder); the other ranks run
  ``serve_rank``: they build their ``RankWorker`` from what rank 0 broadcasts, then run each
  method rank 0 broadcasts, until it closes them. Commands and results travel over a gloo group
  beside the NCCL one.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch

from selfplay.core.errors import RunStopped, UserError
from selfplay.training.rank_worker import ParallelSettings, RankWorker, rank_device


def launched_by_torchrun() -> bool:
    """This process is one of several torchrun started."""
    return world_size() > 1 and "TORCHELASTIC_RUN_ID" in os.environ


def torchrun_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def master_address() -> tuple[str, int]:
    """This node's address and a free port on it (run on rank 0's node)."""
    import ray

    with socket.socket() as probe:
        probe.bind(("", 0))
        return ray.util.get_node_ip_address(), probe.getsockname()[1]


class RayRanks:
    """``parallel.ranks`` RankWorker actors in a placement group (PACK: one node if it fits)."""

    def __init__(self, model_path: Path, settings, adapters: list[str],
                 parallel: ParallelSettings) -> None:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from selfplay.engines.ray_pool import connect

        connect(parallel.address)
        gpu = torch.cuda.is_available() or bool(ray.cluster_resources().get("GPU"))
        bundle = {"GPU": parallel.gpu_share, "CPU": 1} if gpu else {"CPU": 1}
        self.group = placement_group([bundle] * parallel.ranks, strategy="PACK")
        try:
            ray.get(self.group.ready(), timeout=120)
        except ray.exceptions.GetTimeoutError as exc:
            remove_placement_group(self.group)
            raise UserError(
                f"train.parallel: {parallel.ranks} learner ranks of {bundle} could not be "
                f"placed in 120 s; the cluster has {ray.cluster_resources()}"
            ) from exc

        def on(rank: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=rank
            )

        # rank 0's node and a free port there: where the ranks meet
        master = ray.get(ray.remote(num_cpus=0)(master_address).options(
            scheduling_strategy=on(0)).remote())
        actor = ray.remote(num_gpus=parallel.gpu_share if gpu else 0, num_cpus=1)(RankWorker)
        self.workers = [
            actor.options(scheduling_strategy=on(rank)).remote(
                rank, parallel.ranks, master, str(model_path), settings, adapters, parallel,
                torch.get_rng_state(),
            )
            for rank in range(parallel.ranks)
        ]
        self.broken = False

    def call(self, method: str, per_rank: list[tuple]) -> list:
        """``method`` on every rank (a collective), their results in rank order. A rank that
        dies ends the step in one line: the run resumes from its last checkpoint."""
        import ray
        from ray.exceptions import RayActorError

        calls = [getattr(worker, method).remote(*args)
                 for worker, args in zip(self.workers, per_rank, strict=True)]
        try:
            pending = list(calls)
            while pending:  # the first rank to fail ends the wait (the others may be blocked)
                ready, pending = ray.wait(pending, num_returns=1)
                ray.get(ready)
            return ray.get(calls)
        except RayActorError as exc:
            self.broken = True  # the others may be stuck in a collective: close kills them
            raise RunStopped(
                f"a learner rank died during {method} ({type(exc).__name__}); the run stops "
                "here and `selfplay resume RUN` continues from its last checkpoint"
            ) from exc

    def close(self) -> None:
        """A clean shutdown of the process group when the ranks are healthy, then the actors
        and their placement group go."""
        import ray
        from ray.util.placement_group import remove_placement_group

        if not self.broken:
            ray.wait([w.close.remote() for w in self.workers], num_returns=len(self.workers),
                     timeout=30)
        for worker in self.workers:
            ray.kill(worker)
        remove_placement_group(self.group)


def _start_process_group() -> object:
    """torchrun's process group (NCCL on GPUs, gloo on CPUs) and a gloo group for commands."""
    import torch.distributed as dist

    device = rank_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method="env://")
    return dist.new_group(backend="gloo")


class TorchrunRanks:
    """The ranks torchrun started; this process (rank 0, the driver) is one of them."""

    def __init__(self, model_path: Path, settings, adapters: list[str],
                 parallel: ParallelSettings) -> None:
        import torch.distributed as dist

        self.control = _start_process_group()
        self.size = dist.get_world_size()  # make_learner checked it equals parallel.ranks
        built = (str(model_path), settings, adapters, parallel, torch.get_rng_state())
        dist.broadcast_object_list([built], src=0, group=self.control)
        self.worker = RankWorker(0, self.size, None, *built)

    def call(self, method: str, per_rank: list[tuple]) -> list:
        import torch.distributed as dist

        dist.broadcast_object_list([(method, per_rank)], src=0, group=self.control)
        result = getattr(self.worker, method)(*per_rank[0])
        gathered: list = [None] * self.size
        dist.gather_object(None, gathered, dst=0, group=self.control)  # not its own: no pickling
        gathered[0] = result
        return gathered

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.broadcast_object_list([(CLOSE, [])], src=0, group=self.control)
            dist.destroy_process_group()


CLOSE = "close"


def serve_rank() -> int:
    """A rank other than 0 under torchrun: build the worker rank 0 describes, then run the
    methods it broadcasts until it closes the group (exit status 0). If rank 0 dies, torchrun
    stops this process too."""
    import torch.distributed as dist

    control = _start_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    box: list = [None]
    dist.broadcast_object_list(box, src=0, group=control)
    worker = RankWorker(rank, size, None, *box[0])
    while True:
        dist.broadcast_object_list(box, src=0, group=control)
        method, per_rank = box[0]
        if method == CLOSE:
            dist.destroy_process_group()
            return 0
        result = getattr(worker, method)(*per_rank[rank])
        dist.gather_object(result, None, dst=0, group=control)
