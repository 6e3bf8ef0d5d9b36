"""``selfplay play GAME``: a person plays against a model in the terminal.

With ``--run`` the model is the run's latest trained weights, and a game run's policy plays as
it did in the run: its own ``player`` prompt (its prefill included) and token budget, the move
parsed from the whole reply (another loop's run plays with the built-in ``player`` prompt);
without ``--run``, the bare model with the built-in ``player`` prompt.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.panel import Panel

import games
from games import extract_action, match_legal
from roles import RolePrompt, load_role
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import prompt_request
from selfplay.loops.spiral.moves import scored_move
from selfplay.types import Completion, Request, SamplingParams

PLAYER = "player"  # the role SPIRAL's runs play games as
MAX_NEW_TOKENS = 64  # the bare model's budget (a run uses its own ``sampling.max_new_tokens``)


@dataclass
class Opponent:
    """The model side of a game: its policy, the adapter serving it, its prompt and budget."""

    policy: BatchingPolicy
    adapter: str
    prompt: RolePrompt
    max_new_tokens: int
    # a run whose moves are scored (spiral.action: scored) plays its most likely legal move
    action_norm: str | None = None

    def request(self, observation: str, player: int, example: str) -> Request:
        sampling = SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens)
        return prompt_request(self.prompt, PLAYER, self.adapter, sampling,
                              observation=observation, player=player, example=example)

    def move(self, observation: str, player: int, example: str) -> Completion:
        """One greedy reply to the game's observation."""
        request = self.request(observation, player, example)
        (completion,) = asyncio.run(self.policy.gather([self.policy(request)]))
        return completion

    def scored_move(self, observation: str, player: int, example: str,
                    legal: list[str]) -> tuple[str, str]:
        """(the most likely legal move, π over the legal moves shown as text)."""
        request = self.request(observation, player, example)
        (turn,) = asyncio.run(self.policy.gather([scored_move(
            self.policy, request, legal, self.action_norm, True, random.Random(0))]))
        shown = "  ".join(f"{name} {math.exp(lp):.2f}"
                          for name, lp in zip(legal, turn.choice.log_pi, strict=True))
        return legal[turn.choice.chosen], shown


def load_policy(run: str | None, model: str) -> Opponent:
    """The run's latest trained LoRA weights with its own player prompt, or the bare model."""
    from selfplay.engines.hf import HFEngine
    from selfplay.engines.lora import lora_spec
    from selfplay.engines.models import resolve_model_path
    from selfplay.running.checkpoint import Checkpointer, trainable_weights

    if run is None:
        engine = HFEngine(resolve_model_path(model))
        return Opponent(BatchingPolicy(engine), "base", load_role(PLAYER), MAX_NEW_TOKENS)
    from selfplay.running.runner import load_run_config

    run_dir = Path(run)
    config = load_run_config(run_dir, logging=False)  # from any folder (docs/run-folder.md)
    latest = Checkpointer(run_dir).latest()
    if latest is None:
        raise UserError(f"{run_dir} has no checkpoint yet")
    engine = HFEngine(
        resolve_model_path(config.model.path),
        dtype=config.model.dtype,
        lora=lora_spec(config),
        adapters=config.adapters() or None,
    )
    params = dict(engine.model.named_parameters())
    with torch.no_grad():
        for name, value in trainable_weights(latest).items():
            params[name].copy_(value)
    policy, budget = BatchingPolicy(engine), config.sampling.max_new_tokens
    if PLAYER in config.roles:  # a game run: its own player prompt, prefill and all
        spec = config.roles[PLAYER]
        settings = config.settings
        norm = settings.action_norm if settings.action == "scored" else None
        return Opponent(policy, spec.adapter_name(PLAYER), load_role(spec.prompt), budget, norm)
    role = next(iter(config.roles))  # another loop's run: its weights, the built-in prompt
    return Opponent(policy, config.roles[role].adapter_name(role), load_role(PLAYER), budget)


def play(
    game_id: str,
    run: str | None = None,
    model: str = "embedded",
    seat: int = 0,
    seed: int | None = None,
    input_fn=input,
    console: Console | None = None,
) -> dict:
    console = console or Console()
    opponent = load_policy(run, model)
    game = games.make(game_id)
    game.reset(seed if seed is not None else random.randrange(2**31))
    while not game.done:
        player = game.current_player
        legal = game.legal_actions(player)
        if player == seat:
            console.print(Panel(game.observation(player), title=f"you are Player {seat}"))
            action = input_fn("your action> ").strip()
            action = action if action.startswith("[") else f"[{action}]"
        elif opponent.action_norm is not None and legal:  # a scored run: π over the legal moves
            example = games.example_action(game, player)
            action, shown = opponent.scored_move(game.observation(player), player, example, legal)
            console.print(f"[bold]model[/]: {shown}\n[bold]→ {action}[/]")
        else:
            example = games.example_action(game, player)
            completion = opponent.move(game.observation(player), player, example)
            action = extract_action(completion.reply, lenient=True) or "[no action]"
            console.print(f"[bold]model[/]: {completion.reply.strip()}\n[bold]→ {action}[/]")
        result = game.step(match_legal(action, legal) or action if legal else action)
        if not result.valid:
            console.print(f"[red]invalid move by Player {player}: {result.reason}[/]")
    outcome = game.outcome()
    console.print(f"[bold]game over[/]: {game.reason}  outcome {outcome}")
    return outcome
