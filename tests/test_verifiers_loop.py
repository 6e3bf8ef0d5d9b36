"""``loop: verifiers`` (selfplay/loops/verifiers/): a verifiers v1 environment played by our
policy on the tiny random model, through verifiers' own machinery (its Env, agents,
interception server and rubric; our client and in-process harness behind them).

The environments below are written into a folder on ``sys.path`` and named by id, as an
installed verifiers package is (``vf-relay-env`` imports ``vf_relay_env``): ``vf_relay_env``
(two agents in multi-turn interactions, rewards of a hand-checkable form recorded in
``finalize``) and ``vf_flaky_env`` (a single-agent taskset whose rubric raises on odd tasks).
The bad-input cases run ``selfplay run`` on experiments/verifiers-propose-solve-cpu.yaml.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest
import verifiers.v1 as vf

from selfplay import cli
from selfplay.core.errors import UserError
from selfplay.engines.hf import HFEngine
from selfplay.engines.lora import LoraSpec
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import make_loop, validate
from selfplay.loops.verifiers import bridge
from tests.conftest import tiny_config

ENVS = {
    # two agents relay for two rounds; each trace gets two rewards, weights 0.5 and 2:
    # reward = 0.5 * (length of its last reply % 5) / 4 + 2 * 1
    "vf_relay_env": '''
        import verifiers.v1 as vf
        __all__ = ["RelayEnv", "RelayTaskset"]

        class RelayTask(vf.Task[vf.TaskData]):
            pass

        class RelayTaskset(vf.Taskset[RelayTask, vf.TasksetConfig]):
            def load(self):
                return [RelayTask(vf.TaskData(prompt=f"Say something about {w}."))
                        for w in ("cats", "rain", "tea")]

        class RelayConfig(vf.EnvConfig):
            opener: vf.AgentConfig = vf.AgentConfig()
            replier: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})

        class RelayEnv(vf.Env[RelayConfig]):
            async def run(self, task, agents):
                side = vf.Task(vf.TaskData(prompt=None))
                async with agents.opener.interaction(task) as a, \\
                        agents.replier.interaction(side) as b:
                    said = await a.turn()
                    heard = await b.turn(said.last_reply or "...")
                    await a.turn(heard.last_reply or "...")

            async def finalize(self, task, episode):
                for trace in episode.traces:
                    trace.record_reward("length", len(trace.last_reply) % 5 / 4, 0.5)
                    trace.record_reward("played", 1.0, 2.0)
    ''',
    "vf_flaky_env": '''
        import verifiers.v1 as vf
        __all__ = ["FlakyTaskset"]

        class FlakyTask(vf.Task[vf.TaskData]):
            @vf.reward
            async def judged(self, trace: vf.Trace) -> float:
                if self.data.idx % 2:
                    raise ValueError("the rubric broke")
                return 1.0

        class FlakyTaskset(vf.Taskset[FlakyTask, vf.TasksetConfig]):
            def load(self):
                return [FlakyTask(vf.TaskData(prompt=f"Task {i}.")) for i in range(2)]
    ''',
}


@pytest.fixture(scope="module")
def envs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("vf_envs")
    for name, source in ENVS.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def experiment(tmp_path: Path, env: str, roles: list[str], **settings) -> dict:
    config = tiny_config(tmp_path, loop="verifiers",
                         verifiers={"env": env, "tasks_per_step": 2, "group_size": 2, **settings})
    config["roles"] = {r: {"prompt": "verifiers_agent", "adapter": "own"} for r in roles}
    del config["rlvr"]
    return config


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    return HFEngine(tiny_model_path, adapters=["opener", "replier", "agent"],
                    lora=LoraSpec(r=4, alpha=8), seed=0)


class Recorder:
    """The engine, remembering every completion it returned (what the learner must see)."""

    def __init__(self, engine) -> None:
        self.engine, self.completions = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, requests):
        completions = self.engine.generate(requests)
        self.completions += completions
        return completions


def test_learner_sees_the_engines_ids_and_the_traces_hold_the_same(envs, engine, tmp_path):
    """No re-tokenisation anywhere: each Turn is an engine completion's ids and log-probs, and
    every trace branch verifiers records is made of the same ids (multi-turn: each call's own
    prompt ids, our engine's template, never verifiers' rendering)."""
    loop = make_loop(validate(experiment(tmp_path, "vf-relay-env", ["opener", "replier"]), "t"))
    recorder = Recorder(engine)
    policy = BatchingPolicy(recorder)
    client = bridge.PolicyClient(
        policy, lambda role, messages, cap, origin: loop.role_request(role, messages, False,
                                                                      cap, origin),
        lambda request, completion: loop.turn(request, completion, policy))

    async def play():
        context = vf.ModelContext(model="m", client=client.config(), sampling=vf.Sampling())
        async with loop.env.serving():
            return await policy.gather(loop.env.run_episode(loop.tasks[i], context,
                                                            on_trace=client.watch(f"e{i}"))
                                       for i in range(2))

    played = asyncio.run(play())
    assert all(p.ok for p in played), [p.errors for p in played]
    engine_calls = {tuple(c.token_ids): c for c in recorder.completions}
    assert len(recorder.completions) == 6  # 2 episodes x (opener 2 calls + replier 1)
    assert policy.engine_calls == 3  # the two episodes' calls shared each batch
    for episode in played:
        assert sorted(t.agent.name for t in episode.traces) == ["opener", "replier"]
        for trace in episode.traces:
            turns = client.turns[trace.id]
            assert len(turns) == (2 if trace.agent.name == "opener" else 1)
            for turn in turns:
                completion = engine_calls[tuple(turn.completion_ids)]
                assert turn.prompt_ids == completion.prompt_ids
                assert turn.engine_logprobs == completion.logprobs
            # the trace's last branch is the last call: its prompt and completion, same ids
            last = turns[-1]
            branch = trace.branches[-1]
            assert branch.token_ids == last.prompt_ids + last.completion_ids
            sampled = [lp for lp, s in zip(branch.logprobs, branch.sampled_mask, strict=True)
                       if s]
            assert sampled[-len(last.engine_logprobs):] == last.engine_logprobs


def test_rewards_reach_the_learner_unchanged_per_agent(envs, engine, tmp_path):
    """Each agent's reward is its trace's weighted rubric sum, 0.5·(len % 5)/4 + 2, computed
    here by hand from the reply; GRPO advantages per (group, agent) come from exactly those."""
    config = experiment(tmp_path, "vf-relay-env", ["opener", "replier"])
    config["train"]["loss"] = "grpo"  # its group-relative advantages: (r − mean) / (std + ε)
    loop = make_loop(validate(config, "t"))
    collected = asyncio.run(loop.collect(BatchingPolicy(engine), 0))
    assert len(collected.episodes) == 4 and collected.metrics["verifiers/failed_episodes"] == 0
    for episode in collected.episodes:
        for agent in ("opener", "replier"):
            reply = episode.info["replies"][agent]
            assert episode.rewards[agent] == pytest.approx(0.5 * (len(reply) % 5) / 4 + 2.0,
                                                           abs=1e-12)  # float sums, exact
        assert {t.role for t in episode.turns} == {"opener", "replier"}
    samples = loop.samples(collected.episodes)
    assert len(samples) == sum(len(e.turns) for e in collected.episodes)
    for sample in samples:
        group = [e for e in collected.episodes if e.group_id == sample.group_id]
        mine = next(e for e in group if any(t is sample.turn for t in e.turns))
        rewards = [e.rewards[sample.turn.role] for e in group]
        mean = sum(rewards) / 2
        std = (sum((r - mean) ** 2 for r in rewards) / 2) ** 0.5
        expected = (mine.rewards[sample.turn.role] - mean) / (std + 1e-6)  # GRPO, population std
        assert sample.advantage == pytest.approx(expected, abs=1e-9)


def test_a_rubric_that_raises_is_a_counted_failed_episode(envs, engine, tmp_path):
    """Task 1's rubric raises: its episodes are kept (with the error) but never trained on,
    counted in the metrics; task 0's play and train as usual."""
    loop = make_loop(validate(experiment(tmp_path, "vf_flaky_env", ["agent"]), "t"))
    collected = asyncio.run(loop.collect(BatchingPolicy(engine), 0))
    failed = [e for e in collected.episodes if e.info.get("failed")]
    assert len(failed) == 2 and collected.metrics["verifiers/failed_episodes"] == 2.0
    assert all(e.turns == [] and e.rewards == {} for e in failed)
    assert all("the rubric broke" in " ".join(e.info["errors"]) for e in failed)
    good = [e for e in collected.episodes if not e.info.get("failed")]
    assert [e.rewards for e in good] == [{"agent": 1.0}, {"agent": 1.0}]
    assert [e.pass_rate for e in good] == [1.0, 1.0]  # p̂ for ADPO: 2 of 2 reached success_at
    assert loop.curriculum.buffer.attempts.sum() == 2  # only the graded episodes count


