"""What a new user gets wrong, tried the way they would type it (issue 25's 36 bad inputs, and
more): every one must print ONE line naming what is wrong, exit with code 2, and leave no run
folder (or sweep folder, or corpus) behind: the working directory stays byte for byte as it was.

Each case is a command line run through ``selfplay``'s ``main`` in a fresh working directory
holding the files the case needs (``FILES``); ``{tmp}`` in an argument is that directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from selfplay import cli

TINY = "model.path=tiny-random"

# files a case may name, written into the working directory before every case
FILES: dict[str, str] = {
    "broken.yaml": "loop: spiral\nmodel: {path: tiny-random\n",  # YAML syntax error
    "list.yaml": "- loop: spiral\n",  # not a mapping
    "typo.yaml": "loop: rlvr\ntrian: {steps: 1}\n",  # misspelt section
    "noloop.yaml": "model: {path: tiny-random}\n",
    "prompt-bad-key.yaml": "name: p\nuser: '{{ question }}'\nanswr: x\n",
    "prompt-bad-jinja.yaml": "name: p\nuser: '{{ question '\n",
    "prompt-unknown-field.yaml": "name: p\nuser: '{{ board_size }} {{ observation }}'\n",
    # a key given twice: PyYAML would keep the last one and run what the user did not mean
    "twice.yaml": "loop: rlvr\nmodel: {path: tiny-random}\ntrain:\n  steps: 1\n  lr: 1.0e-3\n"
                  "  steps: 3\n",
    "twice-deep.yaml": "loop: rlvr\nmodel: {path: tiny-random}\nrlvr:\n  tasks:\n"
                       "    - name: chain_sum\n      config:\n        min_terms: 2\n"
                       "        max_terms: 2\n        min_terms: 3\n",
    "prompt-twice.yaml": "name: p\nuser: '{{ question }}'\nsystem: Be brief.\n"
                         "user: 'Q: {{ question }}'\n",
    "empty.txt": "",
    "data.bin": "\x00\x01\x02",
    "not-a-run/readme.txt": "just a folder\n",
    "not-a-sweep/readme.txt": "just a folder\n",
    # a spiral run whose evaluations measured one strategy: nothing to average yet
    "one-strategy/config.yaml": "loop: spiral\n",
    "one-strategy/strategies.jsonl": '{"step": 0, "hands": 0, "game": "kuhn_poker", "kwargs": '
                                     '{"rounds": 1}, "measure": "sampled", "states": []}\n',
}

# (id, command line, a piece of the one line the user must see)
CASES: list[tuple[str, list[str], str]] = [
    # --- the experiment and its config
    ("unknown experiment", ["run", "spiral-kuhm-cpu"], "spiral-kuhm-cpu"),
    ("missing experiment file", ["run", "mine/exp.yaml"], "mine/exp.yaml"),
    ("yaml syntax error", ["run", "broken.yaml"], "broken.yaml"),
    ("yaml not a mapping", ["run", "list.yaml"], "list.yaml"),
    ("misspelt section", ["run", "typo.yaml"], "trian"),
    ("key given twice", ["run", "twice.yaml"], "key 'train.steps' is given twice (lines 4 and 6)"),
    ("key given twice two levels deep", ["run", "twice-deep.yaml"],
     "key 'rlvr.tasks[0].config.min_terms' is given twice (lines 7 and 9)"),
    ("key given twice in an override", ["run", "rlvr-sanity", TINY, "train={steps: 1, steps: 3}"],
     "key 'train.steps' is given twice"),
    ("misspelt section in an override", ["run", "rlvr-sanity", TINY, "sampeling.top_p=1"],
     "did you mean 'sampling'"),
    ("no loop", ["run", "noloop.yaml"], "loop"),
    ("override without =", ["run", "rlvr-sanity", TINY, "train.steps"], "train.steps"),
    ("unknown override key", ["run", "rlvr-sanity", TINY, "train.stepz=2"], "stepz"),
    ("override of wrong type", ["run", "rlvr-sanity", TINY, "train.steps=many"], "train.steps"),
    ("negative steps", ["run", "rlvr-sanity", TINY, "train.steps=-1"], "train.steps"),
    ("temperature below 0", ["run", "rlvr-sanity", TINY, "sampling.temperature=-1"], "temperature"),
    ("top_p above 1", ["run", "rlvr-sanity", TINY, "sampling.top_p=1.5"], "top_p"),
    ("unknown loop", ["run", "rlvr-sanity", TINY, "loop=selfplayy"], "selfplayy"),
    ("plug-in loop that does not import", ["run", "rlvr-sanity", TINY, "loop=my_loopz.x:Y"],
     "my_loopz"),
    ("unknown loss", ["run", "rlvr-sanity", TINY, "train.loss=ppo2"], "ppo2"),
    ("unknown dtype", ["run", "rlvr-sanity", TINY, "model.dtype=float8"], "float8"),
    ("model folder missing", ["run", "rlvr-sanity", "model.path=/no/such/model"], "/no/such/model"),
    ("LoRA key from an old README", ["run", "rlvr-sanity", TINY, "train.lora.targets=[q_proj]"],
     "targets"),
    ("zero learner ranks", ["run", "rlvr-sanity", TINY, "train.parallel.ranks=0"], "ranks"),
    ("unknown engine", ["run", "rlvr-sanity", TINY, "engine.backend=sglang"], "sglang"),
    ("no LoRA target modules", ["run", "rlvr-sanity", TINY, "train.lora.target_modules=[]"],
     "train.lora.target_modules"),
    ("run folder that cannot be made", ["run", "rlvr-sanity", TINY, "run_dir=/proc/nope"],
     "/proc/nope"),
    ("run folder under a file", ["run", "rlvr-sanity", TINY, "run_dir=empty.txt/runs"],
     "empty.txt/runs"),
    # --- roles and prompts
    ("unknown role prompt", ["run", "rlvr-sanity", TINY, "roles.solver.prompt=solvr"], "solvr"),
    ("prompt with an unknown key", ["run", "rlvr-sanity", TINY,
                                    "roles.solver.prompt=prompt-bad-key.yaml"], "answr"),
    ("prompt template that does not parse", ["run", "rlvr-sanity", TINY,
                                             "roles.solver.prompt=prompt-bad-jinja.yaml"],
     "prompt-bad-jinja.yaml"),
    ("prompt field the loop does not fill", ["run", "spiral-kuhn-cpu", TINY,
                                             "roles.player.prompt=prompt-unknown-field.yaml"],
     "board_size"),
    ("prompt with a key given twice", ["run", "rlvr-sanity", TINY,
                                       "roles.solver.prompt=prompt-twice.yaml"],
     "key 'user' is given twice (lines 2 and 4)"),
    ("a role the loop does not have", ["run", "rlvr-sanity", TINY, "roles.judge.prompt=judge"],
     "judge"),
    # --- games
    ("unknown game id", ["run", "spiral-kuhn-cpu", TINY, "spiral.games=[{id: kuhn_pokr}]"],
     "kuhn_pokr"),
    ("no games", ["run", "spiral-kuhn-cpu", TINY, "spiral.games=[]"], "spiral.games"),
    ("wrong game argument", ["run", "spiral-kuhn-cpu", TINY,
                             "spiral.games=[{id: kuhn_poker, kwargs: {roundz: 1}}]"], "roundz"),
    ("unknown opponent", ["run", "spiral-kuhn-cpu", TINY, "spiral.opponent.kind=god"], "god"),
    ("unknown OpenSpiel game", ["run", "spiral-kuhn-cpu", TINY,
                                "spiral.games=[{id: 'openspiel:kuhn_pokr'}]"],
     "not in OpenSpiel's registry"),
    ("three-player OpenSpiel game", ["run", "spiral-kuhn-cpu", TINY,
                                     "spiral.games=[{id: 'openspiel:kuhn_poker(players=3)'}]"],
     "it has 3 players"),
    ("general-sum OpenSpiel game", ["run", "spiral-kuhn-cpu", TINY,
                                    "spiral.games=[{id: 'openspiel:first_sealed_auction'}]"],
     "general-sum"),
    ("parameter OpenSpiel refuses", ["run", "spiral-kuhn-cpu", TINY,
                                     "spiral.games=[{id: 'openspiel:kuhn_poker(playerz=2)'}]"],
     "Unknown parameter 'playerz'"),
    ("payoff reward of a game without one", ["run", "spiral-kuhn-text-cpu", TINY,
                                             "spiral.reward=payoff",
                                             "spiral.games=[{id: simple_negotiation}]"],
     "reward: payoff"),
    ("unknown evaluation opponent", ["run", "spiral-kuhn-cpu", TINY,
                                     "spiral.eval_opponents=[random, mctz]"], "mctz"),
    ("a bot that cannot play the game fairly", ["run", "spiral-kuhn-cpu", TINY,
                                                "spiral.eval_opponents=[mcts:100]"],
     "imperfect-information"),
    ("training bot not named", ["run", "spiral-kuhn-cpu", TINY, "spiral.opponent.kind=bot"],
     "opponent.bot"),
    ("a bot on a game too big to solve", ["run", "spiral-kuhn-cpu", TINY,
                                          "spiral.games=[{id: 'openspiel:liars_dice'}]",
                                          "spiral.eval_exploitability=[]",
                                          "spiral.opponent={kind: bot, bot: cfr}"],
     "more than 30,000 histories"),
    ("exploitability of a game too large",
     ["run", "spiral-kuhn-cpu", TINY, "spiral.eval_exploitability=[{id: 'openspiel:liars_dice'}]"],
     "small enough"),
    ("exploitability of a game without OpenSpiel's rules",
     ["run", "spiral-kuhn-cpu", TINY, "spiral.eval_exploitability=[{id: tictactoe}]"],
     "only OpenSpiel games"),
    ("strategy of a run that is not a game's", ["strategy", "no-such-run"], "no-such-run"),
    ("fictitious pool of size 0", ["run", "spiral-kuhn-cpu", TINY,
                                   "spiral.opponent={kind: fictitious, pool_size: 0}"],
     "pool_size"),
    ("unknown PFSP weighting", ["run", "spiral-kuhn-cpu", TINY,
                                "spiral.opponent={kind: fictitious, weighting: hard}"],
     "weighting"),
    ("a weighting for a pool that keeps no results", ["run", "spiral-kuhn-cpu", TINY,
                                                      "spiral.opponent={kind: pool, weighting: "
                                                      "squared}"], "kind: fictitious"),
    ("win rates that fade to nothing", ["run", "spiral-kuhn-cpu", TINY,
                                        "spiral.opponent={kind: fictitious, decay: 0}"], "decay"),
    ("fictitious self-play whose first snapshot comes after the last step",
     ["run", "spiral-kuhn-text-cpu", TINY,
      "spiral.opponent={kind: fictitious, refresh_every: 12}"],
     "refresh_every: 12"),
    ("fictitious self-play without LoRA snapshots", ["run", "spiral-kuhn-cpu", TINY,
                                                     "train.finetune=full",
                                                     "spiral.opponent.kind=fictitious"],
     "needs train.finetune: lora"),
    ("average strategy of one measured strategy", ["strategy", "one-strategy", "--average"],
     "it has 1"),
    ("average strategy of a folder that is not a run", ["strategy", "not-a-run", "--average"],
     "not-a-run is not a run folder"),
    ("play an unknown game", ["play", "TicTacToe-v9"], "TicTacToe-v9"),
    # --- curricula, tasks, tools
    ("unknown sampler", ["run", "rlvr-curriculum-cpu", TINY, "curriculum.sampler=dapo2"], "dapo2"),
    ("unknown task family", ["run", "rlvr-sanity", TINY, "rlvr.tasks=[{name: chain_summ}]"],
     "chain_summ"),
    ("no task families", ["run", "rlvr-sanity", TINY, "rlvr.tasks=[]"], "rlvr.tasks"),
    ("tool time limit below 0", ["run", "agent0-cpu", TINY, "agent0.tool.wall_s=-1"], "wall_s"),
    # --- corpora
    ("unknown corpus", ["run", "spice-cpu", TINY, "spice.corpus=no-such-corpus"], "no-such-corpus"),
    ("corpus from an empty file", ["corpus", "build", "mine", "empty.txt"], "empty.txt"),
    ("corpus from a file of unknown type", ["corpus", "build", "mine", "data.bin"], "data.bin"),
    ("corpus source missing", ["corpus", "build", "mine", "nowhere/"], "nowhere"),
    ("search an unbuilt corpus", ["corpus", "search", "no-such-corpus", "a question"],
     "no-such-corpus"),
    ("stats of an unbuilt corpus", ["corpus", "stats", "no-such-corpus"], "no-such-corpus"),
    # --- commands on runs
    ("resume a missing run", ["resume", "runs/nothing"], "runs/nothing"),
    ("resume a folder that is not a run", ["resume", "not-a-run"], "not-a-run"),
    ("evaluate a folder that is not a run", ["evaluate", "not-a-run"], "not-a-run"),
    ("pass@k above the samples", ["evaluate", "not-a-run", "--suite", "reasoning-gym", "--k", "4",
                                  "--samples", "2"], "--k 4"),
    ("cross-play a folder that is not a run", ["crossplay", "not-a-run"], "not-a-run"),
    ("analyse a missing run", ["analyze", "runs/nothing"], "runs/nothing"),
    ("export a folder that is not a run", ["export", "not-a-run", "--out", "{tmp}/exported"],
     "not-a-run"),
    ("plan an unknown experiment", ["plan", "spiral-kuhm"], "spiral-kuhm"),
    # --- sweeps, listings, benchmarks and the command line itself
    ("sweep with zero seeds", ["sweep", "rlvr-sanity", TINY, "--seeds", "0"], "--seeds 0"),
    ("sweep of an unknown grid key", ["sweep", "rlvr-sanity", TINY, "--seeds", "1", "--grid",
                                      "train.stepz=1,2"], "stepz"),
    ("resume a folder that is not a sweep", ["sweep", "--resume", "not-a-sweep"], "not-a-sweep"),
    ("sweep folder that cannot be made", ["sweep", "rlvr-sanity", TINY, "--seeds", "1", "--out",
                                          "/proc/nope/sweep"], "/proc/nope"),
    ("list an unknown kind", ["list", "gamez"], "gamez"),
    ("unknown benchmark", ["bench", "warp"], "warp"),
    ("unknown command", ["trian", "rlvr-sanity"], "trian"),
    ("unknown option", ["run", "--fast", "rlvr-sanity"], "--fast"),
    ("number option not a number", ["evaluate", "not-a-run", "--samples", "two"], "two"),
]


def attempt(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """The exit code and what went to stderr, as the shell would see them."""
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    return code, capsys.readouterr().err


def everything_under(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None: a folder): the folder byte for byte."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in folder.rglob("*")}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, body in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("argv", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(
    argv: list[str], named: str, workdir: Path, capsys: pytest.CaptureFixture
) -> None:
    before = everything_under(workdir)
    code, err = attempt([a.replace("{tmp}", str(workdir)) for a in argv], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("selfplay"), err
    assert named in lines[0], f"the line does not name {named!r}: {lines[0]}"
    assert "Traceback" not in err
    assert everything_under(workdir) == before, "left something behind"


def test_cases_are_many_and_distinct() -> None:
    assert len(CASES) >= 36
    assert len({c[0] for c in CASES}) == len(CASES)
    assert len({json.dumps(c[1]) for c in CASES}) == len(CASES)
    assert os.sep not in "".join(c[0] for c in CASES)
