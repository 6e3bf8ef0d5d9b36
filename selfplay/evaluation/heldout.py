"""Per-problem held-out evaluation for paired comparisons (``selfplay compare``, ``selfplay sweep
--suite``; docs/compare.md).

Each problem of the suite gets, from one snapshot of a run's weights:

- ``greedy``: 1 if the greedy answer is right (the family's verifier, then Math-Verify);
- ``n``, ``c``: sampled answers (temperature 1) and how many are right, for the unbiased pass@k
  (``selfplay.stats.passk``); none with ``samples = 0``, the cheap default;
- ``logprob``: the mean log-probability per token of the reference answer under the policy,
  ``\\boxed{`` + answer + ``}`` after the prompt (one forward pass, no generation; the closing
  brace ends the answer, so "4" is not credited for the start of "42").

The records of one evaluation are written as one JSONL file; pairing is by the problem's id,
``<family>/<k>`` (its place among its family's problems), which is fixed (seeded generation,
deduplicated questions) and does not depend on the suite's size: a smaller suite is the first
problems of each family of a larger one, so a curve point evaluated on fewer problems pairs
with the full evaluations on those it has. A snapshot is the
run's step-0 LoRA adapters (the base model) or an archived step; the base model's records depend
on the model, the engine, the suite and these settings, and on the seed only when answers are
sampled, so ``base_key`` names them and a comparison computes them once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import resource
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from roles import load_role
from selfplay.core.errors import UserError
from selfplay.engines.base import encode_request
from selfplay.evaluation.evaluate import (
    ANSWER_PROMPT,
    Problem,
    _run_setting,
    answer_request,
    answer_seed,
    grade,
    load_suite,
    solver_role,
)
from selfplay.stats.passk import pass_at_k
from selfplay.types import Request

PROMPT = ANSWER_PROMPT  # the prompt every loop is evaluated with (its answer is \boxed{...})
REFERENCE_PREFIX = "\\boxed{"


@dataclass(frozen=True)
class Measures:
    """What one evaluation measures: the same for every snapshot of a comparison."""

    suite: str
    size: int
    samples: int = 0  # sampled answers a problem (temperature 1) besides the greedy one
    tokens: int = 16  # at most this many new tokens an answer
    likelihood: bool = True  # the reference answer's mean log-prob per token

    def as_dict(self) -> dict:
        return asdict(self)


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children: on a shared
    machine the wall time depends on the neighbours, this does much less."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load_average() -> float:
    """The machine's 1-minute load average: costs measured on a busy machine overstate a quiet
    one's (other processes' threads, and torch's own threads spinning while they wait)."""
    return os.getloadavg()[0]


# ------------------------------------------------------------------ the suite
def reference_text(problem: Problem, suite: str, index: int) -> str:
    """The reference answer scored by the likelihood measure; a problem without one is refused."""
    answer = (problem.answer or "").strip()
    if not answer or answer == "None":
        raise UserError(f"suite {suite}: problem {index + 1} has no reference answer for the "
                        "likelihood measure; give one (`answer`), or --no-likelihood")
    return answer


def problems_for(measures: Measures, config) -> list[Problem]:
    """The suite's problems (a bad suite, or one without references for the likelihood
    measure: one line)."""
    problems = load_suite(measures.suite, config, measures.size)
    if measures.likelihood:
        for index, problem in enumerate(problems):
            reference_text(problem, measures.suite, index)
    return problems


def base_key(config, measures: Measures, seed: int) -> str:
    """What the base model's records depend on, hashed: the model, the engine, the suite and
    its measures, and the seed only where answers are sampled (greedy answers and the
    reference's likelihood do not depend on it)."""
    what = {"model": config.model.model_dump(), "engine": config.engine.model_dump(),
            "measures": measures.as_dict(), "prompt": PROMPT,
            "seed": seed if measures.samples else None}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


