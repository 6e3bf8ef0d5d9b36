"""Each sampler's distribution on hand-made buffers, against numbers worked out by hand
(docs/algorithms.md#samplers), plus DAPO's refill cap, ScaleRL's retire rule and determinism under a
seed."""

import math

import numpy as np
import pytest

from curricula.buffer import TaskBuffer
from curricula.curriculum import Curriculum, Group, make_sampler
from curricula.samplers import gumbel_top_k
from curricula.settings import SAMPLERS, CurriculumSettings
from tests.curriculum_steps import fill


def buffer_with(rates, families=None, difficulties=None, scores=None, last_seen=None):
    """Tasks t0.. with one recorded group of 10 each (None: unseen); each task its own family
    unless told, so no task's p̂ is pooled with another's."""
    buffer = TaskBuffer(ema=1.0)
    for i, rate in enumerate(rates):
        family = families[i] if families else f"f{i}"
        difficulty = difficulties[i] if difficulties else math.nan
        buffer.add(f"t{i}", family=family, difficulty=difficulty)
        if rate is not None:
            step = last_seen[i] if last_seen else 0
            score = scores[i] if scores else math.nan
            buffer.record(i, rate * 10, 10, step, score)
    return buffer


def sampler(name, seed=0, **settings):
    return make_sampler(CurriculumSettings(sampler=name, **settings), seed)


# ---------------------------------------------------------------------- PLR
def test_plr_rank_and_staleness_mix_hand_computed():
    buffer = buffer_with([0.5, 0.5, 0.5], scores=[0.1, 0.5, 0.3], last_seen=[0, 2, 1])
    plr = sampler("plr", plr_beta=1.0, plr_rho=0.3)
    # ranks by score: t1 → 1, t2 → 2, t0 → 3; h = 1/rank → [1/3, 1, 1/2], sum 11/6
    p_score = np.array([2 / 11, 6 / 11, 3 / 11])
    # step 4: staleness 4 − last_seen = [4, 2, 3], sum 9
    p_stale = np.array([4 / 9, 2 / 9, 3 / 9])
    expected = 0.7 * p_score + 0.3 * p_stale
    np.testing.assert_allclose(plr.probabilities(buffer, step=4), expected, rtol=1e-12)


def test_plr_temperature_sharpens_ranks():
    buffer = buffer_with([0.5, 0.5, 0.5], scores=[0.1, 0.5, 0.3], last_seen=[4, 4, 4])
    plr = sampler("plr", plr_beta=0.5, plr_rho=0.0)
    # h = rank^(−1/0.5) = rank^−2 → [1/9, 1, 1/4], sum 49/36
    np.testing.assert_allclose(
        plr.probabilities(buffer, step=5), [4 / 49, 36 / 49, 9 / 49], rtol=1e-12
    )


def test_plr_unseen_tasks_get_the_proportionate_replay_share():
    buffer = buffer_with([0.5, 0.5, 0.5, None], scores=[0.1, 0.5, 0.3], last_seen=[0, 2, 1])
    plr = sampler("plr", plr_beta=1.0, plr_rho=0.3)
    replay = 0.7 * np.array([2 / 11, 6 / 11, 3 / 11]) + 0.3 * np.array([4 / 9, 2 / 9, 3 / 9])
    expected = np.append(0.75 * replay, 0.25)  # 3 of 4 seen → replay with probability 3/4
    np.testing.assert_allclose(plr.probabilities(buffer, step=4), expected, rtol=1e-12)


def test_plr_ranks_only_among_active_tasks():
    buffer = buffer_with([0.95, 0.5, 0.5, 0.5], scores=[0.9, 0.1, 0.5, 0.3], last_seen=[4] * 4)
    buffer.retire(0.9)  # the top-scored task is retired: the others move up a rank
    plr = sampler("plr", plr_beta=1.0, plr_rho=0.0)
    np.testing.assert_allclose(plr.probabilities(buffer, 5), [0, 2 / 11, 6 / 11, 3 / 11])
    excluded = plr.probabilities(buffer, 5, exclude=np.array([2]))  # as within a DAPO refill
    np.testing.assert_allclose(excluded, [0, 1 / 3, 0, 2 / 3])  # ranks 2 → 1, 3 → 2


