"""verifiers entry module ``selfplay_spice``: SPICE's grounded challenger and reasoner
(selfplay/verifiers_envs/spice.py; docs/verifiers.md)."""

from selfplay.verifiers_envs.spice import (
    SpiceEnv,
    SpiceEnvConfig,
    SpiceHarness,
    SpiceTaskset,
    SpiceTasksetConfig,
)

__all__ = ["SpiceEnv", "SpiceEnvConfig", "SpiceHarness", "SpiceTaskset", "SpiceTasksetConfig"]
