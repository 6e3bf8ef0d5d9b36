"""The learning check of a loop (tests/test_learning.py): run it on the tiny model and measure, per
role, whether the engine's policy moved toward that role's better-rewarded samples.

A run goes through the runner's ``build`` and ``run`` as ``selfplay run`` does; nothing of the loop
is touched. Each step the check records the samples the loop makes of its episodes (the Loop
contract's ``samples``: which turns train, and their roles; not their advantages) and scores
those turns with the engine twice, under the adapter the experiment gives each role
(``roles.<role>.adapter``): before the update, and once the step is over (when the next step
starts collecting, or the run ends): after the weight sync, if there was one.
Rewards come from the loop's own episodes (``Collected``), never from its advantages, so a loop
whose advantages have the wrong sign, or whose samples train another role's adapter, or an engine
that never gets the new weights, all show.

The measure, per role p over the samples of p trained in a step (those with an advantage):

    gain_p = Σ_i (r_i − r̄_p)·Δ_i / Σ_i |r_i − r̄_p|,   Δ_i = log π_after(y_i) − log π_before(y_i)

(r_i the episode's reward for p, r̄_p their mean, Δ_i summed over the turn's model tokens, scored
by the engine at temperature 1). It is the average number of nats by which the engine's policy
moved toward the role's better-than-average samples and away from its worse ones: to first order,
the direction in which p's expected reward rises. A flipped advantage makes it negative, a
role's samples trained into another adapter or weights that never reach the engine leave it 0.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from selfplay.types import Request, Sample


@dataclass
class RoleGain:
    role: str
    samples: int
    rewards: list[float]
    gain: float  # nats toward better-rewarded samples (the module's formula)
    moved: float  # mean |Δ| over the role's samples, nats: how much the engine's policy moved


@dataclass
class Record:
    step: int
    samples: list[Sample]
    before: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)


def adapter_of(config, turn) -> str:
    """The adapter the experiment gives the turn's role; a role the loop names for itself
    (SPIRAL's seats, ``player_0``) plays with the adapter of the config's role it came from."""
    spec = config.roles.get(turn.role)
    return spec.adapter_name(turn.role) if spec is not None else turn.adapter


def score(engine, config, samples: list[Sample]) -> list[float]:
    """Each sample's log-prob summed over its model tokens, under its role's own adapter."""
    requests = [Request(role=s.turn.role, prompt_ids=list(s.turn.prompt_ids),
                        adapter=adapter_of(config, s.turn)) for s in samples]
    scored = engine.score(requests, [list(s.turn.completion_ids) for s in samples])
    return [sum(lp for lp, mask in zip(lps, s.turn.loss_mask, strict=True) if mask)
            for lps, s in zip(scored, samples, strict=True)]


def run_and_measure(data: dict, run_dir: Path) -> tuple[dict[str, RoleGain], dict]:
    """Run the experiment ``data`` (a config dict) in ``run_dir``; per role, its gain."""
    from selfplay.config_files import dump
    from selfplay.loops import validate
    from selfplay.running.runner import build, run

    config = validate(copy.deepcopy(data), "learning check")
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(dump(config))
    world = build(config, run_dir, resume=False)
    records: list[Record] = []
    collected: dict[int, list] = {}

    make_samples, collect = world.loop.samples, world.loop.collect
    frozen = {role for role, spec in config.roles.items() if not spec.train}

    def score_pending() -> None:
        """The last step's samples under the engine now: after its learner step and sync."""
        if records and not records[-1].after:
            records[-1].after = score(world.engine, config, records[-1].samples)

    async def collecting(policy, step):
        score_pending()  # the engine serves what the previous step synced, or nothing new
        result = await collect(policy, step)
        collected[step] = result.episodes
        return result

    def sampling(episodes):
        samples = make_samples(episodes)
        # the samples the learner trains: a trained role's, with an advantage (the runner drops
        # the others); only which turns they are is read, not their advantages' values
        record = Record(step=max(collected), samples=[
            s for s in samples if s.turn.role not in frozen and abs(s.advantage *
                                                                    s.advantage_scale) > 1e-8])
        record.before = score(world.engine, config, record.samples)
        records.append(record)
        return samples

    world.loop.collect, world.loop.samples = collecting, sampling
    run(world, 0)
    score_pending()
    return gains(records, collected), {"records": records, "episodes": collected}


def gains(records: list[Record], collected: dict[int, list]) -> dict[str, RoleGain]:
    """The module's measure per role, over every step each role trained in."""
    per_role: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for record in records:
        reward_of = {}
        for episode in collected[record.step]:
            for turn in episode.turns:
                if turn.role in episode.rewards:
                    reward_of[id(turn)] = episode.rewards[turn.role]
                    reward_of[(turn.role, tuple(turn.prompt_ids), tuple(turn.completion_ids))] = (
                        episode.rewards[turn.role])
        for sample, before, after in zip(record.samples, record.before, record.after,
                                         strict=True):
            turn = sample.turn
            reward = reward_of.get(id(turn), reward_of.get(
                (turn.role, tuple(turn.prompt_ids), tuple(turn.completion_ids))))
            assert reward is not None, f"a {turn.role} sample from no episode of its step"
            per_role[turn.role].append((reward, after - before))
    result = {}
    for role, pairs in per_role.items():
        rewards = [r for r, _ in pairs]
        mean = sum(rewards) / len(rewards)
        spread = sum(abs(r - mean) for r in rewards)
        gain = sum((r - mean) * d for r, d in pairs) / spread if spread else 0.0
        moved = sum(abs(d) for _, d in pairs) / len(pairs)
        result[role] = RoleGain(role, len(pairs), rewards, gain, moved)
    return result


def describe(found: dict[str, RoleGain]) -> str:
    return json.dumps({role: {"samples": g.samples, "distinct rewards": sorted(set(g.rewards)),
                              "gain": round(g.gain, 4), "moved": round(g.moved, 4)}
                       for role, g in found.items()})