# ---------------------------------------------------------------------- learnability
def test_learnability_probabilities_are_p_times_one_minus_p():
    buffer = buffer_with([0.1, 0.5, 0.9, 0.3, 1.0, 0.0])
    priorities = np.array([0.09, 0.25, 0.09, 0.21, 0.0, 0.0])
    learn = sampler("learnability", learnability_oversample=1)
    np.testing.assert_allclose(
        learn.probabilities(buffer, 0), priorities / priorities.sum(), rtol=1e-12
    )


def test_learnability_lilo_keeps_the_top_of_the_candidates():
    buffer = buffer_with([0.1, 0.5, 0.9, 0.3, 1.0, 0.0])
    learn = sampler("learnability", learnability_oversample=4)  # 4·2 ≥ 6: every task a candidate
    for step in range(5):
        assert learn.sample(buffer, 2, step).tolist() == [1, 3]  # 0.25 > 0.21 > 0.09 ...
    third = learn.sample(buffer, 3, 0).tolist()
    assert third[:2] == [1, 3] and third[2] in (0, 2)  # the 0.09 tie goes either way


def test_learnability_prior_puts_unseen_tasks_first():
    buffer = buffer_with([0.1, 0.3, None])
    learn = sampler("learnability", learnability_oversample=4, prior_p=0.5)
    assert learn.sample(buffer, 1, 0).tolist() == [2]  # 0.5·0.5 beats 0.21 and 0.09


def test_pooled_p_hat_leans_on_the_level_hand_computed():
    buffer = TaskBuffer(ema=1.0)
    for task in ("a", "b", "c"):
        buffer.add(task, family="f", difficulty=1)
    buffer.record("a", 2, 10, 0)  # level p̂ 0.2
    buffer.record("c", 8, 10, 1)  # level p̂ (EMA weight 1: the newest group) 0.8
    learn = sampler("learnability", learnability_oversample=1, pool_strength=8)
    p = np.array([(10 * 0.2 + 8 * 0.8) / 18, 0.8, (10 * 0.8 + 8 * 0.8) / 18])  # b: unseen
    np.testing.assert_allclose(learn.prior_p_hat(buffer), p, rtol=1e-12)
    priority = p * (1 - p)
    np.testing.assert_allclose(learn.probabilities(buffer, 2), priority / priority.sum())
    own = sampler("learnability", pool_strength=0)
    np.testing.assert_allclose(own.prior_p_hat(buffer), [0.2, 0.8, 0.8])  # unseen: the level


# ---------------------------------------------------------------------- band
def test_band_edges_are_inclusive():
    buffer = buffer_with([0.3, 0.7, 0.2, 0.8, 0.5, None, 0.29])
    band = sampler("band", band_lo=0.3, band_hi=0.7)
    np.testing.assert_allclose(
        band.probabilities(buffer, 0), [0.25, 0.25, 0, 0, 0.25, 0.25, 0], rtol=1e-12
    )


def test_band_fills_from_the_nearest_tasks():
    buffer = buffer_with([0.3, 0.7, 0.0, 0.75, 0.5, 0.25, 1.0])
    band = sampler("band", band_lo=0.3, band_hi=0.7)
    chosen = band.sample(buffer, 5, 0).tolist()
    assert sorted(chosen[:3]) == [0, 1, 4]  # the band first
    assert sorted(chosen[3:]) == [3, 5]  # then 0.05 away (0.75, 0.25), not 0.0 or 1.0


# ---------------------------------------------------------------------- DAPO
def _play_with(outcomes):
    """A loop stand-in: round k's groups have outcomes[k] successes out of 4."""
    calls = []

    def play(indices):
        successes = outcomes[min(len(calls), len(outcomes) - 1)]
        calls.append(list(indices))
        return [
            Group(int(i), successes, 4, [1.0] * successes + [0.0] * (4 - successes))
            for i in indices
        ]

    return play, calls


