"""SPELL: questioner, responder and verifier over document clusters (``loop.py``: the
algorithm; ``clusters.py``: the growing-context curriculum; ``records.py``: metrics and
records; ``settings.py``: the config section)."""

from selfplay.loops.spell.loop import QUESTIONER, RESPONDER, VERIFIER, SpellLoop
from selfplay.loops.spell.settings import SpellSettings

__all__ = ["QUESTIONER", "RESPONDER", "VERIFIER", "SpellLoop", "SpellSettings"]
