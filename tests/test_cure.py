"""The CURE loop (selfplay/loops/cure, curricula/unit_tests.py): replies parsed, programs run
on stdin in the real sandbox, and one step of the loop with scripted replies, its rewards,
advantages, episodes, task rows and metrics worked out by hand."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from curricula.unit_tests import DEFAULT_PROBLEMS, load_problems, parse_program, parse_unit_test
from sandbox import SandboxLimits, SandboxPool
from sandbox.stdio import harness, passed
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import make_loop, validate
from tests.scripted import ScriptedEngine

EXACT = {"abs": 1e-12}  # ratios of small integers and square roots of them


# ---------------------------------------------------------------------- parsing
def test_the_last_python_block_is_the_program_and_an_open_block_counts() -> None:
    reply = "Think.\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    assert parse_program(reply) == "print(2)"
    assert parse_program("```python\nn = int(input())\nprint(n)") == "n = int(input())\nprint(n)"
    assert parse_program("no code here") is None
    assert parse_program("```python\n\n```") is None


def test_a_unit_test_in_the_papers_form_with_an_explanation_holding_fences() -> None:
    reply = ("Let me think.\n**Test Input:**\n```\n3 4\n```\n\n**Test Output:**\n```\n7\n```\n\n"
             "**Explanation:**\n3 + 4 = 7, see ```python print(7)```")
    test = parse_unit_test(reply)
    assert (test.input, test.output) == ("3 4\n", "7\n")


def test_a_unit_test_in_plain_lines_ends_at_a_blank_line() -> None:
    test = parse_unit_test("Input:\n2\n5 6\nOutput:\n11\n\nbecause 5 + 6 = 11")
    assert (test.input, test.output) == ("2\n5 6\n", "11\n")
    assert parse_unit_test("Input: 1\\n2\nOutput: 3").input == "1\n2\n"  # a written \n


@pytest.mark.parametrize("reply", [
    "Input:\n3\n",  # no output
    "Input:\n3\nOutput:\n\n\n",  # empty output
    "Output: 7",  # no input
    "the input is 3 and the output is 7",  # no labels
])
def test_a_malformed_unit_test_is_none(reply: str) -> None:
    assert parse_unit_test(reply) is None


# ---------------------------------------------------------------------- the harness
@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=1, limits=SandboxLimits(wall_s=2.0, cpu_s=2.0)) as pool:
        yield pool


@pytest.mark.parametrize("program", [
    "a, b = map(int, input().split())\nprint(a + b)",
    "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
    "print(sum(map(int, open(0).read().split())))",
    "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))",
    "import sys\nprint(7)\nsys.exit(0)\nprint(8)",
    "if __name__ == '__main__':\n    print(7)",
])
def test_every_way_of_reading_stdin_sees_the_tests_input(pool, program: str) -> None:
    result = pool.run(harness(program, "3 4\n"))
    assert passed(result, "7\n"), result


def test_an_exception_fails_the_run_even_after_the_right_output(pool) -> None:
    result = pool.run(harness("print(7)\nraise ValueError('late')", "3 4\n"))
    assert result.stdout == "7\n" and not passed(result, "7\n")


def test_outputs_match_up_to_whitespace(pool) -> None:
    result = pool.run(harness("print('1  2')\nprint()\nprint(3)", ""))
    assert passed(result, "1 2 3")
    assert not passed(result, "1 2")


# ---------------------------------------------------------------------- one step
SUM = {"id": "sum-two", "statement": "Read a and b. Print a + b.",
       "reference": "a, b = map(int, input().split())\nprint(a + b)",
       "tests": [{"input": "3 4\n", "output": "7\n"}, {"input": "-2 5\n", "output": "3\n"}]}
PROGRAMS = [
    "```python\na, b = map(int, input().split())\nprint(a + b)\n```",  # P0: right
    "```python\na, b = map(int, input().split())\nprint(a * b)\n```",  # P1: a·b
    "I do not know.",  # P2: no program
    "```python\nimport sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit()\n```",
]
TESTS = [
    "**Test Input:**\n```\n2 2\n```\n**Test Output:**\n```\n4\n```",  # U0: right, 2·2 = 4 too
    "**Test Input:**\n```\n1 2\n```\n**Test Output:**\n```\n3\n```",  # U1: right, separates
    "**Test Input:**\n```\n1 1\n```\n**Test Output:**\n```\n5\n```",  # U2: wrong
    "I would test with big numbers.",  # U3: malformed
]


class CureScript(ScriptedEngine):
    def __init__(self) -> None:
        super().__init__()
        self.count = {"coder": 0, "tester": 0}

    def reply(self, request, prompt: str) -> str:
        index = self.count[request.role]
        self.count[request.role] += 1
        return (PROGRAMS if request.role == "coder" else TESTS)[index % 4]


def cure_config(tmp_path: Path, problems: Path, **cure) -> dict:
    return {
        "name": "cure-test", "loop": "cure", "run_dir": str(tmp_path / "runs"),
        "model": {"path": "tiny-random"}, "sampling": {"max_new_tokens": 6},
        "train": {"steps": 2, "lr": 1e-3, "lora": {"r": 4, "alpha": 8}},
        "roles": {"coder": {"prompt": "cure_coder"}, "tester": {"prompt": "cure_tester"}},
        "cure": {"problems": str(problems), "problems_per_step": 1, "codes": 4, "tests": 4,
                 "max_gt_tests": 2, "time_limit_s": 1.0, "pool_size": 2, **cure},
        "logging": {"wandb": "disabled", "progress": False},
    }


def write_problems(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """One collected step of the scripted problem, and the loop's samples of it."""
    folder = tmp_path_factory.mktemp("cure")
    problems = write_problems(folder / "problems.jsonl", [SUM])
    loop = make_loop(validate(cure_config(folder, problems), "test"))
    try:
        collected = asyncio.run(loop.collect(BatchingPolicy(CureScript()), 0))
        samples = loop.samples(collected.episodes)
    finally:
        loop.close()
    return collected, samples


