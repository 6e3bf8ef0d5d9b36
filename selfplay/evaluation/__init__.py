"""Evaluating saved runs: held-out suites with pass@k, an LLM judge, cross-play of snapshots."""