# ------------------------------------------------------------------ one evaluation
def reference_ids(tokenizer, request: Request, problem: Problem) -> tuple[list[int], int] | None:
    """The tokens the likelihood measure reads after the greedy request's prompt, ``\\boxed{``
    then ``answer}``, and how many of them lead (``\\boxed{``, not scored); None where the
    prompt's tokens are not the start of the prompt-and-prefix's (the tokenizer merged across
    the join), so scoring them after the prompt would not be the measure."""
    prompt = encode_request(tokenizer, request)
    with_prefix = encode_request(tokenizer, replace(request, prefill=REFERENCE_PREFIX))
    if with_prefix[: len(prompt)] != prompt:
        return None
    lead = with_prefix[len(prompt):]
    answer = tokenizer(problem.answer.strip() + "}", add_special_tokens=False).input_ids
    return lead + answer, len(lead)


def reference_logprobs(model, adapter: str, problems: list[Problem]) -> list[tuple[float, int]]:
    """(mean log-prob per token, tokens) of each problem's reference answer after its prompt
    and ``\\boxed{``: a forward pass of its own (``greedy_answers`` scores it on the greedy
    answer's prefill where the engine can)."""
    prompt = load_role(PROMPT)
    requests = [Request(role="eval", messages=prompt.render(question=p.question),
                        adapter=adapter, prefill=REFERENCE_PREFIX) for p in problems]
    tokenizer = model.engine.tokenizer
    continuations = [tokenizer(p.answer.strip() + "}", add_special_tokens=False).input_ids
                     for p in problems]
    scored = model.policy.score(requests, continuations)
    return [(sum(lp) / len(lp), len(lp)) for lp in scored]


def greedy_answers(model, adapter: str, problems: list[Problem], measures: Measures,
                   seed: int) -> tuple[list[dict], list[tuple[float, int]] | None]:
    """Each problem's greedy answer, graded, and with the likelihood measure on, the reference's
    (mean log-prob per token, tokens): scored on the greedy answer's own prefill (the hf
    engine; one pass over the prompts, not two), else by ``reference_logprobs``'s pass."""
    requests = [answer_request(problem, adapter, 0.0, measures.tokens, answer_seed(seed, index))
                for index, problem in enumerate(problems)]
    leads: list[int | None] = [None] * len(problems)
    if measures.likelihood:
        for index, (request, problem) in enumerate(zip(requests, problems, strict=True)):
            found = reference_ids(model.engine.tokenizer, request, problem)
            if found is not None:
                request.reference_ids, leads[index] = found
    completions = asyncio.run(model.policy.gather(model.policy(r) for r in requests))
    answers = []
    for completion, problem in zip(completions, problems, strict=True):
        answer, correct = grade(completion.reply, problem)
        answers.append({"answer": answer, "correct": correct})
    if not measures.likelihood:
        return answers, None
    likelihood: list[tuple[float, int] | None] = [None] * len(problems)
    for index, (completion, lead) in enumerate(zip(completions, leads, strict=True)):
        if lead is not None and completion.reference_logprobs is not None:
            scored = completion.reference_logprobs[lead:]
            likelihood[index] = (sum(scored) / len(scored), len(scored))
    missing = [i for i, found in enumerate(likelihood) if found is None]
    if missing:  # an engine that scores no references with generation, or a merged join
        for i, found in zip(missing, reference_logprobs(model, adapter,
                                                        [problems[i] for i in missing]),
                            strict=True):
            likelihood[i] = found
    return answers, likelihood  # type: ignore[return-value]


def problem_ids(problems: list[Problem]) -> list[str]:
    """Each problem's record id, ``<family>/<k>``: its place among its family's problems."""
    ids, seen = [], {}
    for problem in problems:
        place = seen[problem.family] = seen.get(problem.family, -1) + 1
        ids.append(f"{problem.family}/{place}")
    return ids


def answer_records(model, adapter: str, problems: list[Problem], measures: Measures,
                   seed: int) -> list[dict]:
    """One record per problem: greedy correctness, sampled counts, the reference's log-prob."""
    greedy, likelihood = greedy_answers(model, adapter, problems, measures, seed)
    sampled = (asyncio.run(_run_setting(model, problems, measures.samples, 1.0, measures.tokens,
                                        None, adapter, seed)) if measures.samples else None)
    records = []
    for index, (problem, problem_id) in enumerate(zip(problems, problem_ids(problems),
                                                      strict=True)):
        answer = greedy[index]
        record = {"id": problem_id, "index": index, "family": problem.family,
                  "greedy": int(answer["correct"]), "answer": answer["answer"]}
        if sampled is not None:
            record |= {"n": len(sampled[index]), "c": sum(a["correct"] for a in sampled[index])}
        if likelihood is not None:
            record |= {"logprob": likelihood[index][0], "reference_tokens": likelihood[index][1]}
        records.append(record)
    return records


