"""Curriculum analysis: what a run generated, how hard, how diverse, how true
(docs/algorithms.md#curriculum-analysis-metrics).

Pure functions over plain data (lists of task/episode dicts, arrays of numbers): every metric is
testable on hand-made data and knows nothing of run folders. ``selfplay.analysis`` reads a run
folder and draws the pages from these.

- ``difficulty``: p̂ per group/task, histograms, zero-variance share, target band vs achieved
- ``diversity``: self-BLEU, distinct-n, BLEU-distance clusters, embedding dispersion, clusters,
  near-duplicates within and across iterations
- ``tasks``: validity rate, answer-type mix, degenerate answers, tool calls per task

Evaluation statistics that are not about curricula (pass@k, judge correction, compute curves,
game rates) live in ``selfplay.stats``.
"""
