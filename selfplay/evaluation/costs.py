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

MEASURED = "2026-11-26 at load 3-5 on 2 cores, docs/data/compare-2026-11-26.json"
# experiment: (overhead CPU s, CPU s per 1,000 generated tokens, generated tokens a step: a run
# stops after the step that reaches the budget, so it spends about half a step more)
RUNS: dict[str, tuple[float, float, float]] = {
    "rlvr-curriculum-cpu": (25.4, 30.5, 552),
    # measured as spiral-kuhn-cpu, which then played free text; that experiment is now
    # spiral-kuhn-text-cpu (spiral-kuhn-cpu plays scored moves, which generate no tokens)
    "spiral-kuhn-text-cpu": (20.6, 89.8, 366),
    "agent0-cpu": (37.1, 30.3, 1061),
    "spice-cpu": (19.0, 41.0, 731),
    "azr-cpu": (20.6, 33.0, 1558),
    "cure-cpu": (16.9, 32.4, 673),
    "ssp-cpu": (16.7, 86.9, 314),
    "spell-cpu": (23.3, 66.9, 333),
    "mae-cpu": (16.0, 55.4, 745),
    "rzero-cpu": (39.4, 33.5, 1131),
    "sqlm-cpu": (21.0, 67.0, 902),
    "verifiers-arithmetic-cpu": (19.9, 33.4, 430),
}

# a held-out evaluation: (CPU s loading the model, CPU s a problem), greedy at most 16 tokens +
# the reference's likelihood, the compare suite; used when --plan measures no pilot
EVALUATION_MEASURED = "PENDING"
EVALUATION: tuple[float, float] = (15.0, 0.3)
