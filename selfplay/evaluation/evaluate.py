"""``selfplay evaluate RUN --suite NAME``: held-out evaluation of a run's weights.

Suites (offline by default):

- ``reasoning-gym`` — reasoning-gym families the run did not train on, at fixed seeds;
  ``rg:<family>[,<family>...]`` names families explicitly;
- a local JSONL file of question/answer pairs (GSM8K ``question``/``answer`` with ``#### n``,
  MATH-500 and AIME ``problem``/``answer``; ``solution`` with a ``\\boxed{}`` works too);
- ``hf:<dataset>[:<config>][@<split>]`` — a Hugging Face hub dataset, only with network.

Every problem is answered greedily once and sampled ``n`` times; greedy accuracy and pass@k
(the unbiased estimator, ``selfplay.stats.passk``) are reported, without the Python tool
and, with ``--tool``, with it as well. Answers are checked by the family's verifier and
Math-Verify (``curricula.answers``). Results go to ``RUN/evaluations.jsonl`` (one row per
setting) and ``RUN/evaluations/<suite>-step-N.jsonl`` (every answer).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from curricula.answers import answers_equal, extract_answer, grade_answer, last_boxed
from roles import load_role
from selfplay.core.errors import UserError
from selfplay.core.jsonl import read_rows
from selfplay.engines.tools import ToolSandbox, ToolSettings
from selfplay.loops.base import prompt_request
from selfplay.stats.passk import mean_pass_at_k
from selfplay.types import Request, SamplingParams

# Families of the offline `reasoning-gym` suite (those a run trained on are left out).
HELDOUT_FAMILIES = (
    "basic_arithmetic", "chain_sum", "gcd", "lcm", "leg_counting", "letter_counting",
    "number_sorting", "fraction_simplification", "prime_factorization", "word_sorting",
)
# The `compare` suite (`selfplay compare`, docs/compare.md): the same problems for every loop,
# families a loop trained on included; the easy settings the CPU experiments train and probe
# with, where SmolLM2-135M answers some but not most (base accuracies, 48 tokens, 32 problems
# each: docs/compare.md#the-suite). 8 families: the default 720 problems are 90 distinct each.
COMPARE_FAMILIES: dict[str, dict] = {
    "basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "gcd": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 30},
    "leg_counting": {"min_animals": 1, "max_animals": 2},
    "lcm": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 12},
    "prime_factorization": {"min_value": 2, "max_value": 100},
    "products": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
    "fraction_simplification": {"min_value": 1, "max_value": 20, "max_factor": 5,
                                "styles": ["plain"]},
}
SUITE_SEED = 20_251_123  # fixed: every run is evaluated on the same problems
SOLVER_ROLES = ("solver", "executor", "reasoner", "player", "responder")


@dataclass
class Problem:
    question: str
    answer: str
    family: str
    entry: dict | None = None  # reasoning-gym entry (its verifier scores the answer)
    dataset: object = None


# ------------------------------------------------------------------ suites
def training_families(config) -> set[str]:
    """The reasoning-gym families the run trained on (its loop settings say which)."""
    return config.settings.trained_families() if config.settings is not None else set()


def load_suite(name: str, config, size: int) -> list[Problem]:
    if name.startswith("hf:"):
        return _hub_suite(name[3:], size)
    path = Path(name)
    if path.suffix in (".jsonl", ".json") or path.exists():
        return _jsonl_suite(path, size)
    if name.startswith("rg:"):
        families = [f for f in name[3:].split(",") if f]
    elif name == "reasoning-gym":
        families = [f for f in HELDOUT_FAMILIES if f not in training_families(config)]
    elif name == "compare":
        return _reasoning_gym_suite(list(COMPARE_FAMILIES), size, COMPARE_FAMILIES,
                                    distinct=True)
    else:
        raise UserError(
            f"unknown suite {name!r} (known: reasoning-gym, compare, rg:<family>[,...], a .jsonl "
            "file, hf:<dataset>)"
        )
    return _reasoning_gym_suite(families, size)


def _reasoning_gym_suite(families: list[str], size: int,
                         configs: dict[str, dict] | None = None,
                         distinct: bool = False) -> list[Problem]:
    """``size`` problems split evenly over ``families``, family k generated with seed
    SUITE_SEED + k (item i of a family does not depend on how many are drawn, so a larger suite
    holds the smaller one). ``distinct``: a question drawn twice counts once (a paired
    comparison counts problems, and a repeat is not a new one): up to 4× the items are drawn to
    find ``size / families`` distinct ones, and a family with fewer gives what it has."""
    import reasoning_gym

    per_family = max(1, size // max(len(families), 1))
    problems = []
    for index, family in enumerate(families):
        try:
            dataset = reasoning_gym.create_dataset(family, size=per_family * (4 if distinct else 1),
                                                   seed=SUITE_SEED + index,
                                                   **(configs or {}).get(family, {}))
        except Exception as exc:
            raise UserError(f"reasoning-gym family {family!r}: {exc}".splitlines()[0]) from exc
        seen: set[str] = set()
        for entry in dataset:
            if distinct and entry["question"] in seen:
                continue
            seen.add(entry["question"])
            problems.append(Problem(entry["question"], str(entry["answer"]), family, entry,
                                    dataset))
            if len(seen) == per_family:
                break
    return problems


def gold_answer(row: dict) -> str | None:
    """The gold answer of a JSONL row: ``answer`` (GSM8K's text after ``####``), else the last
    ``\\boxed{}`` of ``solution``."""
    answer = row.get("answer")
    if answer is not None:
        text = str(answer)
        if "####" in text:  # GSM8K: the reasoning, then "#### 1,234"
            return text.rsplit("####", 1)[1].strip().replace(",", "")
        return text.strip()
    if row.get("solution"):
        return last_boxed(str(row["solution"]))
    return None


def _jsonl_suite(path: Path, size: int) -> list[Problem]:
    problems = []
    for number, row in read_rows(path, what="suite file"):
        question = row.get("question") or row.get("problem") or row.get("prompt")
        answer = gold_answer(row)
        if not question or answer is None:
            raise UserError(f"{path}:{number}: needs `question` (or `problem`) and `answer` "
                            "(or a `solution` with \\boxed{})")
        problems.append(Problem(str(question), answer, path.stem))
    if not problems:
        raise UserError(f"suite file {path} has no problems")
    return problems[:size]


def _hub_suite(spec: str, size: int) -> list[Problem]:
    name, _, split = spec.partition("@")
    name, _, subset = name.partition(":")
    try:
        from datasets import load_dataset

        rows = load_dataset(name, subset or None, split=split or "test")
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"hub dataset {name!r} could not be loaded (offline? {reason[:160]}); "
                        "give a local .jsonl file instead") from exc
    problems = []
    for row in rows:
        question = row.get("question") or row.get("problem")
        answer = gold_answer(row)
        if question and answer is not None:
            problems.append(Problem(str(question), answer, name))
        if len(problems) >= size:
            break
    if not problems:
        raise UserError(f"hub dataset {name!r}: no rows with question/problem and answer")
    return problems


# ------------------------------------------------------------------ grading
def grade(text: str, problem: Problem) -> tuple[str | None, bool]:
    """(extracted answer, correct): the family's verifier, then Math-Verify equivalence."""
    if problem.entry is not None:
        graded = grade_answer(text, problem.entry, problem.dataset, lenient=True)
        return graded["answer"], graded["correct"]
    answer, _ = extract_answer(text, lenient=True)
    return answer, answers_equal(answer, problem.answer)


# ------------------------------------------------------------------ running
def solver_role(config) -> str:
    for role in SOLVER_ROLES:
        if role in config.roles:
            return role
    return next(iter(config.roles))


ANSWER_PROMPT = "solver_terse"  # every evaluation answer's prompt (its answer is \boxed{...})
TOOL_PROMPT = "tool_solver"  # the same with the Python tool


def answer_request(problem: Problem, adapter: str, temperature: float, max_new_tokens: int,
                   seed: int, tool: bool = False) -> Request:
    """The request an evaluation answers ``problem`` with (``seed``: its own, see
    ``answer_seed``): one place, so that ``selfplay compare``'s greedy pass
    (``heldout.greedy_answers``) asks exactly what ``evaluate`` asks."""
    prompt = load_role(TOOL_PROMPT if tool else ANSWER_PROMPT)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    return prompt_request(prompt, "eval", adapter, sampling, question=problem.question)


def answer_seed(seed: int, problem_index: int, sample: int = 0) -> int:
    """The sampling seed of a problem's answer: distinct per problem and sample."""
    return seed + 1000 * problem_index + sample


async def _answer(model, request: Request, problem: Problem, tool: ToolSandbox | None) -> dict:
    calls = 0
    if tool is None:
        text = (await model.policy(request)).reply
    else:
        rollout = await tool.rollout(model.policy, request)
        text, calls = rollout.turn.reply, rollout.tool_calls
    answer, correct = grade(text, problem)
    return {"answer": answer, "correct": correct, "tool_calls": calls, "text": text[-400:]}


async def _run_setting(model, problems, samples: int, temperature: float, max_new_tokens: int,
                       tool: ToolSandbox | None, adapter: str, seed: int) -> list[list[dict]]:
    jobs = []
    for p_index, problem in enumerate(problems):
        for s in range(samples):
            request = answer_request(problem, adapter, temperature, max_new_tokens,
                                     answer_seed(seed, p_index, s), tool is not None)
            jobs.append(_answer(model, request, problem, tool))
    flat = await model.policy.gather(jobs)
    return [flat[i * samples:(i + 1) * samples] for i in range(len(problems))]


def evaluate(
    run_dir: Path,
    suite: str,
    size: int = 32,
    samples: int = 8,
    ks: tuple[int, ...] = (1, 4, 8),
    tool: bool = False,
    step: int | None = None,
    temperature: float = 1.0,
    overrides: list[str] | None = None,
    judge: Path | None = None,
) -> list[dict]:
    """Evaluate the run's weights at ``step`` (default latest) on ``suite``; returns the rows
    written to ``RUN/evaluations.jsonl``. With ``judge`` (a labelled calibration JSONL), the
    model also judges its own greedy answers and the bias-corrected accuracy is reported."""
    from selfplay.evaluation.judge import load_calibration
    from selfplay.evaluation.run_model import RunModel, load_run_config

    config = load_run_config(run_dir, overrides)
    problems = load_suite(suite, config, size)  # a bad suite fails before any model loads
    calibration = load_calibration(judge) if judge is not None else None
    ks = tuple(k for k in ks if k <= samples)
    model = RunModel(run_dir, overrides)
    snapshot = model.snapshot(step)
    model.install(snapshot)
    role = solver_role(model.config)
    adapter = model.config.roles[role].adapter_name(role) if model.lora else "shared"
    max_new = model.config.sampling.max_new_tokens
    settings = [("greedy", 1, 0.0), ("sampled", samples, temperature)]
    tool_modes: list[ToolSandbox | None] = [None]
    if tool:  # the run's own tool settings (its loop settings say which), else the defaults
        own = model.config.settings.tool_settings() if model.config.settings else None
        tool_modes.append(ToolSandbox(own or ToolSettings()))
    rows, records = [], []
    try:
        for tool_mode in tool_modes:
            for name, n, temp in settings:
                outputs = asyncio.run(_run_setting(model, problems, n, temp, max_new, tool_mode,
                                                   adapter, model.config.seed))
                row = summarize(suite, snapshot.step, name, tool_mode is not None, problems,
                                outputs, ks if name == "sampled" else (1,))
                rows.append(row)
                for problem, answers in zip(problems, outputs, strict=True):
                    records.append({"setting": row["setting"], "family": problem.family,
                                    "question": problem.question, "gold": problem.answer,
                                    "answers": answers})
                if calibration is not None and name == "greedy" and tool_mode is None:
                    rows.append(judged_row(model, adapter, calibration, problems, outputs, row))
    finally:
        for tool_mode in tool_modes:
            if tool_mode is not None:
                tool_mode.close()
        model.close()
    _write(run_dir, suite, snapshot.step, rows, records)
    return rows


def judged_row(model, adapter: str, calibration: list[dict], problems: list[Problem],
               outputs: list[list[dict]], greedy: dict) -> dict:
    """The model as judge of its greedy answers, corrected with the calibration set; the
    verifier's accuracy on the same answers stands next to it for comparison."""
    from selfplay.evaluation.judge import corrected, verdicts

    calibration_verdicts = verdicts(model.policy, adapter, [
        (str(r["question"]), str(r["reference"]), str(r["response"])) for r in calibration])
    test_verdicts = verdicts(model.policy, adapter, [
        (p.question, p.answer, o[0]["text"]) for p, o in zip(problems, outputs, strict=True)])
    estimate = corrected(calibration, calibration_verdicts, test_verdicts)
    return {**{k: greedy[k] for k in ("suite", "step", "problems", "time")},
            "setting": "greedy, judged", "samples": 1, "accuracy": estimate.theta,
            "judge/raw": estimate.p_hat, "judge/q0": estimate.q0, "judge/q1": estimate.q1,
            "judge/low": estimate.low, "judge/high": estimate.high,
            "judge/verifier_accuracy": greedy["accuracy"], "tool_calls": 0.0}


def summarize(suite: str, step: int, name: str, tool: bool, problems: list[Problem],
              outputs: list[list[dict]], ks: tuple[int, ...]) -> dict:
    counts = [(len(o), sum(a["correct"] for a in o)) for o in outputs]
    setting = f"{name}{' +tool' if tool else ''}"
    row = {"suite": suite, "step": step, "setting": setting, "problems": len(problems),
           "samples": counts[0][0] if counts else 0, "time": time.time()}
    row |= {f"pass@{k}": mean_pass_at_k(counts, k) for k in ks}
    row["accuracy"] = sum(c for _, c in counts) / max(sum(n for n, _ in counts), 1)
    row["tool_calls"] = sum(a["tool_calls"] for o in outputs for a in o) / max(
        sum(len(o) for o in outputs), 1)
    families = sorted({p.family for p in problems})
    if len(families) > 1:
        for family in families:
            chosen = [c for p, c in zip(problems, counts, strict=True) if p.family == family]
            row[f"accuracy/{family}"] = sum(c for _, c in chosen) / sum(n for n, _ in chosen)
    return row


def _write(run_dir: Path, suite: str, step: int, rows: list[dict], records: list[dict]) -> None:
    with (run_dir / "evaluations.jsonl").open("a") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    folder = run_dir / "evaluations"
    folder.mkdir(exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(suite).stem if suite.endswith(".jsonl")
                  else suite)
    with (folder / f"{safe}-step-{step}.jsonl").open("w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def print_rows(rows: list[dict]) -> None:
    from rich.table import Table

    from selfplay.running.tracking import console

    keys = [k for k in rows[0] if k.startswith("pass@")] if rows else []
    keys = sorted({k for r in rows for k in r if k.startswith("pass@")},
                  key=lambda k: int(k[5:])) or keys
    table = Table(title=f"{rows[0]['suite']} at step {rows[0]['step']}" if rows else "evaluate")
    for column in ["setting", "problems", "samples", "accuracy", *keys, "tool_calls"]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(row["setting"], str(row["problems"]), str(row["samples"]),
                      f"{row['accuracy']:.3f}",
                      *[f"{row[k]:.3f}" if k in row else "–" for k in keys],
                      f"{row['tool_calls']:.2f}")
    console.print(table)
    for row in rows:
        if "judge/raw" in row:
            console.print(
                f"judge (bias-corrected): raw {row['judge/raw']:.3f} → {row['accuracy']:.3f} "
                f"[{row['judge/low']:.3f}, {row['judge/high']:.3f}] (95%, delta method; "
                f"q0 {row['judge/q0']:.3f}, q1 {row['judge/q1']:.3f}); verifier on the same "
                f"answers: {row['judge/verifier_accuracy']:.3f}")