def evaluate_snapshot(run_dir: Path, step: int | None, measures: Measures) -> dict:
    """The run's weights at ``step`` (0: the base model; None: the latest) on the suite: a
    summary with the records, the step, and what it cost."""
    from selfplay.evaluation.run_model import RunModel

    start, cpu = time.perf_counter(), cpu_seconds()
    overrides = [f"sampling.max_new_tokens={measures.tokens}"]
    model = RunModel(run_dir, overrides)
    loaded = cpu_seconds() - cpu  # what any evaluation pays before its first problem
    try:
        problems = problems_for(measures, model.config)
        snapshot = model.snapshot(step)
        model.install(snapshot)
        role = solver_role(model.config)
        adapter = model.config.roles[role].adapter_name(role) if model.lora else "shared"
        tokens_before = model.policy.tokens_generated
        records = answer_records(model, adapter, problems, measures, model.config.seed)
        generated = model.policy.tokens_generated - tokens_before
    finally:
        model.close()
    return summary(records, measures) | {
        "step": snapshot.step, "records": records, "generated_tokens": generated,
        "seconds": time.perf_counter() - start, "cpu_seconds": cpu_seconds() - cpu,
        "load_cpu_seconds": loaded, "load_average": load_average()}


def summary(records: list[dict], measures: Measures) -> dict:
    """Accuracy, pass@k (k = 1 and the samples), the reference's mean log-prob, per family."""
    out: dict = {"problems": len(records),
                 "greedy": sum(r["greedy"] for r in records) / max(len(records), 1)}
    if measures.samples:
        for k in sorted({1, measures.samples}):
            out[f"pass@{k}"] = sum(pass_at_k(r["n"], r["c"], k) for r in records) / len(records)
    if measures.likelihood:
        out["logprob"] = sum(r["logprob"] for r in records) / len(records)
    families = sorted({r["family"] for r in records})
    if len(families) > 1:
        out["families"] = {f: _mean([r["greedy"] for r in records if r["family"] == f])
                           for f in families}
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def record_evaluation(folder: Path, run_dir: Path, step: int | None, measures: Measures,
                      row: dict, records_path: Path,
                      rows_file: str = "evaluations.jsonl") -> bool:
    """One evaluation kept: its records written, then its row appended to ``folder/rows_file``
    (so a row always has its records). A failure other than bad input is printed and leaves
    the evaluation to be retried; False then."""
    from selfplay.running.tracking import console

    try:
        result = evaluate_snapshot(run_dir, step, measures)
    except UserError:
        raise
    except Exception as exc:  # one evaluation failing leaves the others
        console.print(f"[red]{run_dir} step {step} evaluation failed:[/] "
                      f"{type(exc).__name__}: {exc}")
        return False
    write_records(records_path, result.pop("records"))
    with (folder / rows_file).open("a") as handle:
        handle.write(json.dumps(row | result | {"records": str(records_path.relative_to(folder))})
                     + "\n")
    return True


def write_records(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(path)


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scores(records: list[dict], measure: str, k: int = 1,
           ids: list[str] | None = None) -> list[float]:
    """One number per problem, in the order of ``ids`` (default: the records' suite order):
    ``greedy`` (0/1), ``pass@k`` (unbiased, from the sampled answers), ``logprob``."""
    by_id = {r["id"]: r for r in records}
    ordered = [by_id[i] for i in ids] if ids is not None else sorted(
        records, key=lambda r: r["index"])
    if measure == "greedy":
        return [float(r["greedy"]) for r in ordered]
    if measure.startswith("pass@"):
        return [pass_at_k(r["n"], r["c"], k) for r in ordered]
    return [float(r[measure]) for r in ordered]


def common_ids(*evaluations: list[dict]) -> list[str]:
    """The problems every evaluation answered, in the first one's suite order."""
    shared = set.intersection(*[{r["id"] for r in records} for records in evaluations])
    return [r["id"] for r in sorted(evaluations[0], key=lambda r: r["index"]) if r["id"] in shared]
