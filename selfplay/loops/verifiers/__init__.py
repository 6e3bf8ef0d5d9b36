"""A verifiers v1 environment as a loop (``loop.py``: the loop; ``bridge.py``: the client and
harness that put our policy behind verifiers' agents; ``envs/``: environments of our own in
the verifiers style). Needs the ``verifiers`` extra (``pip install selfplay[verifiers]``)."""

from selfplay.loops.verifiers.loop import VerifiersLoop, VerifiersSettings

__all__ = ["VerifiersLoop", "VerifiersSettings"]
