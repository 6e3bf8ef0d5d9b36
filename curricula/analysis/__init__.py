"""Curriculum analysis: what a run generated, how hard, how diverse, how true (REFERENCE §6).

Pure functions over plain data (lists of task/episode dicts, arrays of numbers): every metric is
testable on hand-made data and knows nothing of run folders. ``selfplay.analysis`` reads a run
folder and draws the pages from these.

- ``difficulty``: p̂ per group/task, histograms, zero-variance share, target band vs achieved
- ``diversity``: self-BLEU, distinct-n, BLEU-distance clusters, embedding dispersion, clusters,
  near-duplicates within and across iterations
- ``tasks``: validity rate, answer-type mix, degenerate answers, tool calls per task
- ``games``: win/draw/invalid rates per game, seat and opponent; response length
- ``compute``: the ScaleRL compute curve fit with uncertainty
- ``passk``: the unbiased pass@k estimator
- ``judge``: the bias-corrected LLM-as-judge estimate with its interval
"""
