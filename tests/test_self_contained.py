"""A run depends on nothing outside its folder but the installed packages (docs/run-folder.md):
made with the plug-in game of docs/extending.md and a role prompt given by path, moved to
another folder with the plug-in's own folder gone, it is resumed, evaluated, cross-played,
analysed and exported from a third folder. And mistakes a run would find only after the model
loads (a wrong game argument, a prompt field no loop fills, a game that raises) are one line,
exit 2, with no run folder left behind."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from selfplay import cli
from selfplay.running import inputs
from tests.processes import ENV, metric_rows, selfplay
from tests.test_extending import assert_prefilled, page_files

USER_MODULES = ("my_games", "nim_rules")


def experiment(folder: Path, game: dict | None = None, prompt: str = "my_prompts/p.yaml") -> Path:
    """A SPIRAL experiment beside its plug-in game and prompt, with relative paths only."""
    data = {
        "name": "nim-selfplay",
        "loop": "spiral",
        "model": {"path": "tiny-random"},
        "sampling": {"max_new_tokens": 8},
        "train": {"steps": 1, "lr": 1e-3, "lora": {"r": 4, "alpha": 8}},
        "advantage": {"estimator": "rae"},
        "roles": {"player": {"prompt": prompt}},
        "spiral": {
            "games": [game or {"id": "my_games.nim:Nim", "kwargs": {"pile": 4}}],
            "games_per_step": 2,
            "lenient": True,
            "eval_games": 1,
            "eval_opponents": ["random"],
        },
        "checkpoint": {"every": 1, "keep": 1, "archive_every": 1},
        "logging": {"wandb": "disabled", "progress": False},
    }
    path = folder / "nim.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def plugin_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_path) -> Path:
    """tmp_path/A: docs/extending.md's Nim and prompt (renamed), a helper module beside the
    game; sys.path, sys.modules and the working directory restored afterwards."""
    page = page_files()
    folder = tmp_path / "A"
    (folder / "my_games").mkdir(parents=True)
    (folder / "my_prompts").mkdir()
    (folder / "my_games" / "__init__.py").write_text("")
    nim = page["my_selfplay/my_games/nim.py"]
    (folder / "my_games" / "nim.py").write_text(nim + "\nimport nim_rules  # noqa: E402, F401\n")
    (folder / "nim_rules.py").write_text("TAKE = (1, 2)\n")  # a sibling module the game imports
    (folder / "my_prompts" / "p.yaml").write_text(page["my_selfplay/my_prompts/nim_player.yaml"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    forget_user_modules()
    yield folder
    forget_user_modules()


def forget_user_modules() -> None:
    for module in [m for m in sys.modules if m.split(".")[0] in USER_MODULES]:
        del sys.modules[module]


def run_folders(runs: Path) -> list[Path]:
    return sorted(runs.iterdir()) if runs.exists() else []


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_a_moved_run_resumes_evaluates_crossplays_analyses_and_exports_elsewhere(
    plugin_folder: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = plugin_folder.parent
    (root / "C").mkdir()
    # started from tmp_path, not from A: the experiment's paths resolve against its own folder
    path = experiment(plugin_folder)
    assert cli.main(["run", str(path), f"run_dir={root / 'runs'}"]) == 0
    (made,) = run_folders(root / "runs")
    # SPIRAL sends the page prompt's `prefill:` too (a documented prompt feature, every loop)
    game = json.loads((made / "episodes" / "step-000000.jsonl").read_text().splitlines()[0])
    assert_prefilled(game["turns"][0]["prompt_ids"])

    saved = yaml.safe_load((made / "config.yaml").read_text())
    assert saved["roles"]["player"]["prompt"] == "inputs/prompts/p.yaml"
    assert (made / "inputs/prompts/p.yaml").read_text() == (
        plugin_folder / "my_prompts/p.yaml"
    ).read_text()
    plugins = made / inputs.PLUGINS
    assert (plugins / "my_games/nim.py").read_text() == (
        plugin_folder / "my_games/nim.py"
    ).read_text()
    assert (plugins / "nim_rules.py").exists() and (plugins / "my_games/__init__.py").exists()
    environment = json.loads((made / inputs.ENVIRONMENT).read_text())
    assert {"torch", "transformers", "peft", "selfplay"} <= set(environment["packages"])
    assert re.fullmatch(r"[0-9a-f]{40}", environment["git"]["commit"])
    assert isinstance(environment["git"]["dirty"], bool)

    # another machine: the run folder moved, the plug-in's folder and modules gone
    moved = root / "B" / made.name
    moved.parent.mkdir()
    shutil.move(made, moved)
    shutil.rmtree(plugin_folder)
    forget_user_modules()
    sys.path[:] = [p for p in sys.path if not p.startswith(str(root))]
    capsys.readouterr()
    monkeypatch.chdir(root / "C")

    # a prompt given by an override resolves against the working directory and is copied in
    shutil.copy(moved / "inputs/prompts/p.yaml", root / "C" / "q.yaml")
    resume = ["resume", str(moved), "train.steps=2", "roles.player.prompt=q.yaml"]
    assert cli.main(resume) == 0, capsys.readouterr().err
    (root / "C" / "q.yaml").unlink()
    assert sys.modules["my_games.nim"].__file__.startswith(str(moved / inputs.PLUGINS))
    steps = [row["step"] for row in metric_rows(moved) if not row.get("final")]
    assert steps == [0, 1]
    assert len(json.loads((moved / inputs.ENVIRONMENT).read_text())["resumes"]) == 1
    assert yaml.safe_load((moved / "config.yaml").read_text())["roles"]["player"]["prompt"] == (
        "inputs/prompts/q.yaml"
    )
    # a fresh process, started in C: nothing of A on its sys.path or in its modules
    result = subprocess.run(
        selfplay("eval", str(moved)),
        cwd=root / "C",
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (moved / "eval.jsonl").exists()
    assert cli.main(["crossplay", str(moved), "--games", "1", "--max-snapshots", "2"]) == 0
    suite = ["--suite", "rg:basic_arithmetic", "--size", "1", "--samples", "1", "--k", "1"]
    assert cli.main(["evaluate", str(moved), *suite]) == 0
    # one evaluation command: without --suite, `evaluate` is the loop's own evaluation (`eval`)
    assert cli.main(["evaluate", str(moved), "spiral.eval_games=2"]) == 0
    assert len((moved / "eval.jsonl").read_text().splitlines()) == 2
    assert cli.main(["evaluate", str(moved), "spiral.eval_games=2", *suite]) == 2
    shutil.rmtree(moved / "report")
    assert cli.main(["analyze", str(moved), "--no-embeddings", "--no-png"]) == 0
    assert (moved / "report" / "index.html").exists()
    assert cli.main(["export", str(moved), "--out", str(root / "C" / "export")]) == 0
    assert (root / "C" / "export" / "shared").is_dir()
    assert not (root / "C" / "runs").exists() and not list((root / "C").glob("*.yaml"))


@pytest.mark.parametrize(
    ("game", "prompt_text", "message"),
    [
        (
            {"id": "my_games.nim:Nim", "kwargs": {"pyle": 3}},
            None,
            "game 'my_games.nim:Nim' cannot be played here: its constructor refused",
        ),
        (
            {"id": "kuhn_poker", "kwargs": {"rounds": 1, "chips": 3}},
            None,
            "game 'kuhn_poker' cannot be played here: its constructor refused",
        ),
        (
            None,
            "{{ observation }} {{ board }} {{ example }}",
            "role `player`: prompt",
        ),
        (
            {"id": "my_games.nim:Nim", "kwargs": {"pile": -1}},
            None,
            "game 'my_games.nim:Nim' raised in reset(): ValueError: a pile of -1",
        ),
    ],
    ids=["bad-game-argument", "bad-native-game-argument", "unfilled-prompt-field", "reset-raises"],
)
def test_mistakes_fail_in_one_line_before_the_run_folder(
    plugin_folder: Path,
    capsys: pytest.CaptureFixture,
    game: dict | None,
    prompt_text: str | None,
    message: str,
) -> None:
    nim = plugin_folder / "my_games" / "nim.py"
    nim.write_text(
        nim.read_text().replace(
            "        self.pile = self.start_pile\n",
            "        if self.start_pile < 0:\n"
            "            raise ValueError(f'a pile of {self.start_pile}')\n"
            "        self.pile = self.start_pile\n",
        )
    )
    if prompt_text is not None:
        prompt = plugin_folder / "my_prompts" / "p.yaml"
        prompt.write_text(
            re.sub(r"user: \|-\n(  .*\n|\n)*", f"user: '{prompt_text}'\n", prompt.read_text())
        )
        assert "board" in prompt.read_text()
    path = experiment(plugin_folder, game)
    runs = plugin_folder / "runs"
    assert cli.main(["run", str(path), f"run_dir={runs}"]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error, error
    if prompt_text is not None:
        assert "reads {{ board }}, which the spiral loop does not fill" in error
    assert not runs.exists()


def test_a_game_raising_mid_run_is_one_line_and_leaves_no_folder(
    plugin_folder: Path, capsys: pytest.CaptureFixture
) -> None:
    """Its first reset (seed 0) works, the games of step 0 (other seeds) raise: the run folder
    exists by then, has no checkpoint, and is removed."""
    (plugin_folder / "my_games" / "flaky.py").write_text(
        "from my_games.nim import Nim\n\n\n"
        "class Flaky(Nim):\n"
        "    def reset(self, seed):\n"
        "        if seed:\n"
        "            raise ValueError(f'no board for seed {seed}')\n"
        "        super().reset(seed)\n"
    )
    path = experiment(plugin_folder, {"id": "my_games.flaky:Flaky"})
    runs = plugin_folder / "runs"
    assert cli.main(["run", str(path), f"run_dir={runs}"]) == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if line.startswith("selfplay: error:")]
    assert "game 'my_games.flaky:Flaky' raised in reset(): ValueError: no board for seed" in line
    assert "flaky.py:7" in line and "Traceback" not in error
    assert not run_folders(runs)


def test_shipped_experiments_prompts_read_only_fields_their_loop_fills() -> None:
    from roles import load_role
    from selfplay.config_files import list_experiments
    from selfplay.loops import load_experiment, loop_class

    for name in list_experiments():
        config = load_experiment(name)
        for role, filled in loop_class(config.loop).spec.roles.items():
            if role in config.roles:
                read = load_role(config.roles[role].prompt).fields()
                assert read <= set(filled), (name, role, read - set(filled))