def test_the_step_rewards_programs_and_tests_as_worked_out_by_hand(step) -> None:
    collected, _ = step
    # GT columns (3 4 → 7, −2 5 → 3): P0 and P3 pass both, P1 prints 12 and −10, P2 has none
    coder = [e.rewards["coder"] for e in collected.episodes if "coder" in e.rewards]
    assert coder == [1.0, 0.0, 0.0, 1.0]
    # C = {P0, P3}, W = {P1, P2}. U0 (2 2 → 4): right, P1 passes (2·2), P2 fails → 1 counted;
    # U1 (1 2 → 3): right, both of W fail → 2; U2 (1 1 → 5): wrong, no W passes → −0;
    # U3 malformed: no program passes → wrong, −0. Paper form: counts.
    tester = [e.rewards["tester"] for e in collected.episodes if "tester" in e.rewards]
    assert tester == [1.0, 2.0, 0.0, 0.0]


def test_the_step_standardises_each_role_per_problem(step) -> None:
    _, samples = step
    by_role = {role: [s.advantage for s in samples if s.turn.role == role]
               for role in ("coder", "tester")}
    # code 1, 0, 0, 1: mean ½, std ½ → ±1
    assert by_role["coder"] == pytest.approx([1.0, -1.0, -1.0, 1.0], **EXACT)
    # tests 1, 2, 0, 0: mean ¾, deviations ¼, 5/4, −¾, −¾, variance 11/16, std √11/4
    root = math.sqrt(11)
    assert by_role["tester"] == pytest.approx([1 / root, 5 / root, -3 / root, -3 / root],
                                              **EXACT)
    assert {s.group_id for s in samples} == {"s0-p0-sum-two-code", "s0-p0-sum-two-test"}


def test_the_step_records_every_reply_its_task_row_and_metrics(step) -> None:
    collected, _ = step
    assert len(collected.episodes) == 8  # nothing lost: the malformed replies are episodes too
    (row,) = collected.tasks
    assert (row.task_id, row.p_hat, row.samples, row.reward, row.kept) == (
        "s0-p0-sum-two", 0.5, 4, 0.75, True)
    assert row.solver_answers == ["2/2", "0/2", None, "2/2"]
    m = collected.metrics
    assert m["cure/code_parsed"] == 0.75 and m["cure/code_accuracy"] == 0.5
    assert m["cure/code_ran"] == 0.75  # P3's sys.exit() is a normal end
    assert m["cure/test_well_formed"] == 0.75
    assert m["cure/test_accuracy"] == 0.5  # the reference prints 4 and 3, not 5
    assert m["cure/test_correct_by_c"] == 0.5
    assert m["cure/gt_pass_rate"] == 0.5  # 4 of 8 cells
    # well-formed tests × programs: U0 passed by P0, P1, P3; U1 by P0, P3; U2 by none
    assert m["cure/generated_pass_rate"] == pytest.approx(5 / 12, **EXACT)
    assert m["cure/runs"] == 15.0  # 3 programs × (2 GT + 3 well-formed tests)
    assert (m["cure/c_empty"], m["cure/w_empty"], m["cure/timeout_rate"]) == (0.0, 0.0, 0.0)
    assert (m["cure/dropped_code_problems"], m["cure/dropped_test_problems"]) == (0.0, 0.0)


