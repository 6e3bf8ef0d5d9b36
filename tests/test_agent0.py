"""Agent0: role prefills, the loop's two phases, ADPO end to end, resume, bad input."""

from __future__ import annotations

import pytest

from selfplay.loops import validate
from selfplay.loops.base import Loop
from selfplay.types import Collected
from tests.conftest import tiny_config


class Asker(Loop):
    """A loop that only builds requests (its roles undeclared: any prompt is accepted)."""

    async def collect(self, policy, step: int) -> Collected:
        return Collected([])


def test_prefill_is_appended_after_the_generation_prompt(tmp_path, tiny_model_path):
    from selfplay.engines.base import encode_request
    from selfplay.engines.models import load_tokenizer
    from selfplay.types import Completion

    role = tmp_path / "asker.yaml"
    role.write_text("user: 'Ask about {{ topic }}.'\nprefill: 'Question: What is {{ topic }}'\n")
    config = validate(tiny_config(tmp_path, roles={"solver": {"prompt": str(role)}}), "test")
    loop = Asker(config)
    tokenizer = load_tokenizer(tiny_model_path)
    request = loop.request("solver", topic="pi")
    assert request.messages[-1]["content"] == "Ask about pi." and request.prefill
    template = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Ask about pi."}], add_generation_prompt=True, tokenize=False
    )
    # the engine encodes the chat template, then the prefill the model continues
    prompt_ids = encode_request(tokenizer, request)
    assert tokenizer.decode(prompt_ids) == template + "Question: What is pi"
    completion = Completion(" 3?", prompt_ids, [1], [0.0], "stop", prefill=request.prefill)
    assert completion.reply == "Question: What is pi 3?"
    plain = tmp_path / "plain.yaml"
    plain.write_text("user: 'Ask.'\n")
    config = validate(tiny_config(tmp_path, roles={"solver": {"prompt": str(plain)}}), "test")
    assert Asker(config).request("solver").messages[-1]["content"] == "Ask."


# ---------------------------------------------------------------------- the loop on the tiny model
QUESTION_PREFILL = "user: 'Write a question.'\nprefill: \"Question: What is 2 + 3?\\nAnswer:\"\n"
ANSWER_PREFILL = "user: '{{ question }}'\nprefill: 'The answer is \\boxed{7}. '\n"


def agent0_config(tmp_path, executor_prefill: str = "", **agent0) -> dict:
    """A tiny Agent0 experiment. The proposer's reply is started with a fixed question, so the
    random model's proposals parse (its answer line is whatever it writes)."""
    roles = tmp_path / "roles"
    roles.mkdir(exist_ok=True)
    (roles / "asker.yaml").write_text(QUESTION_PREFILL)
    (roles / "solver.yaml").write_text(executor_prefill or "user: '{{ question }}'\n")
    settings = {
        "curriculum_steps": 1,
        "executor_steps": 2,
        "solver_samples": 4,
        "proposal_group_size": 4,
        "pool_size": 3,
        "band": "code",
        "band_lo": 0.0,
        "band_hi": 1.0,
        "executor_tasks_per_step": 2,
        "executor_group_size": 4,
        "probe_size": 2,
        "repetition_weight": 0.0,  # every proposal repeats the prefilled question
        **agent0,
    }
    config = tiny_config(
        tmp_path,
        loop="agent0",
        train={"steps": 3, "lr": 5e-2, "loss": "grpo"},
        advantage={"adpo": True},
        agent0=settings,
    )
    del config["rlvr"]
    config["roles"] = {
        "curriculum": {"prompt": str(roles / "asker.yaml"), "adapter": "own"},
        "executor": {"prompt": str(roles / "solver.yaml"), "adapter": "own"},
    }
    return config


def _varied_answers(monkeypatch):
    """The tiny random model never writes numbers: read an answer from the reply's length
    parity instead, so p̂, pseudo-labels and rewards vary and both roles have something to
    learn (the pattern of conftest.varied_grade)."""
    import selfplay.loops.agent0.loop as agent0

    monkeypatch.setattr(
        agent0, "extract_answer", lambda text, lenient=False: (str(len(text) % 2), False)
    )


