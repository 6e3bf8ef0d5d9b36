"""Files a crash left behind, and a weight file cut short in the filesystem transport.

- A process killed while it appended a row leaves that row cut short (metrics.jsonl,
  sync.jsonl), and one killed while it wrote a step's episodes leaves their temporary file:
  ``selfplay resume`` drops the cut rows (one line per file) and the temporary file, and the run
  goes on as the uninterrupted one did.
- An episode file of a finished step whose last line was cut (written whole by the runner, so
  damaged afterwards, e.g. by a copy stopped midway): the resume keeps its whole episodes, says
  so in one line and carries on; the cut episode is the only thing missing.
- A weight file the engine cannot read (cut short on the folder between the learner and the
  engine, sync stage): written again once and the run carries on; cut again, the run stops in
  one line and resumes.
"""

from __future__ import annotations

import pytest

from selfplay.core.errors import RunStopped
from selfplay.engines.hf import HFEngine
from tests.faults import harness

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple:
    """``selfplay run`` killed with SIGKILL once step 1 is logged (so step 0's checkpoint is
    written), and the folder it ran in."""
    folder = tmp_path_factory.mktemp("killed")
    process = harness.launch(folder)
    run_dir = harness.wait_for_rows(process, folder / "runs", 2)
    harness.stop(process)
    process.wait()
    return run_dir, folder


def next_step(run_dir) -> int:
    return int((run_dir / "checkpoints" / "latest").read_text().strip().split("-")[1])


def test_rows_and_episodes_a_crash_cut_short_are_dropped_on_resume(killed, uninterrupted,
                                                                   capsys):
    """What a SIGKILL during the log stage and during the write stage leaves: half a row at
    the end of metrics.jsonl and sync.jsonl, half a temporary episode file."""
    run_dir = harness.copy_run(killed[0], killed[1] / "cut-rows")
    step = next_step(run_dir)
    for name in ("metrics.jsonl", "sync.jsonl"):
        with (run_dir / name).open("a") as handle:
            handle.write(f'{{"step": {step}, "time": 1764300000.12')  # no newline: cut there
    (run_dir / "episodes" / f"step-{step:06d}.tmp").write_text('{"turns": [{"role": "pl')
    harness.resume(run_dir)
    said = [line for line in capsys.readouterr().err.splitlines() if "cut short" in line]
    assert said == [f"{run_dir / name}: dropped 1 line a crash cut short"
                    for name in ("metrics.jsonl", "sync.jsonl")], said
    harness.assert_same_run(uninterrupted, run_dir)


def test_an_episode_file_cut_after_it_was_written_keeps_its_whole_episodes(killed, uninterrupted,
                                                                           capsys):
    run_dir = harness.copy_run(killed[0], killed[1] / "cut-episodes")
    path = run_dir / "episodes" / "step-000000.jsonl"
    text = path.read_text()
    whole = text.count("\n")
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])
    harness.resume(run_dir)
    said = [line for line in capsys.readouterr().err.splitlines() if "cut short" in line]
    assert said == [f"{path}: its last line was cut short (a crash while it was copied or "
                    f"written); kept its {whole - 1} whole episodes"], said
    got = harness.essence(run_dir)
    expected = dict(uninterrupted)
    lost = [e for e in expected["episodes"] if e["step"] == 0][-1]
    expected["episodes"] = [e for e in expected["episodes"] if e is not lost]
    assert not harness.differences(expected, got)  # only the cut episode is missing


def cut_weights(calls: set[int]):
    """``HFEngine.load_weights_from`` that first cuts the file to half on the given calls."""
    original = HFEngine.load_weights_from
    count = {"n": 0}

    def load(self, adapter, path):
        count["n"] += 1
        if count["n"] in calls:
            with open(path, "r+b") as handle:
                handle.truncate(handle.seek(0, 2) // 2)
        return original(self, adapter, path)

    return load


def test_a_cut_weight_file_is_written_again_and_the_run_carries_on(tmp_path, monkeypatch,
                                                                   uninterrupted, capsys):
    """sync stage, step 1: the engine cannot read the file; it is written again and read."""
    monkeypatch.setattr(HFEngine, "load_weights_from", cut_weights({2}))
    run_dir = harness.start(harness.experiment(tmp_path, "run", sync={"transport": "filesystem"}))
    said = [line for line in capsys.readouterr().err.splitlines() if "weight sync" in line]
    assert len(said) == 1 and said[0].startswith(
        "weight sync: the engine could not read v000002 ("), said
    harness.assert_same_run(uninterrupted, run_dir)


def test_a_weight_file_cut_twice_stops_the_run_in_one_line(tmp_path, monkeypatch, uninterrupted):
    monkeypatch.setattr(HFEngine, "load_weights_from", cut_weights({2, 3}))
    data = harness.experiment(tmp_path, "run", sync={"transport": "filesystem"})
    with pytest.raises(RunStopped) as stopped:
        harness.start(data)
    message = str(stopped.value)
    assert "\n" not in message and message.startswith(
        "weight sync (filesystem): the engine could not read the weights of version 2 in "), message
    assert message.endswith("`selfplay resume RUN` continues from its last checkpoint")
    run_dir = harness.run_dir_of(data)
    harness.assert_no_half_written(run_dir)
    harness.resume(run_dir)
    harness.assert_same_run(uninterrupted, run_dir)
