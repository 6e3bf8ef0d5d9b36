"""The thread policy: every part of a run gets CPU threads so that together they never ask for
more cores than the process may use (docs/speed.md#threads).

- The driver's torch threads (the in-process engine and the learner, which take turns in sync
  runs): ``threads.torch``, by default the cores this process may use
  (``os.sched_getaffinity``; torch's own default counts the machine's cores and ignores
  affinity and container limits). Async runs split them between generation and training
  (``rollout.engine_threads`` / ``rollout.learner_threads``).
- torch's inter-op pool: ``threads.interop``, by default 1 (nothing here runs independent ops
  side by side; its idle threads only add wake-ups).
- Ray engine replicas: ``cluster.num_cpus_per_replica`` threads each; CPU learner ranks:
  ``train.parallel.threads_per_rank`` each; sandbox tool workers: 1 (numeric libraries there
  must not start a thread per core).
- OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE``, set when the ``selfplay``
  command starts unless the environment already says otherwise): a spinning thread steals a
  core from whatever else runs, and on 2 busy cores it made matmuls 2-3x slower (``selfplay bench
  threads``). It has to be decided before torch loads OpenMP, hence an environment variable and
  not a config key.
"""

from __future__ import annotations

import contextlib
import os

from selfplay.core.machine import available_cores


def apply_thread_policy(config) -> dict[str, int | str]:
    """Set the driver's torch threads from ``config.threads``; return what was set (logged)."""
    import torch

    threads = config.threads
    intra = threads.torch or available_cores()
    torch.set_num_threads(intra)
    # only possible before the first inter-op work of this process (e.g. a second run in it)
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(threads.interop)
    return {
        "torch": intra,
        "interop": torch.get_num_interop_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
    }