def test_phase_schedule(tmp_path):
    from selfplay.loops.agent0 import Agent0Loop

    config = validate(agent0_config(tmp_path, curriculum_steps=2, executor_steps=3), "test")
    loop = Agent0Loop(config)
    assert [loop.phase(s) for s in range(6)] == [
        (0, "curriculum"),
        (0, "curriculum"),
        (0, "executor"),
        (0, "executor"),
        (0, "executor"),
        (1, "curriculum"),
    ]


def test_tiny_iteration_runs_both_phases_and_keeps_adapters_apart(
    tmp_path, tiny_model_path, monkeypatch
):
    import json

    import torch

    from selfplay.running.rollouts import SyncRollouts
    from selfplay.running.runner import build, eval_due, step

    _varied_answers(monkeypatch)
    config = validate(agent0_config(tmp_path), "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build(config, run_dir, resume=False)
    learner = world.learner
    assert learner.adapters == ["curriculum", "executor"]

    def weights(role):
        return {k: v.clone() for k, v in learner.adapter_weights(role).items()}

    executor_before, curriculum_before = weights("executor"), weights("curriculum")
    rollouts = SyncRollouts(world.loop, world.policy, lambda n: eval_due(world.loop, n))
    metrics = step(world, 0, rollouts)  # curriculum phase
    assert metrics["agent0/phase"] == 0.0 and metrics["train/samples"] > 0
    executor_after, curriculum_after = weights("executor"), weights("curriculum")
    assert all(torch.equal(executor_before[k], executor_after[k]) for k in executor_before)
    assert any(
        not torch.equal(curriculum_before[k], curriculum_after[k]) for k in curriculum_before
    )
    assert metrics["agent0/curriculum/valid_rate"] > 0

    metrics = step(world, 1, rollouts)  # executor phase: builds the pool, then trains
    assert metrics["agent0/phase"] == 1.0 and metrics["train/samples"] > 0
    assert metrics["agent0/pool/size"] == 3.0 and "agent0/probe/pseudo_label_accuracy" in metrics
    assert all(torch.equal(curriculum_after[k], v) for k, v in weights("curriculum").items())
    assert any(not torch.equal(executor_after[k], v) for k, v in weights("executor").items())

    pool = [
        json.loads(line) for line in (run_dir / "pools" / "iter-0.jsonl").read_text().splitlines()
    ]
    assert len(pool) == 3
    assert {"question", "answer", "pseudo_label", "p_hat", "tool_calls", "kept"} <= pool[0].keys()
    kept = world.loop.pool["tasks"]
    assert kept and all(t["p_hat"] in (0.25, 0.5, 0.75, 1.0) for t in kept)
    rows = [json.loads(line) for line in (run_dir / "tasks.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows] == ["curriculum"] * 4 + ["executor"] * 3
    episodes = [
        json.loads(line)
        for line in (run_dir / "episodes" / "step-000001.jsonl").read_text().splitlines()
    ]
    # every executor episode carries its task's p̂ for ADPO, and only executor turns
    assert all(e["info"]["pass_rate"] in [t["p_hat"] for t in kept] for e in episodes)
    assert all(t["adapter"] == "executor" for e in episodes for t in e["turns"])
    world.loop.close()


def test_adpo_gradients_scale_with_the_pool_p_hat(tmp_path, tiny_model_path):
    """The same batch with p̂ = 0.3 and p̂ = 0.8: ADPO scales the advantage by s(p̂) (0.6 and
    1.0), so at ρ = 1 the gradients differ by exactly that factor, and ε_high(p̂) (0.3 and 0.2)
    reaches the loss's clip ceiling."""
    import torch

    from selfplay.loops.agent0 import Agent0Loop
    from selfplay.rl.advantages import adpo_eps_high, adpo_scale
    from selfplay.training.learner import LocalLearner
    from selfplay.training.make import learner_settings
    from selfplay.types import Episode, Turn

    config = validate(agent0_config(tmp_path), "test")
    loop = Agent0Loop(config)
    learner = LocalLearner(tiny_model_path, learner_settings(config), config.adapters(), "cpu")
    with torch.no_grad():  # LoRA B starts at zero: give it weights so every tensor has a gradient
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)

    def gradients(p_hat):
        episodes = [
            Episode(
                loop="agent0",
                env="agent0-qa",
                turns=[
                    Turn(
                        role="executor",
                        prompt_ids=[1, 2, 3, 4],
                        completion_ids=[5 + i, 6, 7 + i],
                        engine_logprobs=[-1.0, -1.0, -1.0],
                        loss_mask=[1, 1, 1],
                        text="",
                        adapter="executor",
                    )
                ],
                rewards={"executor": float(i % 2)},
                group_id="g",
                pass_rate=p_hat,
            )
            for i in range(4)
        ]
        samples = loop.samples(episodes)
        assert all(s.advantage_scale == adpo_scale(p_hat) for s in samples)
        batches = learner._micro_batches(samples)
        assert all(torch.allclose(b.eps_high, torch.tensor(adpo_eps_high(p_hat))) for b in batches)
        learner.optimizer.zero_grad(set_to_none=True)
        learner._accumulate(batches)
        return {
            n: p.grad.clone()
            for n, p in learner.model.named_parameters()
            if p.grad is not None and ".executor." in n
        }

    low, high = gradients(0.3), gradients(0.8)
    assert adpo_scale(0.3) == pytest.approx(0.6) and adpo_scale(0.8) == pytest.approx(1.0)
    assert low.keys() == high.keys() and low
    for name in low:
        assert torch.allclose(low[name], 0.6 * high[name], atol=1e-7, rtol=1e-4), name
    assert any(high[name].abs().sum() > 0 for name in high)


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"agent0.proposer_reward": "nonsense"}, "unknown proposer reward 'nonsense'"),
        ({"agent0.band_lo": 0.9, "agent0.band_hi": 0.2}, "band_lo 0.9 > band_hi 0.2"),
        ({"agent0.solver_samples": 1}, "agent0.solver_samples"),
        ({"agent0.samples_per_task": 4},
         "'agent0.samples_per_task' is now 'agent0.solver_samples'"),
        ({"roles.executor": None}, "needs a `executor` role"),
        ({"roles.executor.adapter": "shared"}, "needs `adapter: own`"),
        ({"rollout": {"mode": "async"}}, "rollout.mode must be sync"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_run_folder(tmp_path, capsys, change, needle):
    import yaml

    from selfplay.cli.main import main

    data = agent0_config(tmp_path)
    for key, value in change.items():
        node = data
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        if value is None:
            del node[last]
        else:
            node[last] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow  # ~1 min: two CLI processes on the tiny model
def test_resume_after_kill_9_mid_executor_phase_keeps_the_pool(tmp_path, tiny_model_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    steps = 10
    data = agent0_config(
        tmp_path, ANSWER_PREFILL, curriculum_steps=1, executor_steps=steps - 1, pool_size=4
    )
    data["train"]["steps"] = steps
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "WANDB_MODE": "disabled"}
    command = [sys.executable, "-m", "selfplay"]
    process = subprocess.Popen(
        [*command, "run", str(path)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )

    def rows(name):
        file = run_dir / name if run_dir else None
        if file is None or not file.exists():
            return []
        return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]

    run_dir, deadline = None, time.time() + 300
    while time.time() < deadline:
        found = list((tmp_path / "runs").glob("tiny-*"))
        run_dir = found[0] if found else None
        if len(rows("metrics.jsonl")) >= 3:  # the pool is built and the executor is training
            break
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert 3 <= len(rows("metrics.jsonl")) < steps, "the run must be killed mid-executor-phase"
    pool_before = (run_dir / "pools" / "iter-0.jsonl").read_text()

    result = subprocess.run(
        [*command, "resume", str(run_dir)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (run_dir / "pools" / "iter-0.jsonl").read_text() == pool_before  # not rebuilt
    metrics = rows("metrics.jsonl")
    assert [r["step"] for r in metrics if not r.get("final")] == list(range(steps))
    tasks = rows("tasks.jsonl")
    assert len({t["task_id"] for t in tasks}) == len(tasks)  # no task written twice
    assert [t["phase"] for t in tasks] == ["curriculum"] * 4 + ["executor"] * 4
    assert sum(r.get("agent0/pool/size", 0) for r in metrics) == 4  # one pool, built once


# ---------------------------------------------------------------------- parsing and code tasks
def test_parse_qa_formats():
    from curricula.proposals import parse_qa

    cpu = parse_qa("Question: What is 5.6 * 18?\nAnswer: 100.8.\n\nI will write more")
    assert (cpu.valid, cpu.question, cpu.answer) == (True, "What is 5.6 * 18?", "100.8")
    paper = parse_qa("Think.\n<question>How many primes are below 30?</question>\n\\boxed{10}")
    assert (paper.valid, paper.question, paper.answer, paper.answer_type) == (
        True,
        "How many primes are below 30?",
        "10",
        "integer",
    )
    assert not parse_qa("Question: What is 17 * 11 + 1?\nAnswer: ?").valid
    assert not parse_qa("Question: What is 17 * 23 + 5?").valid
    assert not parse_qa("no format at all").valid


def test_parse_code_io_reads_the_input_line_or_the_first_call():
    from curricula.proposals import parse_code_io

    line = parse_code_io("```python\ndef f(x):\n    return x * 2\n```\nInput: 5")
    assert (line.valid, line.program, line.input) == (True, "def f(x):\n    return x * 2", "5")
    call = parse_code_io(
        "```python\ndef f(a, b):\n    return a + b\nprint(f(2, 3))\n# more\ndef g():\n    pass\n```"
    )
    assert (call.valid, call.program, call.input) == (
        True,
        "def f(a, b):\n    return a + b",
        "2, 3",
    )
    assert not parse_code_io("```python\ndef g(x):\n    return x\nprint(g(1))\n```").valid
    assert not parse_code_io("```python\ndef f(x):\n    return x\n```").valid


def test_code_io_tasks_are_grounded_and_checked_by_execution(tmp_path):
    """The sandbox gives the gold output (two identical runs); answers are checked by running
    them: deduction compares values, abduction runs f on the proposed input."""
    import asyncio
    import dataclasses

    from curricula import programs
    from curricula.proposals import parse_code_io
    from selfplay.engines.policy import BatchingPolicy
    from selfplay.loops.agent0 import Agent0Loop

    config = validate(
        agent0_config(tmp_path, task_kind="code_io", code_io_modes=["deduction"]), "test"
    )
    loop = Agent0Loop(config)
    policy = BatchingPolicy(engine=None)
    code_io = loop.kinds["code_io"]

    async def scenario():
        program = "```python\ndef f(x):\n    return [x, x * 2]\nprint(f(3))\n```"
        task = code_io.pose(await code_io.ground(policy, parse_code_io(program)))
        assert task.valid and task.output == "[3, 6]" and task.answer == "[3, 6]"
        assert task.question.endswith("What does f(3) return?")
        assert await code_io.check(policy, task, "[3, 6]")
        assert not await code_io.check(policy, task, "[3, 7]")
        abduction = dataclasses.replace(task, mode="abduction")
        assert await code_io.check(policy, abduction, "3")
        assert not await code_io.check(policy, abduction, "4")
        random_program = (
            "```python\nimport random\ndef f(x):\n    return random.random() + x\nprint(f(1))\n```"
        )
        changing = await code_io.ground(policy, parse_code_io(random_program))
        assert not changing.valid and changing.why_invalid == "not deterministic"
        broken = "```python\ndef f(x):\n    return y\nprint(f(1))\n```"
        failing = await code_io.ground(policy, parse_code_io(broken))
        assert not failing.valid and failing.why_invalid == "program failed"
        # AZR's machinery with Agent0's validity: a helper function and a module on AZR's ban
        # list are accepted; the program's own prints are neither the gold output nor a verdict
        helper = (
            "```python\nimport time\ndef g(x):\n    return x + 1\ndef f(x):\n"
            "    print('noise')\n    return g(x) * 2\nprint(f(3))\n```"
        )
        grounded = code_io.pose(await code_io.ground(policy, parse_code_io(helper)))
        assert grounded.valid and grounded.output == "8"
        assert programs.check_program(grounded.program).why.startswith("2 function definitions")
        assert await code_io.check(policy, grounded, "8")
        assert await code_io.check(policy, dataclasses.replace(grounded, mode="abduction"), "3")

    try:
        asyncio.run(scenario())
    finally:
        loop.close()
