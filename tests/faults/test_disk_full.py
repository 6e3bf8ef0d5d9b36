"""The disk fills while a step writes: its episodes (write), a metrics row (log), the loop state or
the learner's folder of a checkpoint (checkpoint). The run stops in one line, nothing is left
half-written, and ``selfplay resume`` (with room again) goes on as the uninterrupted run did.

Two ways to fill a disk, both used:

- **ENOSPC injected at the write call** of a named stage (every test but the last): the
  function that writes raises ``OSError(ENOSPC)`` where the kernel would, after writing part of
  its bytes where that is what a full disk does (a torn checkpoint file, half a metrics row). It
  runs everywhere and hits exactly the stage it names.
- **A real small filesystem** (the last test): a 4 MiB tmpfs mounted in a private mount
  namespace (``unshare --user --map-root-user --mount``: no root, nothing the rest of the
  machine sees, gone when the command ends), partly taken by a filler file. ``selfplay run``
  fills it wherever it does; the filler is then deleted and ``selfplay resume`` finishes the
  run there. Skipped where user namespaces are not allowed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from selfplay.core.errors import RunStopped
from selfplay.running import checkpoint
from selfplay.running.tracking import RunLogger
from tests.faults import harness

pytestmark = pytest.mark.faults


def enospc(path: object = None) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), None if path is None else str(path))


def expected_line(run_dir: Path, after: str) -> str:
    return (f"the disk is full (in step 1, after its {after} stage): free space on the disk of "
            f"{run_dir}, then `selfplay resume {run_dir}` continues from step 1")


def fail_and_resume(tmp_path, monkeypatch, uninterrupted, after: str) -> None:
    """Run with the fault (a one-shot, like a disk that filled once): one line; resumed: the
    uninterrupted run."""
    data = harness.experiment(tmp_path, "run")
    with pytest.raises(RunStopped) as stopped:
        harness.start(data)
    run_dir = harness.run_dir_of(data)
    assert str(stopped.value) == expected_line(run_dir, after)
    harness.assert_no_half_written(run_dir)
    harness.resume(run_dir)
    harness.assert_same_run(uninterrupted, run_dir)


def test_disk_full_while_the_episodes_are_written(tmp_path, monkeypatch, uninterrupted):
    """write stage: the episode file's flush to disk fails (its bytes were handed over)."""
    original, failed = os.fsync, []

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name.endswith("episodes/step-000001.tmp") and not failed:
            failed.append(name)
            raise enospc(name)
        original(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    fail_and_resume(tmp_path, monkeypatch, uninterrupted, after="collect")
    assert not list(tmp_path.glob("run/*/episodes/*.tmp"))


def test_disk_full_while_a_metrics_row_is_appended(tmp_path, monkeypatch, uninterrupted):
    """log stage: half of step 1's row reaches metrics.jsonl; resume drops the cut line."""

    def half_a_row(self, step: int, metrics: dict) -> None:
        with self.metrics_path.open("a") as handle:
            handle.write('{"step": 1, "time": 17')
        raise enospc(self.metrics_path)

    monkeypatch.setattr(RunLogger, "log", harness.instead_at(2, half_a_row, RunLogger.log))
    fail_and_resume(tmp_path, monkeypatch, uninterrupted, after="sync")


def test_disk_full_while_the_checkpoint_state_is_written(tmp_path, monkeypatch, uninterrupted):
    """checkpoint stage: state.pt (loop, snapshots, random states) is cut after half its bytes;
    the checkpoint's temporary folder goes and the previous checkpoint stays the latest."""
    original = checkpoint.save_torch

    def torn(value, path: Path) -> None:
        original(value, path)
        size = path.stat().st_size
        with path.open("r+b") as handle:
            handle.truncate(size // 2)
        raise enospc(path)

    monkeypatch.setattr(checkpoint, "save_torch", harness.instead_at(2, torn, original))
    fail_and_resume(tmp_path, monkeypatch, uninterrupted, after="log")


def test_disk_full_while_the_learner_checkpoint_is_written(tmp_path, monkeypatch, uninterrupted):
    """checkpoint stage: torch.distributed.checkpoint writes part of the learner's shard file
    and reports the rank's ENOSPC inside its ``CheckpointException``, as it does on a full
    disk (measured on a 200 KiB tmpfs)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    def torn(state, checkpoint_id, **kwargs):
        folder = Path(checkpoint_id)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__0_0.distcp").write_bytes(b"\0" * 4096)  # what got out before it filled
        raise CheckpointException("write", {0: (enospc(folder / "__0_0.distcp"), None)})

    monkeypatch.setattr(dcp, "save", harness.instead_at(2, torn, dcp.save))
    fail_and_resume(tmp_path, monkeypatch, uninterrupted, after="log")


SCRIPT = """
set -u
mount -t tmpfs -o size={size} tmpfs {mount}
head -c {filler} /dev/zero > {mount}/filler
{python} -m selfplay run {experiment} > /dev/null 2> {out}/run.err
echo $? > {out}/run.rc
cp -a {mount}/runs {out}/stopped
rm {mount}/filler
{python} -m selfplay resume "$(ls -d {mount}/runs/*)" > /dev/null 2> {out}/resume.err
echo $? > {out}/resume.rc
cp -a {mount}/runs {out}/resumed
"""


def test_a_real_small_filesystem_fills_and_the_run_resumes_once_there_is_room(
        tmp_path, uninterrupted, uninterrupted_run):
    """The run folder on a 4 MiB tmpfs with room for the run's start and about two and a half
    checkpoints: it fills while the third checkpoint of the run is written (it is the largest
    file), the run stops in one line, and resumes there once the filler is gone."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "--user", "--map-root-user", "--mount",
                            "true"], capture_output=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no user namespaces here (unshare): the injected ENOSPC tests stand alone")
    mount, out = tmp_path / "small", tmp_path / "out"
    mount.mkdir()
    out.mkdir()
    data = harness.experiment(tmp_path, "unused") | {"run_dir": str(mount / "runs")}
    experiment = harness.write_experiment(data, tmp_path / "exp.yaml")
    size = 4 * 2**20
    latest = (uninterrupted_run / "checkpoints" / "latest").read_text().strip()
    one_checkpoint = folder_bytes(uninterrupted_run / "checkpoints" / latest)
    assert one_checkpoint > 100_000  # LoRA weights and Adam's two moments
    room = 2.5 * one_checkpoint + 200 * 1024  # the run's first files: config, inputs, step 0
    script = SCRIPT.format(size=size, mount=mount, filler=int(size - room), out=out,
                           python=sys.executable, experiment=experiment)
    subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                    textwrap.dedent(script)], env=harness.ENV, check=True, timeout=1200)

    err = (out / "run.err").read_text()
    said = [line for line in err.splitlines() if line.startswith("selfplay:")]
    assert (out / "run.rc").read_text().strip() == "2", err[-3000:]
    assert len(said) == 1 and "Traceback" not in err, err[-3000:]
    assert said[0].startswith("selfplay: error: the disk is full (in step"), said
    (stopped,) = (out / "stopped").iterdir()
    harness.assert_no_half_written(stopped)
    assert (out / "resume.rc").read_text().strip() == "0", (out / "resume.err").read_text()
    (resumed,) = (out / "resumed").iterdir()
    harness.assert_same_run(uninterrupted, resumed)
    print(said[0])  # the stage it filled at: docs/testing.md records it


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