def test_dapo_refill_stops_at_its_cap():
    curriculum = Curriculum(CurriculumSettings(sampler="dapo", dapo_max_rounds=2), seed=0)
    for i in range(50):
        curriculum.add(f"t{i}")
    play, calls = _play_with([4])  # every group all-correct: never kept
    kept = fill(curriculum, 5, 0, play)
    assert kept == [] and len(calls) == 3  # one draw + two refill rounds, then it stops
    assert len({i for call in calls for i in call}) == 15  # never the same task twice a step
    metrics = curriculum.metrics(0)
    assert metrics["curriculum/refill_rounds"] == 2
    assert metrics["curriculum/drawn_groups"] == 15 and metrics["curriculum/kept_groups"] == 0
    assert metrics["curriculum/effective_ratio"] == 0.0


def test_dapo_refills_only_the_missing_groups():
    curriculum = Curriculum(CurriculumSettings(sampler="dapo", dapo_max_rounds=5), seed=0)
    for i in range(50):
        curriculum.add(f"t{i}")
    play, calls = _play_with([0, 2])  # first round all wrong, then mixed groups
    kept = fill(curriculum, 4, 0, play)
    assert [len(c) for c in calls] == [4, 4] and len(kept) == 4
    assert all(0 < g.successes < g.attempts for g in kept)
    metrics = curriculum.metrics(0)
    assert metrics["curriculum/refill_rounds"] == 1
    assert metrics["curriculum/effective_ratio"] == 0.5


def test_other_samplers_keep_every_group_and_never_refill():
    curriculum = Curriculum(CurriculumSettings(sampler="uniform"), seed=0)
    for i in range(10):
        curriculum.add(f"t{i}")
    play, calls = _play_with([4])
    assert len(fill(curriculum, 3, 0, play)) == 3 and len(calls) == 1


# ---------------------------------------------------------------------- TSCL
def test_tscl_q_update_and_greedy_choice():
    buffer = buffer_with([0.2, 0.5], families=["a", "b"], difficulties=[1, 1])
    tscl = sampler("tscl", tscl_mode="epsilon", tscl_epsilon=0.0, tscl_alpha=0.1)
    tscl.observe(buffer, np.array([0, 1]), 0)  # first look: scores 0.2 and 0.5
    buffer.record(0, 6, 10, 1)  # arm a: 0.2 → 0.6, Δ = 0.4
    buffer.record(1, 5, 10, 1)  # arm b: 0.5 → 0.5, Δ = 0
    tscl.observe(buffer, np.array([0, 1]), 1)
    assert tscl.q["a@1"] == pytest.approx(0.04) and tscl.q["b@1"] == 0.0
    assert tscl.sample(buffer, 1, 2).tolist() == [0]
    eps = sampler("tscl", tscl_mode="epsilon", tscl_epsilon=0.2)
    eps.q, eps.last_score = dict(tscl.q), dict(tscl.last_score)
    np.testing.assert_allclose(eps.probabilities(buffer, 2), [0.9, 0.1])


def test_tscl_tries_never_observed_arms_first():
    buffer = buffer_with([0.2, None, None], families=["a", "b", "b"], difficulties=[0, 0, 0])
    tscl = sampler("tscl", tscl_epsilon=0.0)
    tscl.observe(buffer, np.array([0]), 0)
    assert sorted(tscl.sample(buffer, 2, 1).tolist()) == [1, 2]


def test_tscl_thompson_is_seeded():
    buffer = buffer_with([0.2, 0.4, 0.6], families=["a", "b", "c"], difficulties=[0, 0, 0])
    draws = []
    for _ in range(2):
        tscl = sampler("tscl", seed=3, tscl_mode="thompson")
        tscl.rewards = {"a@0": [0.1, -0.3], "b@0": [0.2], "c@0": [0.0, 0.05]}
        draws.append([tscl.sample(buffer, 1, s).tolist() for s in range(10)])
    assert draws[0] == draws[1] and {d[0] for d in draws[0]} <= {0, 1}  # c's |r| ≤ 0.05


