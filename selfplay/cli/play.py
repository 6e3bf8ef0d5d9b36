"""``selfplay play GAME``: a person plays against a model in the terminal."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from rich.console import Console
from rich.panel import Panel

import games
from games import extract_action, match_legal
from roles import load_role
from selfplay.core.errors import UserError
from selfplay.types import Request, SamplingParams


def load_policy(run: str | None, model: str):
    """An hf engine with the run's latest trained LoRA weights (or the bare model)."""
    from selfplay.engines.hf import HFEngine, lora_spec
    from selfplay.engines.models import resolve_model_path
    from selfplay.running.checkpoint import Checkpointer, trainable_weights

    if run is None:
        return HFEngine(resolve_model_path(model)), "base"
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
    role = next(iter(config.roles.values()))
    return engine, role.adapter_name(next(iter(config.roles)))


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
    engine, adapter = load_policy(run, model)
    prompt = load_role("player")
    game = games.make(game_id)
    game.reset(seed if seed is not None else random.randrange(2**31))
    while not game.done:
        player = game.current_player
        legal = game.legal_actions(player)
        if player == seat:
            console.print(Panel(game.observation(player), title=f"you are Player {seat}"))
            action = input_fn("your action> ").strip()
            action = action if action.startswith("[") else f"[{action}]"
        else:
            messages = prompt.render(
                observation=game.observation(player),
                player=player,
                example=legal[0] if legal else "[action]",
            )
            (completion,) = engine.generate(
                [
                    Request(
                        role="player",
                        messages=messages,
                        adapter=adapter,
                        sampling=SamplingParams(temperature=0.0, max_new_tokens=64),
                    )
                ]
            )
            action = extract_action(completion.text, lenient=True) or "[no action]"
            console.print(f"[bold]model[/]: {completion.text.strip()}\n[bold]→ {action}[/]")
        result = game.step(match_legal(action, legal) or action if legal else action)
        if not result.valid:
            console.print(f"[red]invalid move by Player {player}: {result.reason}[/]")
    outcome = game.outcome()
    console.print(f"[bold]game over[/]: {game.reason}  outcome {outcome}")
    return outcome
