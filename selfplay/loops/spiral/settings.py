"""SPIRAL's settings: the games, the opponent, the move form and the update
(docs/algorithms.md#spiral; the loop is spiral/loop.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from selfplay.config import Strict
from selfplay.loops.base import LoopSettings
from selfplay.loops.spiral.mmd import MMDSettings
from selfplay.loops.spiral.moves import ActionForm, Normalisation
from selfplay.loops.spiral.opponents import bot_name, opponent_name


class GameSpec(Strict):
    id: str  # a native id (kuhn_poker, tictactoe, simple_negotiation) or textarena:<Id>
    weight: float = Field(1.0, gt=0)
    max_turns: int = Field(50, ge=1)  # cut-off → draw (SPIRAL: 50)
    kwargs: dict = {}  # passed to the game's constructor (e.g. rounds: 3)


class OpponentSettings(Strict):
    kind: Literal["mirror", "random", "frozen", "pool", "fictitious", "bot"] = "mirror"
    bot: str | None = None  # kind bot: mcts:<simulations>, alphabeta or cfr[:<iterations>]
    pool_size: int = Field(25, ge=1)  # FIFO pool of past checkpoints (pool, fictitious)
    refresh_every: int = Field(5, ge=1)  # steps between snapshots into the pool
    # kind fictitious: how a snapshot is drawn, uniformly (fictitious play: the average of the
    # past policies; the default) or by AlphaStar's PFSP weighting of P[policy beats it]
    weighting: Literal["uniform", "squared", "linear", "linear_capped", "variance"] | None = None
    # kind fictitious: a snapshot's recorded results fade by this per game against it (0.99)
    decay: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _fictitious_defaults(cls, data):
        if isinstance(data, dict) and data.get("kind") == "fictitious":
            given = {key: value for key, value in data.items() if value is not None}
            return {"weighting": "uniform", "decay": 0.99, **given}
        return data

    @field_validator("bot")
    @classmethod
    def _canonical_bot(cls, name: str | None) -> str | None:  # mcts is mcts:1000
        return None if name is None else bot_name(name)

    @model_validator(mode="after")
    def _bot_with_kind_bot(self) -> OpponentSettings:
        if (self.kind == "bot") != (self.bot is not None):
            raise ValueError("opponent.bot names the bot of kind: bot, and only then (e.g. "
                             "opponent: {kind: bot, bot: mcts:100})")
        given = [k for k in ("weighting", "decay") if getattr(self, k) is not None]
        if given and self.kind != "fictitious":
            raise ValueError(f"opponent.{given[0]} is a setting of kind: fictitious, and only "
                             f"then (e.g. opponent: {{kind: fictitious, weighting: squared}})")
        return self


class SpiralSettings(LoopSettings):
    games: list[GameSpec] = Field(min_length=1)  # none: nothing to sample a game from
    games_per_step: int = Field(8, ge=1)
    opponent: OpponentSettings = OpponentSettings()
    # the training reward of a game played to its end: +1/-1/0 (outcome), or the game's own
    # payoff, info["returns"] per seat (payoff: Kuhn Poker's chips, an OpenSpiel game's returns)
    reward: Literal["outcome", "payoff"] = "outcome"
    # what fills the prompt's `example`: a placeholder in the move format, or (legal: runs made
    # before issue 31) a legal move of the state picked by a hash of the observation, which
    # steers the policy toward the move shown
    example: Literal["placeholder", "legal"] = "placeholder"
    invalid_penalty: float = -1.5  # offender's training reward for an invalid/unparseable move
    invalid_opponent_reward: float = 0.5  # the other seat's training reward then
    lenient: bool = False  # accept the last [token] when no \boxed{} is given
    # how a move is chosen: ``text`` (a free reply, its move parsed: the paper's form) or
    # ``scored`` (a draw from the softmax over the legal moves of the model's log-probability
    # of each move's reply, normalised by ``action_norm``: sum (GLAM), token or word (TWOSOME);
    # spiral/moves.py): no move is invalid, and the learner trains log π(move | state)
    action: ActionForm = "text"
    action_norm: Normalisation = "sum"
    # the advantage's baseline: ``rae`` (SPIRAL: one per game and seat) or ``state`` (the mean
    # return of the step's other visits to the same information state, leave-one-out; RAE for
    # a state visited once; rl/advantages.py: state_baseline_samples)
    baseline: Literal["rae", "state"] = "rae"
    # the ceiling: no games, but supervised imitation of this bot's equilibrium (cfr or
    # cfr:<iterations>) at every information state, through the same scored moves
    # (spiral/imitation.py); needs action: scored and games with an exact view
    imitate: str | None = None
    # how the policy is updated from its games: ``pg`` (the policy gradient with the advantage
    # above: SPIRAL) or ``mmd`` (scored moves only: magnetic mirror descent, Sokota et al.
    # 2023: at every visited information state the policy is fitted to the mirror-descent step
    # π* ∝ [π·uniform^{αη}·exp(η·Q̂)]^{1/(1+αη)} from its games' returns; spiral/mmd.py)
    update: Literal["pg", "mmd"] = "pg"
    mmd: MMDSettings = MMDSettings()
    # scored moves in training games are drawn from (1 − explore)·π + explore·uniform (the
    # learner's importance weight corrects the policy gradient; evaluation is never explored)
    explore: float = Field(0.0, ge=0, lt=1)
    eval_games: int = Field(16, ge=0)  # per game and opponent, seats alternating
    # random, initial (LoRA runs), pool (the pool's snapshots), or bots: mcts:100, alphabeta, cfr
    eval_opponents: list[str] = ["random", "initial"]
    eval_ood_games: list[str] = []  # out-of-domain game ids, against the random opponent
    # the policy's exploitability (OpenSpiel's exact best response) at every evaluation, on
    # these games: openspiel:kuhn_poker, openspiel:leduc_poker, or kuhn_poker with rounds: 1
    eval_exploitability: list[GameSpec] = []
    exploitability_samples: int = Field(16, ge=1)  # sampled replies per information state

    @property
    def every_state(self) -> bool:
        """Whether a step sets a target at every information state instead of playing hands
        (the imitation ceiling, or MMD from exact values)."""
        return self.imitate is not None or (self.update == "mmd" and self.mmd.values == "exact")

    @field_validator("eval_opponents")
    @classmethod
    def _canonical_opponents(cls, names: list[str]) -> list[str]:  # mcts is mcts:1000
        return [opponent_name(name) for name in names]
