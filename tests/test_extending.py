"""docs/extending.md, followed literally: its files written outside the repository, its
commands run for one step on the tiny model; by import path and by entry point.

If a step on that page stops working, these tests fail.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

from selfplay import cli
from selfplay.core import plugins
from selfplay.core.errors import UserError

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
FILE_BLOCK = re.compile(r"```\w+ file=(\S+)\n(.*?)```", re.S)
RUN_BLOCK = re.compile(r"```bash run\n(.*?)```", re.S)
USER_MODULES = ("my_games", "my_loops")


def page_files() -> dict[str, str]:
    return {name: body for name, body in FILE_BLOCK.findall(PAGE.read_text())}


def page_commands() -> list[list[str]]:
    (block,) = RUN_BLOCK.findall(PAGE.read_text())
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_path) -> Path:
    """The page's files under tmp_path, with sys.path and sys.modules restored afterwards."""
    for name, body in page_files().items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for module in [m for m in sys.modules if m.split(".")[0] in USER_MODULES]:
        del sys.modules[module]


def run_commands(commands: list[list[str]], folder: Path) -> int:
    """`cd` and `selfplay ...` lines as a shell would run them (the CLI in-process)."""
    code = 0
    for words in commands:
        if words[0] == "cd":
            folder = folder / words[1]
            os_chdir(folder)
        else:
            assert words[0] == "selfplay", words
            code = cli.main(words[1:])
            assert code == 0, words
    return code


def os_chdir(folder: Path) -> None:
    import os

    os.chdir(folder)


def only_run(folder: Path) -> Path:
    runs = list((folder / "runs").iterdir())
    assert len(runs) == 1
    return runs[0]


