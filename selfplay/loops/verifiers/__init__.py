"""A verifiers v1 environment as a loop (``loop.py``: the loop; ``bridge.py``: the client and
harness that put our policy behind verifiers' agents; ``envs/``: environments of our own in
the verifiers style). Needs the ``verifiers`` extra (``pip install selfplay[verifiers]``):
without it, ``loop: verifiers`` refuses in one line."""

from selfplay.core.errors import UserError

try:
    import verifiers.v1  # noqa: F401 - only whether it imports
except ImportError as missing:
    raise UserError(
        "loop: verifiers needs the verifiers package (its v1 API, verifiers>=0.4): "
        f"pip install 'selfplay[verifiers]' ({missing})"
    ) from None

from selfplay.loops.verifiers.loop import VerifiersLoop, VerifiersSettings  # noqa: E402

__all__ = ["VerifiersLoop", "VerifiersSettings"]
