"""``selfplay evaluate``: suites, gold answers, Math-Verify grading, pass@k rows, and a real
evaluation of a tiny run's archived checkpoints (with and without the Python tool)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from selfplay.cli.main import main
from selfplay.core.errors import UserError
from selfplay.evaluation.evaluate import (
    Problem,
    evaluate,
    gold_answer,
    grade,
    load_suite,
    summarize,
)
from selfplay.evaluation.run_model import RunModel, adapter_weights_from_trainable
from selfplay.stats.passk import pass_at_k
from tests.tiny_run import make_tiny_run

ROOT = Path(__file__).resolve().parent.parent


def test_gold_answers_of_gsm8k_math_and_plain_rows():
    assert gold_answer({"answer": "She pays 3 * 400 = 1200.\n#### 1,200"}) == "1200"
    assert gold_answer({"problem": "p", "answer": "\\frac{1}{2}"}) == "\\frac{1}{2}"
    assert gold_answer({"solution": "so it is \\boxed{\\sqrt{2}}."}) == "\\sqrt{2}"
    assert gold_answer({"question": "q"}) is None


def test_math_verify_grades_equivalent_forms():
    half = Problem("What is 1/2?", "0.5", "local")
    assert grade("It is \\boxed{\\frac{1}{2}}", half) == ("\\frac{1}{2}", True)
    assert grade("It is \\boxed{3}", half) == ("3", False)
    assert grade("no answer here", half) == (None, False)


def test_suites_offline(tmp_path):
    from selfplay.loops import validate
    from tests.conftest import tiny_config

    config = validate(tiny_config(tmp_path), "test")  # trains on chain_sum
    heldout = load_suite("reasoning-gym", config, 18)
    assert "chain_sum" not in {p.family for p in heldout} and len(heldout) == 18
    again = load_suite("reasoning-gym", config, 18)
    assert [p.question for p in heldout] == [p.question for p in again]  # fixed seeds
    assert {p.family for p in load_suite("rg:gcd,lcm", config, 4)} == {"gcd", "lcm"}
    local = tmp_path / "gsm.jsonl"
    local.write_text(json.dumps({"question": "2+2?", "answer": "#### 4"}) + "\n"
                     + json.dumps({"problem": "3+3?", "answer": "6"}) + "\n")
    assert [(p.question, p.answer) for p in load_suite(str(local), config, 10)] == [
        ("2+2?", "4"), ("3+3?", "6")]
    for bad, message in [("gsm9k", "unknown suite"), (str(tmp_path / "x.jsonl"), "does not exist"),
                         ("rg:no_such_family", "no_such_family")]:
        with pytest.raises(UserError, match=message):
            load_suite(bad, config, 4)


def test_summarize_pass_at_k_matches_the_closed_form():
    problems = [Problem("a", "1", "f"), Problem("b", "2", "g")]
    outputs = [[{"correct": c, "tool_calls": 0} for c in flags]
               for flags in ([True, False, False, True], [False] * 4)]
    row = summarize("s", 3, "sampled", False, problems, outputs, (1, 2, 4))
    assert row["pass@1"] == pytest.approx(0.25)
    assert row["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + 0) / 2)
    assert row["pass@2"] == pytest.approx((1 - 1 / 6) / 2)
    assert row["pass@4"] == 0.5 and row["accuracy"] == 0.25
    assert row["accuracy/f"] == 0.5 and row["accuracy/g"] == 0.0


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_evaluate_a_tiny_run_at_archived_steps(tmp_path, capsys):
    run_dir, world = make_tiny_run(tmp_path)
    # archive: every step kept, while only one full checkpoint survives pruning
    assert sorted(p.name for p in (run_dir / "checkpoints" / "archive").iterdir()) == [
        "step-000001", "step-000002"]
    assert [p.name for p in (run_dir / "checkpoints").glob("step-*")] == ["step-000002"]
    model = RunModel(run_dir)
    assert [s.step for s in model.snapshots()] == [0, 1, 2]
    # the archived trainable weights map onto the learner's own peft names exactly
    state = torch.load(model.snapshot(2).path / "state.pt", weights_only=False)
    mapped = adapter_weights_from_trainable(state["learner"]["trainable"], "shared")
    live = world.learner.adapter_weights("shared")
    assert mapped.keys() == live.keys() and all(torch.equal(mapped[k], live[k]) for k in live)
    model.close()
    rows = evaluate(run_dir, "rg:basic_arithmetic", size=3, samples=4, ks=(1, 2, 4, 8),
                    tool=True, step=1)
    assert [r["setting"] for r in rows] == ["greedy", "sampled", "greedy +tool", "sampled +tool"]
    sampled = rows[1]
    assert sampled["step"] == 1 and sampled["problems"] == 3 and sampled["samples"] == 4
    assert "pass@8" not in sampled and sampled["pass@1"] == pytest.approx(sampled["accuracy"])
    assert sampled["pass@1"] <= sampled["pass@2"] <= sampled["pass@4"]
    records = [json.loads(line) for line in
               (run_dir / "evaluations" / "rg_basic_arithmetic-step-1.jsonl").read_text()
               .splitlines()]
    assert len(records) == 12 and {len(r["answers"]) for r in records} == {1, 4}
    assert len((run_dir / "evaluations.jsonl").read_text().splitlines()) == 4
    assert main(["evaluate", str(run_dir), "--suite", "rg:gcd", "--step", "7"]) == 2
    args = ["evaluate", str(run_dir), "--suite", "rg:gcd", "--size", "2", "--samples", "2"]
    assert main([*args, "--k", "1,2", "--json"]) == 0  # machine-readable rows
    json_rows = json.loads(capsys.readouterr().out)
    assert [r["setting"] for r in json_rows] == ["greedy", "sampled"]
    assert json_rows[1]["samples"] == 2 and "pass@2" in json_rows[1]
    # the tiny random model as judge never says \boxed{yes}: q1 = 0, refused in one line
    calibration = tmp_path / "calibration.jsonl"
    calibration.write_text("".join(json.dumps(
        {"question": "2+2?", "reference": "4", "response": f"\\boxed{{{r}}}", "label": r == 4})
        + "\n" for r in (4, 5, 4, 3)))
    with pytest.raises(UserError, match="no better than chance"):
        evaluate(run_dir, "rg:gcd", size=2, samples=2, ks=(1,), judge=calibration)


def test_judge_prompt_verdicts_and_correction():
    from roles import load_role
    from selfplay.evaluation.judge import corrected, parse_verdict

    messages = load_role("judge").render(question="q?", reference="4", response="it is 4")
    assert "Reference answer:\n4" in messages[-1]["content"] and messages[0]["role"] == "system"
    assert parse_verdict("The answer matches. \\boxed{yes}") is True
    assert parse_verdict("\\boxed{No}") is False
    assert parse_verdict("Yes.") is True and parse_verdict("maybe") is False
    calibration = [{"label": True}] * 4 + [{"label": False}] * 4
    # judge: 3 of 4 right ones accepted (q1 .75), 3 of 4 wrong ones rejected (q0 .75)
    said = [True, True, True, False, False, False, False, True]
    estimate = corrected(calibration, said, [True] * 6 + [False] * 4)  # p̂ = 0.6
    assert estimate.theta == pytest.approx((0.6 + 0.75 - 1) / 0.5)
    with pytest.raises(UserError, match="no better than chance"):
        corrected(calibration, [True, False] * 4, [True, False])


def test_cli_bad_suite_and_offline_hub_are_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(
        (ROOT / "experiments" / "rlvr-sanity.yaml").read_text() + "name: x\n")
    assert main(["evaluate", str(run_dir), "--suite", "nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "selfplay", "evaluate", str(run_dir), "--suite",
         "hf:openai/gsm8k:main"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "hub dataset 'openai/gsm8k' could not be loaded" in done.stderr


@pytest.mark.parametrize("k", ["4", "1,3", "0"])
def test_cli_refuses_pass_at_k_above_the_samples(tmp_path, capsys, k):
    """pass@k of n samples needs k <= n: --k 4 with --samples 2 used to exit 0 without pass@4."""
    args = ["evaluate", str(tmp_path), "--suite", "reasoning", "--k", k, "--samples", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass@k needs 1 <= k <= --samples (2)" in err[0]


@pytest.mark.parametrize(("family", "item", "reply", "correct"), [
    ("prime_factorization", 1, "\\boxed{33}", False),  # the number restated: not its factors
    ("prime_factorization", 1, "\\boxed{3 × 11}", True),
    ("fraction_simplification", 0, "\\boxed{12/14}", False),  # equal in value, not simplified
    ("basic_arithmetic", 0, "\\boxed{4.0}", True),  # a plain number: Math-Verify's value
])
def test_math_verify_raises_only_a_plain_number_reference(family, item, reply, correct):
    """Math-Verify evaluates "3 × 11" to 33 and "6/7" to a value: for a reference whose form is
    the answer, the family's verifier decides (before the fix, "33" counted as the prime
    factorization of 33: the compare suite's base accuracy on that family was 0.867)."""
    import reasoning_gym

    from curricula.answers import grade_answer
    from selfplay.evaluation.evaluate import COMPARE_FAMILIES, SUITE_SEED

    index = list(COMPARE_FAMILIES).index(family)
    dataset = reasoning_gym.create_dataset(family, size=4, seed=SUITE_SEED + index,
                                           **COMPARE_FAMILIES[family])
    entry = list(dataset)[item]
    assert entry["answer"] in ("3 × 11", "6/7", "4")
    assert grade_answer(reply, entry, dataset, lenient=True)["correct"] is correct