# ---------------------------------------------------------------------- ScaleRL retire
def test_retire_at_point_nine():
    buffer = buffer_with([0.9, 0.89, 1.0, 0.5])
    assert buffer.retire(0.9) == 2
    assert buffer.retired.tolist() == [True, False, True, False]
    for name in SAMPLERS:
        s = sampler(name)
        for step in range(10):
            assert set(s.sample(buffer, 2, step).tolist()) <= {1, 3}, name
        assert s.probabilities(buffer, 0)[[0, 2]].sum() == 0, name


def test_retire_waits_for_min_attempts_and_curriculum_applies_it():
    settings = CurriculumSettings(sampler="uniform", retire_at=0.9, retire_min_attempts=8)
    curriculum = Curriculum(settings, seed=0)
    curriculum.add("easy")
    curriculum.report([Group(0, 4, 4, [1.0] * 4)], step=0)
    assert not curriculum.buffer.retired[0]  # 4 attempts < 8
    curriculum.report([Group(0, 4, 4, [1.0] * 4)], step=1)
    assert curriculum.buffer.retired[0]
    assert curriculum.metrics(1)["curriculum/retired"] == 1


def test_everything_retired_still_draws():
    buffer = buffer_with([1.0, 1.0])
    buffer.retire(0.9)
    assert sorted(sampler("plr").sample(buffer, 2, 0).tolist()) == [0, 1]


# ---------------------------------------------------------------------- determinism
def _trajectory(name, seed, steps=6):
    curriculum = Curriculum(CurriculumSettings(sampler=name, retire_at=0.9), seed=seed)
    rng = np.random.default_rng(0)
    for i in range(60):
        curriculum.add(f"t{i}", family=f"f{i % 3}", difficulty=i % 4)
    picks = []

    def play(indices):
        return [
            Group(int(i), int(k), 4, [1.0] * int(k) + [0.0] * (4 - int(k)))
            for i, k in zip(indices, rng.integers(0, 5, len(indices)), strict=True)
        ]

    for step in range(steps):
        groups = fill(curriculum, 5, step, play)
        picks.append([g.task for g in groups])
    return picks


@pytest.mark.parametrize("name", SAMPLERS)
def test_samplers_are_deterministic_under_a_seed(name):
    assert _trajectory(name, 7) == _trajectory(name, 7)
    assert _trajectory(name, 7) != _trajectory(name, 8)


def test_gumbel_top_k_follows_the_weights():
    rng = np.random.default_rng(0)
    weights = np.array([0.0, 1.0, 3.0])
    firsts = [gumbel_top_k(weights, 1, rng)[0] for _ in range(4000)]
    assert 0 not in firsts
    assert np.mean(np.array(firsts) == 2) == pytest.approx(0.75, abs=0.03)


def test_successive_sampling_without_replacement_by_rejection():
    rng = np.random.default_rng(0)
    weights = np.array([15.0] + [1.0] * 15)  # total 30; 8·2 ≤ 16 tasks: the rejection path
    draws = [gumbel_top_k(weights, 2, rng) for _ in range(6000)]
    assert all(len(set(d.tolist())) == 2 for d in draws)
    assert np.mean([d[0] == 0 for d in draws]) == pytest.approx(0.5, abs=0.02)
    # P(task 0 in the pair) = 1/2 + 1/2 · 15/29
    assert np.mean([0 in d for d in draws]) == pytest.approx(0.5 + 0.5 * 15 / 29, abs=0.02)


def test_unknown_sampler_names_the_choices():
    with pytest.raises(ValueError, match="(?s)'plr'.*input_value='bogus'"):  # the settings model
        sampler("bogus")
    unchecked = CurriculumSettings.model_construct(sampler="bogus")  # no validation
    with pytest.raises(ValueError, match="unknown sampler 'bogus'.*plr"):  # make_sampler's own
        make_sampler(unchecked)
