"""``selfplay sweep ... --suite S``: every finished run of a sweep and its base model on one
held-out suite, paired per problem and across seeds (docs/sweeps.md#held-out-suite).

The same evaluation as ``selfplay compare`` (``selfplay.evaluation.heldout``): the base model once
per (model, suite, seed) — once in all with greedy answers — and each run's final policy, one
record per problem. Per arm, the gain over the base model and, for every arm after the first,
the difference from the first arm, both paired per problem and across seeds
(``selfplay.stats.paired``), each with the effect it could detect (MDE). The folder:

    SWEEP/heldout/measures.json     the suite and measures (a different set: another --suite)
    SWEEP/heldout/evaluations.jsonl one row per evaluation; records/ one JSONL per evaluation
    SWEEP/heldout/heldout.json      the table, which the sweep's page shows
"""

from __future__ import annotations

import json
from pathlib import Path

from selfplay.analysis.rundata import read_jsonl
from selfplay.analysis.sweepdata import read_manifest, run_finished
from selfplay.core.errors import UserError
from selfplay.evaluation.heldout import (
    Measures,
    base_key,
    common_ids,
    problems_for,
    read_records,
    record_evaluation,
    scores,
)
from selfplay.stats.paired import PairedGain, paired_gain

FOLDER = "heldout"
SUMMARY = "heldout.json"
MEASURES = "measures.json"


def check_suite(measures: Measures, config) -> None:
    """A bad suite (or one without references for the likelihood): one line, before the sweep."""
    if measures.size < 1 or measures.tokens < 1 or measures.samples < 0:
        raise UserError("--suite-size and --eval-tokens must be positive, --samples 0 or more")
    problems_for(measures, config)


def heldout_folder(sweep_dir: Path, measures: Measures) -> Path:
    folder = Path(sweep_dir) / FOLDER
    path = folder / MEASURES
    if path.is_file() and json.loads(path.read_text()) != measures.as_dict():
        raise UserError(f"{folder} holds another suite's evaluations ({path}); move it away "
                        "to evaluate on another suite")
    folder.mkdir(exist_ok=True)
    path.write_text(json.dumps(measures.as_dict(), indent=1) + "\n")
    return folder


def evaluate_sweep(sweep_dir: Path, measures: Measures) -> Path:
    """Every finished run's base model (by key) and final policy not yet evaluated; then the
    table. Its path."""
    from selfplay.evaluation.run_model import load_run_config
    from selfplay.running.tracking import console

    folder = heldout_folder(sweep_dir, measures)
    done = {(r["which"], r.get("key") if r["which"] == "base" else r["folder"])
            for r in read_jsonl(folder / "evaluations.jsonl")}
    for entry in read_manifest(sweep_dir)["runs"]:
        run_dir = Path(sweep_dir) / entry["folder"]
        if not run_finished(run_dir):
            continue
        key = base_key(load_run_config(run_dir), measures, entry["seed"])
        row = {"arm": entry["arm"], "folder": entry["folder"], "seed": entry["seed"], "key": key}
        if ("base", key) not in done:
            console.print(f"[bold]sweep[/] held-out: base model ({key}) from {entry['folder']}")
            if record_evaluation(folder, run_dir, 0, measures, row | {"which": "base"},
                                 folder / "records" / f"base-{key}.jsonl"):
                done.add(("base", key))
        if ("final", entry["folder"]) not in done:
            console.print(f"[bold]sweep[/] held-out: {entry['folder']}, its final policy")
            if record_evaluation(folder, run_dir, None, measures, row | {"which": "final"},
                                 folder / "records" / f"{entry['folder']}.jsonl"):
                done.add(("final", entry["folder"]))
    table = summarize(folder, read_manifest(sweep_dir))
    (folder / SUMMARY).write_text(json.dumps(table, indent=1) + "\n")
    return folder / SUMMARY


def _gain(folder: Path, pairs: list[tuple[dict, dict]], measure: str, k: int = 1) -> PairedGain:
    records = [(read_records(folder / b["records"]), read_records(folder / a["records"]))
               for b, a in pairs]
    ids = common_ids(*[r for pair in records for r in pair])
    return paired_gain([scores(b, measure, k, ids) for b, _ in records],
                       [scores(a, measure, k, ids) for _, a in records])


def summarize(folder: Path, manifest: dict) -> list[dict]:
    """Per arm and measure: the gain over the base model and the difference from the first arm
    (on the seeds both have), paired per problem and across seeds."""
    rows = read_jsonl(folder / "evaluations.jsonl")
    measures = json.loads((folder / MEASURES).read_text())
    base = {r["key"]: r for r in rows if r["which"] == "base"}
    finals: dict[str, dict[int, dict]] = {}
    for row in rows:
        if row["which"] == "final":
            finals.setdefault(row["arm"], {})[row["seed"]] = row
    names = ["greedy"] + (["logprob"] if measures["likelihood"] else []) \
        + ([f"pass@{measures['samples']}"] if measures["samples"] else [])
    arms = [a["name"] for a in manifest["arms"] if a["name"] in finals]
    table = []
    for arm in arms:
        for measure in names:
            k = measures["samples"] if measure.startswith("pass@") else 1
            pairs = [(base[f["key"]], f) for f in finals[arm].values() if f["key"] in base]
            gain = _gain(folder, pairs, measure, k) if pairs else None
            versus = None
            if arm != arms[0]:
                shared = sorted(set(finals[arm]) & set(finals[arms[0]]))
                if shared:
                    versus = _gain(folder, [(finals[arms[0]][s], finals[arm][s])
                                            for s in shared], measure, k)
            table.append({"arm": arm, "measure": measure, "seeds": len(pairs),
                          "problems": gain.problems if gain else None,
                          "base": _mean([p[0].get(measure) for p in pairs]),
                          "final": _mean([p[1].get(measure) for p in pairs]),
                          "gain": gain.as_dict() if gain else None,
                          "vs_first": versus.as_dict() if versus else None})
    return table


def _mean(values) -> float | None:
    values = [v for v in values if isinstance(v, int | float)]
    return sum(values) / len(values) if values else None
