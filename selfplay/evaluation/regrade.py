"""``python -m selfplay.evaluation.regrade COMPARE OUT``: a finished comparison's answers graded
again by today's grader, without running a model.

Every record keeps the answer extracted from its reply, so a fix to grading (the 2026-11-28 one:
Math-Verify no longer passes "33" as the prime factorization "3 × 11", nor "12/14" as the
simplified "6/7"; ``curricula.answers.score_extracted``) can be applied to a comparison that
took hours to run. OUT is a copy of COMPARE (run folders without their checkpoints) whose
records, evaluation rows and table (results.md, the page) are those of the new grading; COMPARE
is left as it was. Only suites of reasoning-gym problems (whose verifiers the records are graded
by) are regraded; a comparison on another suite is refused in one line.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from curricula.answers import score_extracted
from selfplay.core.errors import UserError
from selfplay.evaluation.compare import measures_of
from selfplay.evaluation.compare_page import EVALUATIONS, read_compare, summarize, write_results
from selfplay.evaluation.evaluate import Problem, load_suite
from selfplay.evaluation.heldout import problem_ids, read_records, summary, write_records


def problems_by_id(suite: str, size: int) -> dict[str, Problem]:
    """The suite's problems by record id, ``<family>/<k>`` (k: the place among its family's)."""
    problems = load_suite(suite, None, size)
    if any(problem.entry is None for problem in problems):
        raise UserError(f"suite {suite}: its problems have no reasoning-gym verifier to grade "
                        "again with")
    return dict(zip(problem_ids(problems), problems, strict=True))


def regrade_records(records: list[dict], problems: dict[str, Problem]) -> int:
    """Each record's ``greedy`` from its extracted answer; how many changed."""
    changed = 0
    for record in records:
        problem = problems[record["id"]]
        greedy = int(score_extracted(record["answer"], problem.entry, problem.dataset) >= 1.0)
        changed += greedy != record["greedy"]
        record["greedy"] = greedy
    return changed


def regrade(folder: Path, out: Path) -> tuple[int, int]:
    """OUT: COMPARE with every evaluation graded again; (records, how many changed)."""
    manifest = read_compare(folder)
    if out.exists():
        raise UserError(f"{out} exists; give a new folder")
    problems = problems_by_id(manifest["suite"], manifest["suite_size"])
    shutil.copytree(folder, out, ignore=shutil.ignore_patterns("checkpoints"))
    measures = measures_of(manifest)
    rows, total, changed = [], 0, 0
    for row in read_records(out / EVALUATIONS):
        records = read_records(out / row["records"])
        changed += regrade_records(records, problems)
        total += len(records)
        write_records(out / row["records"], records)
        rows.append(row | summary(records, measures))
    write_records(out / EVALUATIONS, rows)
    write_results(out, summarize(out))
    return total, changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfplay.evaluation.regrade",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("compare", type=Path, help="a finished comparison's folder")
    parser.add_argument("out", type=Path, help="a new folder for the regraded copy")
    args = parser.parse_args(argv)
    try:
        total, changed = regrade(args.compare, args.out)
    except UserError as exc:
        print(f"regrade: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {total} records graded again, {changed} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
