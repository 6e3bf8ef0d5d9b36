"""Hand-made run folders for the analysis tests: an Agent0-like run with tasks.jsonl over two
iterations, SPIRAL-like game episodes, and an rlvr-like run, all with known contents."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _turn(text: str, tokens: int, role: str = "solver") -> dict:
    return {"role": role, "text": text, "completion_ids": list(range(tokens)),
            "prompt_ids": [1, 2], "loss_mask": [1] * tokens,
            "prompt_text": f"Your move, {role}. Actions: [check], [bet]"}


# the reply of the model's invalid move in make_game_run: HTML must stay text on the page
INVALID_REPLY = "<script>alert(1)</script> I raise: \\boxed{[raise]}"


QUESTIONS = [
    "What is 17 plus 25?",
    "What is 17 plus 25?",  # an exact duplicate within iteration 0
    "A train travels 60 km in 1.5 hours. What is its speed in km/h?",
    "How many prime numbers are there below 20?",
]
LATER = [
    "What is 17 plus 25?",  # repeats an iteration-0 question
    "Compute the determinant of [[2, 1], [1, 3]].",
    "Name the <b>capital</b> of France.",  # HTML in a question must stay text on the page
    "If x + 3 = 10, what is x?",
]


def make_curriculum_run(root: Path, steps: int = 4, final: bool = True) -> Path:
    """An Agent0-like run: 2 iterations of 4 tasks, groups of 4 solver samples per step."""
    run = root / "agent0-test"
    run.mkdir(parents=True)
    config = {"name": "agent0-test", "loop": "agent0", "seed": 0,
              "model": {"path": "tiny-random"}, "sampling": {"max_new_tokens": 32},
              "train": {"steps": steps}, "agent0": {"band": [0.3, 0.8]}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = []
    for step in range(steps):
        metrics.append({"step": step, "time": 0.0, "reward/executor": 0.1 * step,
                        "eval/accuracy": [0.2, 0.3, 0.4, 0.45][step % 4],
                        "rollout/tokens_per_s": 100.0, "rollout/seconds": 10.0,
                        "curriculum/pseudo_label_accuracy": 0.8 - 0.05 * step,
                        "train/loss": 0.5 - 0.1 * step})
    if final:
        metrics.append({"step": steps, "time": 0.0, "final": 1, "eval/accuracy": 0.5})
    _write_jsonl(run / "metrics.jsonl", metrics)
    for step in range(steps):
        # group a: 3 of 4 solved; group b: all wrong (zero variance)
        episodes = [
            {"loop": "agent0", "env": "qa", "group_id": f"s{step}-a", "step": step,
             "rewards": {"executor": float(i < 3)}, "info": {"correct": i < 3, "answer": "42",
                                                              "question": QUESTIONS[0],
                                                              "gold": "42"},
             "turns": [_turn("x" * (10 + step), 5 + step)]}
            for i in range(4)
        ] + [
            {"loop": "agent0", "env": "qa", "group_id": f"s{step}-b", "step": step,
             "rewards": {"executor": 0.0}, "info": {"correct": False, "answer": None,
                                                     "question": QUESTIONS[2], "gold": "40"},
             "turns": [_turn("y" * 8, 7)]}
            for _ in range(4)
        ]
        _write_jsonl(run / "episodes" / f"step-{step:06d}.jsonl", episodes)
    tasks = []
    for iteration, questions in enumerate([QUESTIONS, LATER]):
        for index, question in enumerate(questions):
            tasks.append({
                "step": iteration * 2 + index // 2, "iteration": iteration, "phase": "executor",
                "loop": "agent0", "kind": "qa", "task_id": f"t{iteration}-{index}",
                "question": question, "answer": ["42", "", "40", "8"][index],
                "answer_type": ["integer", "string", "integer", "integer"][index],
                "valid": index != 3 or iteration == 0, "pseudo_label": "42",
                "p_hat": [0.25, 0.5, 0.75, 1.0][index], "samples": 4,
                "solver_answers": ["42", "42", None, "1"], "tool_calls": float(index),
                "reward": 0.5, "kept": index in (1, 2), "document": None,
            })
    _write_jsonl(run / "tasks.jsonl", tasks)
    return run


def make_game_run(root: Path) -> Path:
    """A SPIRAL-like run: 2 steps of Kuhn Poker games with known winners, eval rows."""
    run = root / "spiral-test"
    run.mkdir(parents=True)
    config = {"name": "spiral-test", "loop": "spiral", "train": {"steps": 2},
              "sampling": {"max_new_tokens": 24},
              "spiral": {"games": [{"id": "kuhn_poker"}], "eval_games": 4}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    _write_jsonl(run / "metrics.jsonl", [
        {"step": s, "time": 0.0, "reward/player_0": 0.1, "game/invalid_rate": 0.5 - 0.2 * s,
         "eval/kuhn_poker/random/win": 0.4 + 0.1 * s, "eval/kuhn_poker/random/draw": 0.0,
         "eval/kuhn_poker/random/loss": 0.6 - 0.1 * s, "eval/kuhn_poker/random/invalid": 0.1,
         "eval/kuhn_poker/random/seat0/win": 0.5, "rollout/tokens_per_s": 10.0,
         "rollout/seconds": 1.0,
         # the ladder (openskill): the policy climbs past the random player at step 1
         "eval/ladder/policy/mu": 24.0 + 2 * s, "eval/ladder/policy/sigma": 7.0,
         "eval/ladder/policy/ordinal": 3.0 + 2 * s, "eval/ladder/random/mu": 26.0 - 2 * s,
         "eval/ladder/random/sigma": 7.5, "eval/ladder/random/ordinal": 3.5 - 2 * s,
         # exploitability (current with its interval, average), 4 training games per step
         **_exploitability("kuhn_poker", 0.4 - 0.1 * s, 0.4 - 0.05 * s, 4 * s, interval=True),
         **_exploitability("openspiel:leduc_poker", 2.0 - 0.5 * s, 2.0 - 0.25 * s, 4 * s)}
        for s in range(2)])
    for step in range(2):
        winners = [0, 1, None, 0]
        _write_jsonl(run / "episodes" / f"step-{step:06d}.jsonl", [
            {"loop": "spiral", "env": "kuhn_poker", "group_id": f"s{step}-g{i}", "step": step,
             "rewards": {"player_0": 1.0, "player_1": -1.0},
             "info": {"winner": w, "invalid_by": 1 if i == 3 else None, "opponent": "mirror",
                      **({"invalid_by_kind": "policy", "invalid_reason": "[raise] is not legal"}
                         if i == 3 else {})},
             # step 1: every reply 24 tokens long, the budget (truncated)
             "turns": [_turn("\\boxed{[bet]}", 4 if step == 0 else 24, "player_0")]
             + ([_turn(INVALID_REPLY, 9, "player_1")] if i == 3 else [])}
            for i, w in enumerate(winners)])
    return run


def _exploitability(game: str, current: float, average: float, hands: int,
                    interval: bool = False) -> dict[str, float]:
    key = f"eval/exploitability/{game}"
    figures = {key: current, f"{key}/average": average, f"{key}/hands": float(hands),
               f"{key}/invalid": 0.25}
    if interval:
        figures |= {f"{key}/low": current - 0.05, f"{key}/high": current + 0.1}
    return figures


def make_plugin_run(root: Path) -> Path:
    """A run of docs/extending.md's DrillLoop (a plug-in loop by import path): its own metric
    drill/win_rate, and game episodes that log who broke the rules but not why."""
    run = root / "drill-test"
    run.mkdir(parents=True)
    config = {"name": "drill-test", "loop": "my_loops.drill:DrillLoop", "train": {"steps": 2},
              "sampling": {"max_new_tokens": 16}, "drill": {"game": "my_games.nim:Nim"}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    _write_jsonl(run / "metrics.jsonl", [
        {"step": s, "time": 0.0, "reward/player": 0.5 * s, "drill/win_rate": 0.25 + 0.5 * s,
         "drill/moves": 3.0 + s, "train/loss": 0.7 - 0.1 * s} for s in range(2)])
    for step in range(2):
        _write_jsonl(run / "episodes" / f"step-{step:06d}.jsonl", [
            {"loop": "drill", "env": "my_games.nim:Nim", "group_id": f"step-{step}", "step": step,
             "rewards": {"player": 1.0 if i == 0 else -1.0},
             "info": {"winner": 0 if i == 0 else 1, "invalid_by": 0 if i == 1 else None},
             "turns": [_turn("\\boxed{[take 2]}", 5, "player"),
                       _turn("I take <b>all</b>", 6, "player")]}
            for i in range(2)])
    return run
