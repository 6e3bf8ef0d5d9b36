"""``python -m selfplay.evaluation.pool FIRST MORE OUT``: two comparisons of the same experiments
and settings, on seeds that follow on (``--first-seed``), as one comparison of all their seeds.

A rerun with other seeds (docs/compare.md#a-rerun-with-other-seeds) checks the first
comparison's intervals; when its gains fall outside them, the seeds disagree more than three of
them showed, and the honest figure is the one over every seed. OUT is a copy of FIRST (run
folders without their checkpoints) with MORE's runs, evaluations and records added and its
table (results.md, the page) made again over all the seeds. The base model's records must be
the same in both (greedy answers and the reference's log-probs): the gains are paired with
them, so a base evaluated differently (another grader, other code) is refused in one line, as
are other experiments, settings or seeds that do not follow on. Neither folder is changed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import fields
from pathlib import Path

from selfplay.analysis.rundata import read_jsonl
from selfplay.analysis.sweepdata import MANIFEST as SWEEP
from selfplay.analysis.sweepdata import read_manifest
from selfplay.core.errors import UserError
from selfplay.evaluation.compare import CompareSpec
from selfplay.evaluation.compare_page import (
    EVALUATIONS,
    MANIFEST,
    TIMES,
    read_compare,
    summarize,
    write_results,
)
from selfplay.evaluation.heldout import read_records, write_records

# what must agree for two comparisons to be one: the spec but its seeds, and the folder names
SAME = tuple(f.name for f in fields(CompareSpec) if f.name not in ("seeds", "first_seed")) + (
    "names",)


def check(first: dict, more: dict, first_folder: Path, more_folder: Path) -> None:
    differ = [key for key in SAME if first.get(key) != more.get(key)]
    if differ:
        raise UserError(f"{more_folder} is not {first_folder} with other seeds: its "
                        f"{', '.join(differ)} differ")
    follows = first["first_seed"] + first["seeds"]
    if more["first_seed"] != follows:
        raise UserError(f"{more_folder}'s seeds start at {more['first_seed']}, not at "
                        f"{follows} where {first_folder}'s end: pool seeds that follow on")


def base_rows(first_folder: Path, more_folder: Path) -> list[dict]:
    """MORE's base evaluations that FIRST lacks; those both hold must have the same records."""
    have = {row["key"]: row for row in read_jsonl(first_folder / EVALUATIONS)
            if row["which"] == "base"}
    new = []
    for row in read_jsonl(more_folder / EVALUATIONS):
        if row["which"] != "base":
            continue
        if row["key"] not in have:
            new.append(row)
            continue
        mine = read_records(first_folder / have[row["key"]]["records"])
        theirs = read_records(more_folder / row["records"])
        if _answers(mine) != _answers(theirs):
            raise UserError(f"the base model's records {row['records']} differ between "
                            f"{first_folder} and {more_folder} (another grader or other "
                            "code): gains paired with two bases cannot be pooled")
    return new


def _answers(records: list[dict]) -> list[tuple]:
    return [(r["id"], r["greedy"], r.get("logprob")) for r in records]


def pool(first_folder: Path, more_folder: Path, out: Path) -> dict:
    """OUT: FIRST and MORE as one comparison over both their seeds; its manifest."""
    first, more = read_compare(first_folder), read_compare(more_folder)
    if out.exists():
        raise UserError(f"{out} exists; give a new folder")
    check(first, more, first_folder, more_folder)
    new_bases = base_rows(first_folder, more_folder)
    ignore = shutil.ignore_patterns("checkpoints")
    shutil.copytree(first_folder, out, ignore=ignore)
    for name in first["names"]:
        sweep = read_manifest(out / name)
        for entry in read_manifest(more_folder / name)["runs"]:
            shutil.copytree(more_folder / name / entry["folder"], out / name / entry["folder"],
                            ignore=ignore)
            sweep["runs"].append(entry)
        sweep["seeds"] = first["seeds"] + more["seeds"]
        (out / name / SWEEP).write_text(json.dumps(sweep, indent=1) + "\n")
    points = [row for row in read_jsonl(more_folder / EVALUATIONS) if row["which"] != "base"]
    for row in new_bases + points:
        target = out / row["records"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(more_folder / row["records"], target)
    write_records(out / EVALUATIONS, read_jsonl(out / EVALUATIONS) + new_bases + points)
    write_records(out / TIMES, read_jsonl(out / TIMES) + read_jsonl(more_folder / TIMES))
    manifest = first | {"seeds": first["seeds"] + more["seeds"],
                        "pooled": [str(first_folder), str(more_folder)]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    write_results(out, summarize(out))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfplay.evaluation.pool",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="a finished comparison's folder")
    parser.add_argument("more", type=Path, help="the same comparison on the seeds after it")
    parser.add_argument("out", type=Path, help="a new folder for the two as one")
    args = parser.parse_args(argv)
    try:
        manifest = pool(args.first, args.more, args.out)
    except UserError as exc:
        print(f"pool: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {manifest['seeds']} seeds "
          f"({manifest['first_seed']}..{manifest['first_seed'] + manifest['seeds'] - 1})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