@pytest.mark.parametrize(("overrides", "named"), [
    (["verifiers.env=no-such-env"], "no-such-env"),
    (["verifiers.env=selfplay.loops.verifiers.envs.nothing_here"], "nothing_here"),
    (["roles={proposer: {prompt: verifiers_agent}}"], "agent `solver` of"),
    (["roles.judge={prompt: verifiers_agent}"], "no `judge` role"),
    (["verifiers.agents={critic: {max_turns: 2}}"], "verifiers.agents.critic"),
])
def test_bad_input_is_one_line_exit_2_before_the_run_folder(overrides, named, tmp_path,
                                                            monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "verifiers-propose-solve-cpu", "model.path=tiny-random",
                     f"run_dir={tmp_path / 'runs'}", *overrides])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err, err
    assert not (tmp_path / "runs").exists()


def test_without_verifiers_the_loop_refuses_in_one_line(monkeypatch):
    from selfplay import loops

    for name in [m for m in sys.modules if m.startswith("selfplay.loops.verifiers")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "verifiers", None)  # what `import verifiers` sees uninstalled
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)
    with pytest.raises(UserError, match=r"pip install 'selfplay\[verifiers\]'"):
        loops.loop_class("verifiers")


def test_a_dapo_sampler_draws_again_for_the_groups_it_drops_as_in_rlvr(tmp_path, monkeypatch):
    """DAPO keeps a group only when its episodes neither all succeed nor all fail; like rlvr,
    the loop draws again (up to ``dapo_max_rounds``) until ``tasks_per_step`` groups are kept.
    Here a task whose id is a multiple of 3 has one success in two episodes (kept), any other
    two successes (dropped); the played episodes are made by hand, no model is needed."""
    from selfplay.types import Episode

    config = experiment(tmp_path, "selfplay.loops.verifiers.envs.arithmetic", ["agent"],
                        tasks_per_step=2, group_size=2)
    config["curriculum"] = {"sampler": "dapo", "dapo_max_rounds": 3}
    loop = make_loop(validate(config, "t"))
    drawn: list[list[int]] = []

    async def play(policy, tasks, size, prefix, greedy=False):
        drawn.append(list(tasks))
        return [Episode("verifiers", "arithmetic", [], {"agent": 0.0 if j and t % 3 == 0 else 1.0},
                        f"{prefix}-t{t}", {"task": t}) for t in tasks for j in range(size)]

    monkeypatch.setattr(loop, "play", play)
    collected = asyncio.run(loop.collect(None, 0))
    kept = {e.group_id for e in collected.episodes}
    assert len(kept) == 2 and all(int(g.split("-t")[1]) % 3 == 0 for g in kept)
    assert len(drawn) > 1 and any(t % 3 for t in drawn[0])  # the first draw fell short
    assert collected.metrics["curriculum/kept_groups"] == 2.0
    assert collected.metrics["curriculum/refill_rounds"] == len(drawn) - 1
