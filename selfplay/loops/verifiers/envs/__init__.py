"""Verifiers environments of our own, written in the verifiers v1 style (a ``Taskset`` and,
for two agents, an ``Env``), importable without a pip install: ``env:
selfplay.loops.verifiers.envs.arithmetic`` (docs/verifiers.md)."""
