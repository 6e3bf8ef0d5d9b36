"""Bad input to the CURE loop: a problem file that is wrong is one line naming the file, the line
and the field (or the problem and the test), before any run folder exists; a program that never
halts is killed at the time limit and counted, never a crash, and nothing is lost."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from curricula.unit_tests import UnitTest, load_problems
from sandbox.stdio import run_matrix
from selfplay.core.errors import UserError
from selfplay.loops import make_loop, validate
from selfplay.loops.cure.loop import Played, check_references, step_metrics
from tests.test_cure import SUM, cure_config, write_problems


def rows_file(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("row, message", [
    ({k: v for k, v in SUM.items() if k != "reference"}, "problems.jsonl:2: missing field "
                                                         "`reference`"),
    ({k: v for k, v in SUM.items() if k != "tests"}, "problems.jsonl:2: missing field `tests`"),
    (dict(SUM, tests=[]), "problems.jsonl:2: field `tests` must be a non-empty list"),
    (dict(SUM, tests=[{"input": "1 2\n"}]), "problems.jsonl:2: field `tests[0]` must be"),
    (dict(SUM, statement=""), "problems.jsonl:2: field `statement` must be a non-empty string"),
    ("{not json", "problems.jsonl:2: not JSON"),
    (dict(SUM), "problems.jsonl:2: duplicate problem id 'sum-two'"),
])
def test_a_malformed_row_is_one_line_naming_the_file_line_and_field(tmp_path, row, message):
    path = rows_file(tmp_path, [SUM, row])
    with pytest.raises(UserError) as caught:
        load_problems(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_or_empty_file_is_one_line(tmp_path) -> None:
    with pytest.raises(UserError, match="cure.problems file .* does not exist"):
        load_problems(tmp_path / "absent.jsonl")
    with pytest.raises(UserError, match="holds no problem"):
        load_problems(rows_file(tmp_path, [""]))


def test_a_reference_that_fails_its_own_test_names_the_problem_and_the_test(tmp_path) -> None:
    wrong = dict(SUM, id="off-by-one", tests=[*SUM["tests"], {"input": "1 1\n", "output": "3\n"}])
    with pytest.raises(UserError) as caught:
        check_references(load_problems(rows_file(tmp_path, [wrong])), "f.jsonl", 1.0, 1)
    assert str(caught.value) == ("f.jsonl: problem 'off-by-one': its reference program fails its "
                                 "own test 2 (printed '2', expected '3')")


def test_a_reference_that_never_halts_or_raises_is_one_line(tmp_path) -> None:
    looping = dict(SUM, id="loops", reference="while True:\n    pass")
    with pytest.raises(UserError, match=r"'loops'.*test 0 \(ran past 0.5 s\)"):
        check_references(load_problems(rows_file(tmp_path, [looping])), "f", 0.5, 1)
    raising = dict(SUM, id="raises", reference="raise ValueError('no')")
    with pytest.raises(UserError, match=r"'raises'.*test 0 \(failed: ValueError: no\)"):
        check_references(load_problems(rows_file(tmp_path, [raising])), "f", 1.0, 1)


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_a_program_that_never_halts_is_timed_out_and_counted(tmp_path) -> None:
    problems = write_problems(tmp_path / "p.jsonl", [SUM])
    loop = make_loop(validate(cure_config(tmp_path, problems, time_limit_s=0.5), "test"))

    async def run(code: str):
        return await loop.tool.pool.arun(code)  # the loop's own sandbox, 0.5 s a run

    programs = ["while True:\n    pass", "a, b = map(int, input().split())\nprint(a + b)", None]
    tests = [UnitTest("3 4\n", "7\n"), UnitTest("1 1\n", "2\n"), None]
    try:
        execution = asyncio.run(run_matrix(run, programs, tests))
    finally:
        loop.close()
    # the loop times out on both tests, the right program passes both, nothing runs for None
    assert execution.matrix == [[0, 0, 0], [1, 1, 0], [0, 0, 0]]
    assert (execution.runs, execution.timeouts, execution.errors) == (4, 2, 0)
    played = Played.of("k", load_problems(problems)[0], 1, programs, tests[1:], execution,
                        [True, None])
    metrics = step_metrics([played])
    assert metrics["cure/timeout_rate"] == 0.5 and metrics["cure/code_ran"] == pytest.approx(1 / 3)


def test_the_command_line_refuses_a_bad_problem_file_in_one_line_and_makes_no_folder(
    tmp_path,
) -> None:
    wrong = dict(SUM, reference="print(0)")
    problems = rows_file(tmp_path, [wrong])
    experiment = tmp_path / "bad.yaml"
    experiment.write_text(yaml.safe_dump(cure_config(tmp_path, problems)))
    env = {**os.environ, "WANDB_MODE": "disabled"}
    done = subprocess.run([sys.executable, "-m", "selfplay", "run", str(experiment)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "its reference program fails its own test 0" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