def trained_one_step(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step = [row for row in rows if row.get("step") == 0 and not row.get("final")]
    assert step and "reward/player" in step[0]
    assert 0.0 <= step[0]["drill/win_rate"] <= 1.0  # the loop's own metric reaches the log
    episodes = (run_dir / "episodes" / "step-000000.jsonl").read_text().splitlines()
    assert len(episodes) == 2  # settings.games_per_step
    first = json.loads(episodes[0])
    assert first["env"] == "my_games.nim:Nim" or first["env"] == "nim"
    assert_prefilled(first["turns"][0]["prompt_ids"])
    return step[0]


def assert_prefilled(prompt_ids: list[int]) -> None:
    """The page's prompt starts the reply (`prefill:`): the model was given it after the chat
    template's generation prompt, so the prompt's tokens end with it."""
    from selfplay.engines.models import tokenizer_for

    prompt = page_files()["my_selfplay/my_prompts/nim_player.yaml"]
    (prefill,) = re.findall(r"^prefill: '(.*?)'", prompt, re.M)
    assert prefill.strip()
    tokenizer = tokenizer_for("tiny-random")
    assert tokenizer.decode(prompt_ids).endswith(prefill)


def test_page_has_the_files_it_walks_through() -> None:
    names = set(page_files())
    assert {
        "my_selfplay/my_games/nim.py",
        "my_selfplay/my_prompts/nim_player.yaml",
        "my_selfplay/my_loops/drill.py",
        "my_selfplay/nim_drill.yaml",
        "my_selfplay/pyproject.toml",
    } <= names
    assert page_commands() == [["cd", "my_selfplay"], ["selfplay", "run", "nim_drill.yaml"]]
    loop = page_files()["my_selfplay/my_loops/drill.py"]
    assert len(loop.splitlines()) <= 60  # a whole loop, settings included


def test_a_proposer_solver_loop_on_the_core_runs_with_rows_metrics_and_evaluation(
    user_folder: Path,
) -> None:
    """The page's quiz loop, written on the propose-and-solve core: one step on the tiny model
    writes a task row per proposal (p̂, solver answers, reward), the shared ``quiz/`` metrics
    and the held-out reasoning evaluation; its Python stays within 200 lines."""
    loop = page_files()["my_selfplay/my_loops/quiz.py"]
    assert len(loop.splitlines()) <= 200
    folder = user_folder / "my_selfplay"
    os_chdir(folder)
    assert cli.main(["run", "quiz.yaml"]) == 0
    run = only_run(folder)
    rows = [json.loads(line) for line in (run / "tasks.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["s0-p0", "s0-p1"]
    for row in rows:  # the prefill poses 2 + 3: every proposal is valid, answered twice
        assert row["question"] == "What is 2 + 3?" and row["answer"] == "5" and row["valid"]
        assert row["samples"] == 2 and len(row["solver_answers"]) == 2
        assert row["p_hat"] in (0.0, 0.5, 1.0)
        assert row["reward"] == (0.5 if row["p_hat"] == 0.5 else 0.0)  # learnability
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if m.get("step") == 0 and not m.get("final"))
    assert step["quiz/proposals"] == 2.0 and step["quiz/valid_rate"] == 1.0
    assert "reward/proposer" in step and "reward/solver" in step
    assert any("eval/reasoning/chain_sum" in m for m in metrics)


def test_game_role_and_loop_by_import_path(user_folder: Path) -> None:
    run_commands(page_commands(), user_folder)
    run = only_run(user_folder / "my_selfplay")
    trained_one_step(run)
    # the report the run wrote draws the loop's own metric and shows its games' transcripts
    page = (run / "report" / "index.html").read_text()
    assert "plot-other-drill-rates" in page and "table class='transcript'" in page


def write_dist_info(site: Path, pyproject: Path) -> None:
    """What `pip install` would leave: a dist-info folder whose entry_points.txt comes from
    the page's pyproject.toml (so the page's names are the ones tested)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = []
    for group, names in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in names.items()]
    info.joinpath("entry_points.txt").write_text("\n".join(lines) + "\n")


def test_game_and_loop_by_entry_point(user_folder: Path) -> None:
    folder = user_folder / "my_selfplay"
    site = user_folder / "site-packages"
    write_dist_info(site, folder / "pyproject.toml")
    sys.path[:0] = [str(site), str(folder)]  # installed package + its modules (pip install -e)
    assert "nim" in plugins.entry_point_names(plugins.GAMES)
    assert "drill" in plugins.entry_point_names(plugins.LOOPS)

    import games

    assert "nim" in games.list_games()
    config = (folder / "nim_drill.yaml").read_text()
    config = config.replace("loop: my_loops.drill:DrillLoop", "loop: drill")
    config = config.replace("game: my_games.nim:Nim", "game: nim")
    assert "loop: drill" in config and "game: nim" in config
    (folder / "by_name.yaml").write_text(config)  # its prompt path resolves against its folder
    assert cli.main(["run", str(folder / "by_name.yaml")]) == 0
    trained_one_step(only_run(user_folder))  # run_dir: runs/ in the working directory


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("DrillLoop", "DrilLoop"), "has no attribute 'DrilLoop'"),
        (("game: my_games.nim:Nim", "game: my_games.nim:Nmi"), "has no attribute 'Nmi'"),
        (("games_per_step: 2", "games_per_stp: 2"), "unknown key"),
        (("loop: my_loops.drill:DrillLoop", "loop: drll"), "unknown loop 'drll'"),
        (("loop: my_loops.drill:DrillLoop", "loop: my_gamez.x:Y"), "cannot import my_gamez"),
    ],
)
def test_mistakes_fail_in_one_line_without_a_run_folder(
    user_folder: Path, capsys: pytest.CaptureFixture, edit: tuple[str, str], message: str
) -> None:
    folder = user_folder / "my_selfplay"
    path = folder / "nim_drill.yaml"
    path.write_text(path.read_text().replace(*edit, 1))
    os_chdir(folder)
    assert cli.main(["run", "nim_drill.yaml"]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error, error
    assert not (folder / "runs").exists()


@pytest.mark.parametrize(
    ("game_id", "words"),
    [
        ("textarena:Chess-v0", "does not import under Python"),
        ("textarena:Sudoku-v0", "does not start a two-player game"),
    ],
)
def test_unplayable_textarena_ids_exit_2_before_a_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture, game_id: str, words: str
) -> None:
    experiment = Path(__file__).resolve().parents[1] / "experiments" / "spiral-tictactoe-cpu.yaml"
    code = cli.main(
        ["run", str(experiment), f"spiral.games=[{{id: '{game_id}'}}]", f"run_dir={tmp_path}/r"]
    )
    error = capsys.readouterr().err.strip()
    assert code == 2 and words in error and "\n" not in error
    assert not (tmp_path / "r").exists()


def test_load_object_resolves_import_paths_and_refuses_the_rest() -> None:
    assert plugins.load_object("json:dumps", plugins.REWARDS) is json.dumps
    assert plugins.load_object("os.path:join", plugins.REWARDS) is __import__("os").path.join
    with pytest.raises(UserError, match="no entry point of that name in group selfplay.rewards"):
        plugins.load_object("no_such_reward", plugins.REWARDS, what="reward")
    assert not plugins.is_import_path("textarena:Nim-v0 ") and plugins.is_import_path("a.b:C")