# ---------------------------------------------------------------------- problems
def test_the_shipped_problems_are_at_least_24_and_start_easy() -> None:
    problems = load_problems(DEFAULT_PROBLEMS)
    assert len(problems) >= 24
    assert [p.id for p in problems[:3]] == ["double", "square", "sum-two"]
    assert all(1 <= len(p.tests) <= 8 for p in problems)


def test_file_order_cycles_and_shuffle_visits_every_problem_once_a_pass(tmp_path) -> None:
    rows = [dict(SUM, id=f"p{i}") for i in range(5)]
    problems = write_problems(tmp_path / "five.jsonl", rows)
    loop = make_loop(validate(cure_config(tmp_path, problems, order="file",
                                          problems_per_step=3), "test"))
    assert [p.id for p in loop.draw() + loop.draw()] == ["p0", "p1", "p2", "p3", "p4", "p0"]
    shuffled = make_loop(validate(cure_config(tmp_path, problems, problems_per_step=5), "test"))
    first = [p.id for p in shuffled.draw()]
    assert sorted(first) == ["p0", "p1", "p2", "p3", "p4"] and first != sorted(first)
    state = shuffled.state_dict()
    shuffled.draw()
    shuffled.load_state_dict(state)  # a resume draws what the saved run would have drawn
    again = [p.id for p in shuffled.draw()]
    shuffled.load_state_dict(state)
    assert [p.id for p in shuffled.draw()] == again


# ---------------------------------------------------------------------- the run page
def test_the_run_page_draws_the_loops_metrics_in_their_own_section(tmp_path) -> None:
    from selfplay.analysis.metric_sections import loop_section, other_metrics_section
    from selfplay.analysis.rundata import RunData

    (tmp_path / "config.yaml").write_text("loop: cure\n")
    rows = [{"step": 0, "time": 1.0, "cure/code_accuracy": 0.25, "cure/runs": 40.0,
             "sync/seconds": 0.1},
            {"step": 1, "time": 2.0, "cure/code_accuracy": 0.5, "cure/runs": 44.0,
             "sync/seconds": 0.2}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = RunData.open(tmp_path)
    section = loop_section(run)
    assert section.anchor == "loop-metrics"
    rates = next(p for p in section.plots if p.name == "loop-cure-rates")
    assert rates.series[0].y == [0.25, 0.5]
    assert any(p.name == "loop-cure-runs" for p in section.plots)
    assert section.tables[0].rows == [["cure/code_accuracy", "0.250", "0.500", 2],
                                      ["cure/runs", "40.000", "44.000", 2]]
    other = other_metrics_section(run)  # drawn once: the loop's keys are not "other" metrics
    assert "sync (1)" in other.lines[0] and "cure" not in other.lines[0]


@pytest.mark.parametrize("settings, expected", [
    # shares of W = {P1, P2}: U0 rejects one of two, U1 both; U2 and U3 let none through
    ({"reward_form": "code"}, [0.5, 1.0, 0.0, 0.0]),
    # only U1 rejects every wrong program; no wrong test lets one through
    ({"reward_form": "code", "post_stage": True}, [0.0, 1.0, 0.0, 0.0]),
])
def test_the_reward_settings_reach_the_step(tmp_path, settings: dict, expected: list) -> None:
    problems = write_problems(tmp_path / "problems.jsonl", [SUM])
    loop = make_loop(validate(cure_config(tmp_path, problems, **settings), "test"))
    try:
        collected = asyncio.run(loop.collect(BatchingPolicy(CureScript()), 0))
    finally:
        loop.close()
    assert [e.rewards["tester"] for e in collected.episodes if "tester" in e.rewards] == expected
