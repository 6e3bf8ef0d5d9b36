"""Our two-player games as a verifiers environment, played the way SPIRAL plays them
(Liu et al. 2025, arXiv:2506.24119; docs/verifiers.md).

One episode is one game. Each seat is an agent (``player_0``, ``player_1``; both the policy by
default, as SPIRAL's self-play) and every move is one single-turn run of the seat's agent on
SPIRAL's own prompt (``roles/prompts/player.yaml``: the observation, the seat, a placeholder
example), so every move is one trace, as every move is one training sample in SPIRAL. Moves
and rewards follow SPIRAL's rules, the loop's own (``selfplay/loops/spiral/rules.py``): the
move is the reply's last ``\\boxed{...}``, matched against the legal moves when the game lists
them; the first invalid or unparseable move ends the game. Each trace of seat p carries the
seat's reward ``game_reward``: the outcome (+1/−1/0) or the payoff, and −1.5 for the offender,
+0.5 for the other seat after an invalid move (SPIRAL's training shaping). prime-rl's per-seat
baseline is its own business; the seat is on every trace as its agent's name.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field, model_validator

import games
from games import RandomOpponent
from roles import load_role
from selfplay.loops.spiral.rules import play_move, training_rewards
from selfplay.verifiers_envs.harness import LOCAL, ReplyHarness

SEATS = ("player_0", "player_1")


class GameTasksetConfig(vf.TasksetConfig):
    game: str = "kuhn_poker"  # a native id, textarena:<Id> or openspiel:<name> (docs/games.md)
    max_turns: int = Field(50, ge=1)  # cut-off: a draw (SPIRAL: 50)
    kwargs: dict = {}  # the game's constructor arguments (e.g. rounds: 3)
    first_seed: int = Field(0, ge=0)  # task i deals seed first_seed + i

    @model_validator(mode="after")
    def _playable(self) -> GameTasksetConfig:
        """An unknown id or a refused argument: one line at config time, naming the field."""
        try:
            games.trial(self.game, max_turns=self.max_turns, **self.kwargs)
        except (LookupError, ValueError, TypeError) as exc:
            raise ValueError(str(exc).splitlines()[0]) from None
        return self


class GameData(vf.TaskData):
    info: dict  # the game id, seed, turn limit and arguments the episode is replayed from


class GameTask(vf.Task[GameData, vf.State, vf.TaskConfig]):
    pass


class GameTaskset(vf.Taskset[GameTask, GameTasksetConfig]):
    INFINITE = True  # one game per seed; bound a run with -n

    def load(self) -> Iterator[GameTask]:
        c = self.config
        for i in itertools.count():
            seed = c.first_seed + i
            info = {"game": c.game, "seed": seed, "max_turns": c.max_turns, "kwargs": c.kwargs}
            yield GameTask(GameData(name=f"{c.game}#{seed}", info=info), c.task)


class GameEnvConfig(vf.EnvConfig):
    # the one-reply harness runs in this process: the local runtime (verifiers' default is a
    # remote sandbox, which would also need a tunnel back to the interception server)
    player_0: vf.AgentConfig = vf.AgentConfig(runtime=LOCAL)
    player_1: vf.AgentConfig = vf.AgentConfig(runtime=LOCAL)
    opponent: Literal["mirror", "random"] = "mirror"  # random: player_1 moves at random
    reward: Literal["outcome", "payoff"] = "outcome"  # payoff: info["returns"] (chips)
    invalid_penalty: float = -1.5  # the offender's reward for an invalid/unparseable move
    invalid_opponent_reward: float = 0.5  # the other seat's reward then
    lenient: bool = False  # accept the last [token] when no \boxed{} is given


@dataclass
class Played:
    """What a game left behind: each model move's trace by seat, and who broke the rules."""

    traces: dict[int, list[vf.Trace]] = field(default_factory=lambda: {0: [], 1: []})
    invalid_by: int | None = None
    reason: str = ""
    moves: int = 0


def move_task(game: games.Game, seat: int) -> vf.Task:
    """SPIRAL's prompt for this seat now: a fresh single-turn task (the full observation)."""
    system, user = load_role("player").render(
        observation=game.observation(seat), player=seat, example=games.example_action(game, seat)
    )
    return vf.Task(vf.TaskData(prompt=user["content"], system_prompt=system["content"]))


class GameEnv(vf.Env[GameEnvConfig]):
    async def setup(self, agents):
        if self.config.opponent == "random":
            agents.player_1.trainable = False  # never runs: its moves are random

    async def run(self, task, agents):
        info = task.data.info
        game = games.make(info["game"], max_turns=info["max_turns"], **info["kwargs"])
        played = Played()
        with games.guarded(game, info["game"]):
            game.reset(info["seed"])
            rng = random.Random(info["seed"])
            while not game.done:
                await self.play_turn(game, agents, played, rng)
                if played.invalid_by is not None:
                    break
            c = self.config
            scores = training_rewards(game, played.invalid_by, c.reward, c.invalid_penalty,
                                      c.invalid_opponent_reward)
        for seat, traces in played.traces.items():
            for trace in traces:
                trace.record_reward("game_reward", scores[seat])
                trace.record_metrics(self.metrics(game, played, seat))

    async def play_turn(self, game, agents, played: Played, rng: random.Random) -> None:
        seat = game.current_player
        played.moves += 1
        if seat == 1 and self.config.opponent == "random":
            if not game.step(RandomOpponent(rng.randrange(2**31)).act(game, seat)).valid:
                played.invalid_by, played.reason = seat, "random move refused"
            return
        trace = await getattr(agents, SEATS[seat]).run(move_task(game, seat))
        played.traces[seat].append(trace)
        refused = play_move(game, seat, trace.last_reply, self.config.lenient)
        if refused is not None:
            played.invalid_by = seat
            played.reason = trace.info["invalid_reason"] = refused or "invalid move"

    @staticmethod
    def metrics(game: games.Game, played: Played, seat: int) -> dict[str, float]:
        won = played.invalid_by == 1 - seat if played.invalid_by is not None else (
            game.winner == seat
        )
        return {
            "game_moves": float(played.moves),
            "invalid_move": float(played.invalid_by == seat),
            "win": float(won),
            "draw": float(played.invalid_by is None and game.winner is None),
        }


class GameHarness(ReplyHarness):
    """The in-process one-reply harness, exported so that it is the taskset's default."""


__all__ = ["GameEnv", "GameEnvConfig", "GameHarness", "GameTaskset", "GameTasksetConfig"]
