"""What a compare run costs on the reference machine, for ``selfplay compare --plan``
(docs/compare.md#plan).

A run's CPU seconds = overhead (model loading, the loop's own evaluations, checkpoints) + rate ×
generated tokens / 1000. Measured in the 3 seeds × 1,500 tokens comparison of 2026-11-26
(docs/data/compare-2026-11-26.json; docs/results.md), or where ``SOURCES`` says: per seed, the
share of the run's wall time spent in its steps splits its CPU seconds into the two; the mean
over the 3 seeds. The 2-core AMD
EPYC reference machine, SmolLM2-135M float32. Loops change: ``--costs COMPARE`` measures them from
a finished comparison instead (``costs_from_folder``), which is what a plan to trust should use.
"""

from __future__ import annotations

MEASURED = "2026-11-26 at load 3-5 on 2 cores, docs/data/compare-2026-11-26.json"
# experiment: (overhead CPU s, CPU s per 1,000 generated tokens, generated tokens a step: a run
# stops after the step that reaches the budget, so it spends about half a step more)
RUNS: dict[str, tuple[float, float, float]] = {
    # measured again 2026-11-29 (SOURCES): the learner's common prefixes made them cheaper
    "rlvr-curriculum-cpu": (21.9, 23.0, 502),
    # the run also measures exploitability and plays evaluation games (overhead 68 s); until
    # 2026-11-26 it was spiral-kuhn-cpu, which then played free text
    "spiral-kuhn-text-cpu": (68.3, 66.0, 411),
    "agent0-cpu": (37.1, 30.3, 1061),
    "spice-cpu": (19.0, 41.0, 731),
    "azr-cpu": (20.6, 33.0, 1558),
    "cure-cpu": (16.0, 21.2, 603),
    "ssp-cpu": (16.7, 86.9, 314),
    "spell-cpu": (23.3, 66.9, 333),
    "mae-cpu": (16.0, 55.4, 745),
    "rzero-cpu": (39.4, 33.5, 1131),
    "sqlm-cpu": (17.6, 30.1, 877),
    "verifiers-arithmetic-cpu": (19.9, 33.4, 430),
}
# where an experiment's cost above was measured, when not in the 2026-11-26 comparison
SOURCES: dict[str, str] = {
    "rlvr-curriculum-cpu": "2026-11-29 at load 3.7 on 2 cores, 3 seeds × 4,000 tokens, "
                           "docs/results.md",
    "spiral-kuhn-text-cpu": "2026-11-29 at load 3.9 on 2 cores, 3 seeds × 4,000 tokens, "
                            "docs/results.md",
    "cure-cpu": "2026-11-29 at load 3.5 on 2 cores, 3 seeds × 4,000 tokens, docs/results.md",
    "sqlm-cpu": "2026-11-29 at load 3.5 on 2 cores, 3 seeds × 4,000 tokens, docs/results.md",
}

# a held-out evaluation's CPU seconds: loading the model + a fixed part + a part per problem.
# The fixed part is real: an evaluation of 160 problems costs 0.34 s a problem and one of 720
# 0.26 (larger batches fill better, and each evaluation merges its adapter once), so one figure
# a problem measured on one size misjudges another (the 64-problem pilot's 0.48 s a problem
# overstated 2026-11-29's comparison's evaluations by 68%). Least squares over 27 evaluations
# of 160 and 720 problems (greedy at most 16 tokens + the reference's likelihood, the compare
# suite), runs/compare-sqlm-cure and runs/compare-rerun-seeds-3-5 (docs/results.md), residuals
# within ±6 s. Used for the shape when the pilot measures the machine, and alone when it does not.
EVALUATION_MEASURED = ("2026-11-29, 27 evaluations of 160 and 720 problems at load 2-4 on "
                       "2 cores, docs/results.md")
EVALUATION: tuple[float, float, float] = (0.7, 17.7, 0.236)  # loading, fixed, a problem
