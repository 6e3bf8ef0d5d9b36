"""verifiers entry module ``selfplay_games``: any of our games (``--env.taskset.game``; Kuhn
Poker by default), played as SPIRAL plays them (selfplay/verifiers_envs/games.py;
docs/verifiers.md)."""

from selfplay.verifiers_envs.games import (
    GameEnv,
    GameEnvConfig,
    GameHarness,
    GameTaskset,
    GameTasksetConfig,
)

__all__ = ["GameEnv", "GameEnvConfig", "GameHarness", "GameTaskset", "GameTasksetConfig"]
