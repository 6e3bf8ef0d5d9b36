"""What a compare run costs on the reference machine, for ``selfplay compare --plan``
(docs/compare.md#plan).

A run's CPU seconds = overhead (model loading, the loop's own evaluations, checkpoints) + rate ×
generated tokens / 1000. Measured in the 3 seeds × 1,500 tokens comparison of 2026-11-26
(docs/data/compare-2026-11-26.json; docs/results.md): per seed, the share of the run's wall time
spent in its steps splits its CPU seconds into the two; the mean over the 3 seeds. The 2-core AMD
EPYC reference machine, SmolLM2-135M float32. Loops change: ``--costs COMPARE`` measures them from
a finished comparison instead (``costs_from_folder``), which is what a plan to trust should use.
"""

from __future__ import annotations

MEASURED = "2026-11-26, docs/data/compare-2026-11-26.json"
# experiment: (overhead CPU s, CPU s per 1,000 generated tokens)
RUNS: dict[str, tuple[float, float]] = {
    "rlvr-curriculum-cpu": (25.4, 30.5),
    "spiral-kuhn-cpu": (20.6, 89.8),
    "agent0-cpu": (37.1, 30.3),
    "spice-cpu": (19.0, 41.0),
    "azr-cpu": (20.6, 33.0),
    "cure-cpu": (16.9, 32.4),
    "ssp-cpu": (16.7, 86.9),
    "spell-cpu": (23.3, 66.9),
    "mae-cpu": (16.0, 55.4),
    "rzero-cpu": (39.4, 33.5),
    "sqlm-cpu": (21.0, 67.0),
    "verifiers-arithmetic-cpu": (19.9, 33.4),
}

# a held-out evaluation: (CPU s loading the model, CPU s a problem), greedy at most 16 tokens +
# the reference's likelihood, the compare suite; used when --plan measures no pilot
EVALUATION_MEASURED = "PENDING"
EVALUATION: tuple[float, float] = (15.0, 0.3)
