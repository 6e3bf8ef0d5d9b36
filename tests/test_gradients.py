"""Gradients of every loss, aggregation, advantage estimator and term, with respect to the
log-probabilities, against autograd through a reference written here from docs/algorithms.md.

A loss can have the right value and the wrong gradient (a term that should be detached is not, a
ratio clipped on the wrong side), so value tests alone miss it. Each test runs the learner's own
loss, ``Scorer.accumulate`` over the micro-batches ``batches.micro_batches`` makes, with every
token's log-probability a leaf tensor (the model is not needed: the loss starts from the
log-probs), and compares the gradient each token gets with autograd's through the reference.
The points are chosen so that every clipped, capped or detached branch is active on some tokens
while others keep a non-zero gradient; each test asserts both (a test that only sees zero
gradients proves nothing).

Floats: the two sides compute the same sums in another order, in float32 (the learner) and
float64 (the reference); 1e-5 relative is far above float32's rounding of these few terms and
far below any planted bug's effect (≥ 1e-2).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
import torch

from selfplay.rl.advantages import (
    RAEBaseline,
    apply_adpo,
    group_relative_samples,
    rae_samples,
)
from selfplay.rl.losses import LOSS_PRESETS, kl_estimate, tis_weights, token_losses
from selfplay.rl.trr import trr_samples
from selfplay.training.base import LearnerSettings
from selfplay.training.batches import micro_batches
from selfplay.training.scoring import Scorer
from selfplay.types import Episode, Sample, Turn

TOLERANCE = {"rel": 1e-5, "abs": 1e-9}
EPS_LOW, EPS_HIGH, EPS_MAX, LMAX = 0.2, 0.28, 5.0, 10


# ---------------------------------------------------------------------- the tokens of a test
@dataclass
class Token:
    """One model token: its log-prob under the policy now (π_θ), at the first pass (π_old), under
    the engine and under the reference policy (KL)."""

    logp: float
    old: float | None = None  # None: π_old = π_θ (one epoch)
    engine: float | None = None  # None: the engine agrees with π_old (TIS weight 1)
    ref: float = 0.0


@dataclass
class Seq:
    """One sample: its tokens, advantage and group (``tool`` tokens are masked out)."""

    tokens: list[Token]
    advantage: float = 1.0
    group: str = "g"
    tool: int = 0  # masked tool-output tokens appended after the model's
    pass_rate: float | None = None
    role: str = "r"
    extra: dict = field(default_factory=dict)


def token_id(sample: int, position: int) -> int:
    """Every token of a test a distinct id, so a micro-batch's targets say whose it is."""
    return 1000 * (sample + 1) + position


def samples_of(seqs: list[Seq]) -> list[Sample]:
    out = []
    for i, seq in enumerate(seqs):
        ids = [token_id(i, k) for k in range(len(seq.tokens))]
        engine = [t.engine if t.engine is not None else (t.old if t.old is not None else t.logp)
                  for t in seq.tokens]
        turn = Turn(role=seq.role, prompt_ids=[7, 8 + i], completion_ids=ids + [5] * seq.tool,
                    engine_logprobs=engine + [0.0] * seq.tool,
                    loss_mask=[1] * len(ids) + [0] * seq.tool, text="", adapter="a")
        out.append(Sample(turn=turn, advantage=seq.advantage, group_id=seq.group,
                          pass_rate=seq.pass_rate))
    return out


def learner_gradient(samples: list[Sample], seqs: list[Seq], settings: LearnerSettings,
                     micro_batch_size: int = 64) -> dict[int, float]:
    """d(batch loss)/d(log π_θ) of every token, through the learner's own loss."""
    by_id = {token_id(i, k): token for i, seq in enumerate(seqs)
             for k, token in enumerate(seq.tokens)}
    batches = micro_batches(samples, ["a"], aggregation=settings.aggregation,
                            max_new_tokens=settings.max_new_tokens,
                            micro_batch_size=micro_batch_size, eps_high=settings.eps_high,
                            share_prefixes=False)
    leaves = {}
    for batch in batches:
        tokens = [by_id[int(t)] for t in batch.targets]
        leaf = torch.tensor([t.logp for t in tokens], requires_grad=True)
        leaves[id(batch)] = leaf
        if any(t.old is not None for t in tokens):  # PPO epochs: the first pass's log-probs
            batch.logp_old = torch.tensor([t.logp if t.old is None else t.old for t in tokens])
        batch.logp_ref = torch.tensor([t.ref for t in tokens])  # the reference pass, done
    scorer = Scorer(None, [], settings, None, "cpu")
    scorer.token_logprobs = lambda batch: (leaves[id(batch)], torch.zeros_like(leaves[id(batch)]))
    scorer.accumulate(batches)
    grads = {}
    for batch in batches:
        for target, grad in zip(batch.targets.tolist(), leaves[id(batch)].grad.tolist(),
                                strict=True):
            grads[target] = grad
    return grads


# ---------------------------------------------------------------------- the reference
def reference_coefficients(seqs: list[Seq], mode: str) -> list[float]:
    """docs/algorithms.md#aggregation-modes, c_i of each sample (tool tokens are not length)."""
    lengths = [len(s.tokens) for s in seqs]
    n = len(seqs)
    if mode == "token-mean":
        return [1 / sum(lengths)] * n
    if mode == "seq-mean-token-sum-norm":
        return [1 / (n * LMAX)] * n
    if mode == "seq-mean-token-mean":
        return [1 / (n * length) for length in lengths]
    assert mode == "prompt-level"
    group_tokens: dict[str, int] = defaultdict(int)
    for seq, length in zip(seqs, lengths, strict=True):
        group_tokens[seq.group] += length
    return [1 / (len(group_tokens) * group_tokens[s.group]) for s in seqs]


def reference_token_loss(objective: str, logp: torch.Tensor, old: float, advantage: float,
                         eps_high: float, cap_weight: float = EPS_MAX) -> torch.Tensor:
    """docs/algorithms.md#token-objectives, one token; π_old and sg(·) are plain numbers."""
    if objective == "reinforce":
        return -advantage * logp
    ratio = torch.exp(logp - old)
    if objective == "cispo":
        weight = min(float(ratio.detach()), cap_weight)  # sg(min(ρ, ε_max)): a number, no gradient
        return -weight * advantage * logp
    assert objective == "ppo"
    clipped = torch.clamp(ratio, 1 - EPS_LOW, 1 + eps_high)
    return -torch.minimum(ratio * advantage, clipped * advantage)


def reference_kl(logp: torch.Tensor, ref: float, estimator: str) -> torch.Tensor:
    """docs/algorithms.md#kl-to-the-initial-policy: Schulman's k1, k2, k3 (k3 clamped as verl)."""
    ell = logp - ref
    if estimator == "k1":
        return ell
    if estimator == "k2":
        return 0.5 * ell**2
    ell = torch.clamp(ell, -20.0, 20.0)
    return torch.clamp(torch.exp(-ell) - 1 + ell, -10.0, 10.0)


def reference_gradient(seqs: list[Seq], *, objective: str, aggregation: str,
                       advantages: list[float] | None = None, tis_cap: float | None = None,
                       kl_coef: float = 0.0, kl_estimator: str = "k3",
                       scales: list[float] | None = None,
                       eps_highs: list[float] | None = None) -> dict[int, float]:
    """Autograd of Σ_t c_t·(w_t·ℓ_t + β·KL_t) (docs/algorithms.md#losses) in float64."""
    coefficients = reference_coefficients(seqs, aggregation)
    grads = {}
    for i, seq in enumerate(seqs):
        advantage = (seq.advantage if advantages is None else advantages[i]) * (
            1.0 if scales is None else scales[i])
        eps_high = EPS_HIGH if eps_highs is None else eps_highs[i]
        for k, token in enumerate(seq.tokens):
            logp = torch.tensor(token.logp, dtype=torch.float64, requires_grad=True)
            old = token.logp if token.old is None else token.old
            engine = old if token.engine is None else token.engine
            weight = 1.0 if tis_cap is None else min(math.exp(old - engine), tis_cap)
            loss = weight * reference_token_loss(objective, logp, old, advantage, eps_high)
            if kl_coef:
                loss = loss + kl_coef * reference_kl(logp, token.ref, kl_estimator)
            (coefficients[i] * loss).backward()
            grads[token_id(i, k)] = float(logp.grad)
    return grads


def settings(**kwargs) -> LearnerSettings:
    base = {"objective": "ppo", "aggregation": "token-mean", "eps_low": EPS_LOW,
            "eps_high": EPS_HIGH, "cispo_eps_max": EPS_MAX, "tis_cap": None,
            "max_new_tokens": LMAX, "lora": None}
    return LearnerSettings(**(base | kwargs))


def assert_gradients(got: dict[int, float], want: dict[int, float], zero: set[int],
                     nonzero: set[int]) -> None:
    """Every token's gradient as the reference's; ``zero``: tokens whose branch zeroes it,
    ``nonzero``: tokens that must keep one (both sets non-empty where the test has a branch)."""
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], **TOLERANCE), (key, got[key], want[key])
    for key in zero:
        assert want[key] == 0.0 and got[key] == 0.0, key
    for key in nonzero:
        assert abs(want[key]) > 1e-3, key


def ids(sample: int, *positions: int) -> set[int]:
    return {token_id(sample, k) for k in positions}


# ---------------------------------------------------------------------- token objectives
def test_ppo_gradient_is_zero_exactly_where_the_clip_binds_on_either_side():
    """ρ = e^(logp − old), ε_low 0.2, ε_high 0.28. Â > 0: clipped at ρ = 1.5, not at 1.25
    (a clip at 1 + ε_low = 1.2 would bind there) nor at 0.5; Â < 0: clipped at ρ = 0.75, not
    at 0.85 nor 1.5 (a clip at 1 − ε_high = 0.72 would not bind at 0.75)."""
    log = math.log
    seqs = [
        Seq([Token(0.0, old=-log(1.5)), Token(0.0, old=-log(1.25)), Token(0.0, old=-log(0.5))],
            advantage=1.0),  # ρ 1.5 clipped, 1.25 not, 0.5 not (min picks ρ·Â)
        Seq([Token(-1.0, old=-1.0 - log(0.75)), Token(-1.0, old=-1.0 - log(0.85)),
             Token(-1.0, old=-1.0 - log(1.5))], advantage=-2.0),  # 0.75 clipped, 0.85, 1.5 not
    ]
    got = learner_gradient(samples_of(seqs), seqs, settings())
    want = reference_gradient(seqs, objective="ppo", aggregation="token-mean")
    assert_gradients(got, want, zero=ids(0, 0) | ids(1, 0), nonzero=ids(0, 1, 2) | ids(1, 1, 2))
    # the unclipped gradient is −c·ρ·Â (d ρ / d log π = ρ)
    assert got[token_id(0, 1)] == pytest.approx(-1.25 / 6, **TOLERANCE)
    assert got[token_id(1, 2)] == pytest.approx(2 * 1.5 / 6, **TOLERANCE)


def test_cispo_gradient_keeps_the_capped_weight_and_never_differentiates_it():
    """ℓ = −sg(min(ρ, ε_max))·Â·log π: ρ = e³ is capped at 5 and still has gradient −5·Â·c;
    ρ = 2 has −2·Â·c (a weight left attached would add −Â·ρ·log π·c)."""
    seqs = [Seq([Token(-1.0, old=-4.0), Token(-2.0, old=-2.0 - math.log(2.0))], advantage=1.5),
            Seq([Token(-0.5, old=-0.5 - math.log(2.0))], advantage=-1.0)]
    got = learner_gradient(samples_of(seqs), seqs, settings(objective="cispo"))
    want = reference_gradient(seqs, objective="cispo", aggregation="token-mean")
    assert_gradients(got, want, zero=set(), nonzero=ids(0, 0, 1) | ids(1, 0))
    assert got[token_id(0, 0)] == pytest.approx(-5 * 1.5 / 3, **TOLERANCE)
    assert got[token_id(0, 1)] == pytest.approx(-2 * 1.5 / 3, **TOLERANCE)


def test_reinforce_gradient_is_minus_the_advantage_whatever_the_ratio():
    seqs = [Seq([Token(-1.0, old=-3.0), Token(-0.2)], advantage=0.7),
            Seq([Token(-2.0, old=-1.0)], advantage=-1.3)]
    got = learner_gradient(samples_of(seqs), seqs, settings(objective="reinforce"))
    want = reference_gradient(seqs, objective="reinforce", aggregation="token-mean")
    assert_gradients(got, want, zero=set(), nonzero=ids(0, 0, 1) | ids(1, 0))
    assert got[token_id(1, 0)] == pytest.approx(1.3 / 3, **TOLERANCE)


def test_the_token_objectives_take_no_gradient_through_what_they_hold_fixed():
    """Called directly with every input a leaf: π_old, the engine's and the reference's
    log-probs get none where the formulas stop it (TIS weight, CISPO weight, KL reference)."""
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    engine = torch.tensor([-1.5, -1.0], requires_grad=True)
    ref = torch.tensor([-0.5, -3.0], requires_grad=True)
    weights = tis_weights(logp, engine, 2.0)
    assert not weights.requires_grad  # w_t carries no gradient to π_old or the engine
    assert weights.tolist() == pytest.approx([math.exp(0.5), math.exp(-1.0)])
    cispo, _ = token_losses("cispo", logp, logp.detach() - 3.0, torch.tensor([1.0, -1.0]),
                            EPS_LOW, torch.tensor([EPS_HIGH] * 2), EPS_MAX)
    cispo.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-5.0, 5.0])  # the capped weight, detached
    for estimator in ("k1", "k2", "k3"):
        kl_estimate(logp, ref, estimator).sum().backward()
    assert ref.grad is None and engine.grad is None


# ---------------------------------------------------------------------- TIS and KL
def test_tis_weight_scales_the_gradient_capped_and_uncapped():
    """w = min(exp(old − engine), C = 2): e^0.5 uncapped, e^1.5 capped to 2, e^−1 below 1; with
    one epoch π_old = π_θ, so w would carry gradient if it were not stopped."""
    seqs = [Seq([Token(-1.0, engine=-1.5), Token(-1.0, engine=-2.5), Token(-2.0, engine=-1.0)],
                advantage=1.0)]
    got = learner_gradient(samples_of(seqs), seqs, settings(objective="reinforce", tis_cap=2.0))
    want = reference_gradient(seqs, objective="reinforce", aggregation="token-mean", tis_cap=2.0)
    assert_gradients(got, want, zero=set(), nonzero=ids(0, 0, 1, 2))
    assert [got[token_id(0, k)] for k in range(3)] == pytest.approx(
        [-math.exp(0.5) / 3, -2 / 3, -math.exp(-1.0) / 3], **TOLERANCE)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_term_gradient_per_estimator_with_its_clamps(estimator):
    """β·c·dKL/dlog π added to the policy's, without the TIS weight (w ≠ 1 on every token
    here). k1: 1; k2: ℓ; k3: 1 − e^−ℓ inside its clamps, 0 where the estimate is capped at 10
    (ℓ = −3: e³ − 4 = 16.1) and where ℓ is beyond ±20 (no NaN from e^100 · 0)."""
    beta = 0.5
    seqs = [Seq([Token(-1.0, engine=-1.5, ref=-1.5), Token(-2.0, engine=-1.0, ref=-1.0),
                 Token(-1.0, engine=-2.0, ref=2.0), Token(-1.0, engine=-1.2, ref=99.0)],
                advantage=0.0)]
    got = learner_gradient(samples_of(seqs), seqs, settings(objective="reinforce", tis_cap=2.0,
                                                            kl_coef=beta, kl_estimator=estimator))
    want = reference_gradient(seqs, objective="reinforce", aggregation="token-mean",
                              tis_cap=2.0, kl_coef=beta, kl_estimator=estimator)
    assert all(math.isfinite(g) for g in got.values())
    capped = ids(0, 2, 3) if estimator == "k3" else set()
    assert_gradients(got, want, zero=capped, nonzero=ids(0, 0, 1) | (ids(0, 2, 3) - capped))
    first = {"k1": 1.0, "k2": 0.5, "k3": 1 - math.exp(-0.5)}[estimator]
    assert got[token_id(0, 0)] == pytest.approx(beta * first / 4, **TOLERANCE)


def test_kl_and_policy_terms_add_up_under_ppo_with_tis():
    seqs = [Seq([Token(-1.0, old=-1.3, engine=-1.6, ref=-0.7), Token(-0.5, old=-0.2, ref=-1.5)],
                advantage=1.2),
            Seq([Token(-2.0, old=-1.2, engine=-1.0, ref=-2.5)], advantage=-0.8)]
    chosen = settings(tis_cap=2.0, kl_coef=0.1, kl_estimator="k3",
                      aggregation="seq-mean-token-mean")
    got = learner_gradient(samples_of(seqs), seqs, chosen)
    want = reference_gradient(seqs, objective="ppo", aggregation="seq-mean-token-mean",
                              tis_cap=2.0, kl_coef=0.1, kl_estimator="k3")
    assert_gradients(got, want, zero=set(), nonzero=ids(0, 0, 1) | ids(1, 0))


# ---------------------------------------------------------------------- aggregation
AGGREGATION_BATCH = [
    Seq([Token(-1.0), Token(-2.0)], advantage=1.0, group="a"),
    Seq([Token(-0.5)] * 6, advantage=-0.5, group="a", tool=3),
    Seq([Token(-1.5)] * 4, advantage=2.0, group="b"),
]


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum-norm",
                                         "seq-mean-token-mean", "prompt-level"])
@pytest.mark.parametrize("micro_batch_size", [1, 2, 64])
def test_aggregation_coefficients_reach_every_tokens_gradient(aggregation, micro_batch_size):
    """Lengths 2, 6 (and 3 masked tool tokens), 4; groups a, a, b; L_max 10: each token's
    gradient is −c_i·Â_i, the same whatever the micro-batches."""
    seqs = AGGREGATION_BATCH
    got = learner_gradient(samples_of(seqs), seqs, settings(aggregation=aggregation),
                           micro_batch_size)
    want = reference_gradient(seqs, objective="ppo", aggregation=aggregation)
    assert_gradients(got, want, zero=set(), nonzero=set(want))
    c = {"token-mean": 1 / 12, "seq-mean-token-sum-norm": 1 / 30,
         "seq-mean-token-mean": 1 / 6, "prompt-level": 1 / 16}[aggregation]
    assert got[token_id(0, 0)] == pytest.approx(-c, **TOLERANCE)


# ---------------------------------------------------------------------- estimators
def episodes_of(rewards: dict[str, list[float]], lengths: list[int]) -> list[Episode]:
    """One episode per reward, one turn of ``lengths[i]`` tokens each, grouped by the keys."""
    episodes = []
    values = [(group, reward) for group, rewards_ in rewards.items() for reward in rewards_]
    for (group, reward), length in zip(values, lengths, strict=True):
        turn = Turn(role="r", prompt_ids=[7], completion_ids=[1] * length,
                    engine_logprobs=[-1.0] * length, loss_mask=[1] * length, text="",
                    adapter="a")
        episodes.append(Episode(loop="t", env="e", turns=[turn], rewards={"r": reward},
                                group_id=group))
    return episodes


def reference_group(rewards: list[float], mode: str) -> list[float]:
    """docs/algorithms.md#advantages."""
    g = len(rewards)
    mean = sum(rewards) / g
    if mode == "reinforce":
        return list(rewards)
    if mode == "drgrpo":
        return [r - mean for r in rewards]
    if mode == "rloo":  # r_i minus the mean of the others
        return [r - (sum(rewards) - r) / (g - 1) for r in rewards]
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / g)
    return [(r - mean) / (std + 1e-6) for r in rewards]


def gradient_of_samples(samples: list[Sample], seq_of_sample, chosen: LearnerSettings):
    """The learner's gradient for estimator-made samples, and the reference inputs in order."""
    seqs = [seq_of_sample(sample) for sample in samples]
    for index, sample in enumerate(samples):  # ids by position in this batch
        sample.turn.completion_ids = [token_id(index, k) for k in range(len(seqs[index].tokens))]
    return learner_gradient(samples, seqs, chosen), seqs


@pytest.mark.parametrize("preset", sorted(LOSS_PRESETS))
def test_each_loss_preset_trains_on_its_estimators_advantages(preset, tmp_path):
    """``train.loss`` from the config: its objective, estimator and aggregation (the presets'
    table in docs/algorithms.md#loss-presets), end to end from rewards to gradients."""
    from selfplay.loops import validate
    from selfplay.training.make import learner_settings
    from tests.conftest import tiny_config

    table = {"grpo": ("ppo", "grpo", "seq-mean-token-mean"),
             "drgrpo": ("ppo", "drgrpo", "seq-mean-token-sum-norm"),
             "rloo": ("ppo", "rloo", "seq-mean-token-sum-norm"),
             "reinforce": ("reinforce", "drgrpo", "seq-mean-token-sum-norm"),
             "cispo": ("cispo", "drgrpo", "token-mean")}
    objective, estimator, aggregation = table[preset]
    config = validate(tiny_config(tmp_path, train={"loss": preset},
                                  sampling={"max_new_tokens": LMAX}), "t")
    chosen = learner_settings(config)
    chosen.tis_cap = None
    rewards = {"p": [1.0, 0.0, 0.0, 0.5], "q": [2.0, -1.0, 0.8]}
    episodes = episodes_of(rewards, lengths=[2, 3, 1, 4, 2, 2, 3])
    samples = group_relative_samples(episodes, LOSS_PRESETS[preset][1])
    lengths = {id(s): len(s.turn.completion_ids) for s in samples}
    got, seqs = gradient_of_samples(
        samples, lambda s: Seq([Token(-1.0)] * lengths[id(s)], group=s.group_id), chosen)
    advantages = [a for values in rewards.values() for a in reference_group(values, estimator)]
    want = reference_gradient(seqs, objective=objective, aggregation=aggregation,
                              advantages=advantages)
    assert_gradients(got, want, zero=set(), nonzero=set(want))


@pytest.mark.parametrize("order", ["paper", "code"])
def test_rae_advantages_reach_the_gradient_per_game_and_role(order):
    """b[env, role] ← α·b + (1−α)·R; Â = R − b after (paper) or before (code) the update.
    Two games and two roles, rewards in sequence; every turn of a role gets its Â."""
    alpha = 0.9
    sequence = [("kuhn", "p0", 1.0), ("kuhn", "p1", -1.0), ("kuhn", "p0", -1.5),
                ("ttt", "p0", 0.5), ("kuhn", "p1", 1.0), ("kuhn", "p0", 1.0)]
    episodes = []
    for index, (env, role, reward) in enumerate(sequence):
        turns = [Turn(role=role, prompt_ids=[7], completion_ids=[1, 1],
                      engine_logprobs=[-1.0, -1.0], loss_mask=[1, 1], text="", adapter="a")
                 for _ in range(2)]
        episodes.append(Episode(loop="t", env=env, turns=turns, rewards={role: reward},
                                group_id=f"g{index}"))
    baseline = RAEBaseline(alpha, order)
    samples = rae_samples(episodes, baseline)
    assert len(samples) == 12  # both turns of each episode
    table: dict[tuple[str, str], float] = defaultdict(float)
    advantages = []
    for env, role, reward in sequence:  # the reference baseline, from the doc
        before = table[(env, role)]
        table[(env, role)] = alpha * before + (1 - alpha) * reward
        advantage = reward - (table[(env, role)] if order == "paper" else before)
        advantages += [advantage, advantage]
    got, seqs = gradient_of_samples(samples, lambda s: Seq([Token(-1.0)] * 2),
                                    settings(objective="reinforce"))
    want = reference_gradient(seqs, objective="reinforce", aggregation="token-mean",
                              advantages=advantages)
    assert_gradients(got, want, zero=set(), nonzero=set(want))


@pytest.mark.parametrize("form", ["paper", "code"])
def test_trr_advantages_reach_the_gradient_per_mode_and_role(form):
    """TRR++: one baseline per (mode, role) batch; paper: (r − μ)/(σ + ε); code: μ and the
    unbiased variance over the batch's tokens, (r − μ)/√(var + 1e-8)."""
    batches = {("deduction", "solve"): ([1.0, 0.0, 0.0], [2, 3, 1]),
               ("deduction", "propose"): ([0.2, 0.8], [4, 2]),
               ("induction", "solve"): ([1.0, 1.0, 0.0, 0.5], [1, 2, 2, 3])}
    episodes, advantages, lengths = [], [], []
    for (mode, role), (rewards, sizes) in batches.items():
        for reward, size in zip(rewards, sizes, strict=True):
            turn = Turn(role=role, prompt_ids=[7], completion_ids=[1] * size,
                        engine_logprobs=[-1.0] * size, loss_mask=[1] * size, text="",
                        adapter="a")
            episodes.append(Episode(loop="azr", env=mode, turns=[turn], rewards={role: reward},
                                    group_id=f"{mode}{len(episodes)}"))
        n, total = len(rewards), sum(sizes)
        if form == "paper":
            mean = sum(rewards) / n
            std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
            advantages += [(r - mean) / (std + 1e-6) for r in rewards]
        else:
            mean = sum(r * s for r, s in zip(rewards, sizes, strict=True)) / total
            var = sum(s * (r - mean) ** 2 for r, s in zip(rewards, sizes, strict=True)) / (
                total - 1)
            advantages += [(r - mean) / math.sqrt(var + 1e-8) for r in rewards]
        lengths += sizes
    samples = trr_samples(episodes, form)
    size_of = {id(s): len(s.turn.completion_ids) for s in samples}
    got, seqs = gradient_of_samples(samples, lambda s: Seq([Token(-1.0)] * size_of[id(s)]),
                                    settings(aggregation="token-mean"))
    assert [len(s.tokens) for s in seqs] == lengths  # the samples keep the episodes' order
    want = reference_gradient(seqs, objective="ppo", aggregation="token-mean",
                              advantages=advantages)
    assert_gradients(got, want, zero=set(), nonzero={k for k, v in want.items() if v})
    assert sum(1 for v in want.values() if v) >= 10


def test_adpo_scale_and_eps_high_from_the_pass_rate_reach_the_gradient():
    """s(p̂) = 0.6 + 0.4·clip((p̂ − 0.3)/0.5, 0, 1) multiplies Â; ε_high(p̂) = 0.2 +
    0.1·clip((0.8 − p̂)/0.5, 0, 1) moves the clip: ρ = 1.29 binds at p̂ = 0.9 (ε_high 0.2) and
    not at p̂ = 0.2 (0.3), where the global 0.28 would bind."""
    log = math.log
    seqs = [Seq([Token(0.0, old=-log(1.29)), Token(0.0, old=-log(1.1))], pass_rate=0.2),
            Seq([Token(0.0, old=-log(1.29)), Token(0.0, old=-log(1.1))], pass_rate=0.9),
            Seq([Token(0.0, old=-log(1.1))], pass_rate=0.55, advantage=-1.0)]
    samples = samples_of(seqs)
    apply_adpo(samples)

    def scale(p):
        return 0.6 + 0.4 * min(max((p - 0.3) / 0.5, 0.0), 1.0)

    def eps_high(p):
        return 0.2 + 0.1 * min(max((0.8 - p) / 0.5, 0.0), 1.0)

    got = learner_gradient(samples, seqs, settings())
    want = reference_gradient(seqs, objective="ppo", aggregation="token-mean",
                              scales=[scale(s.pass_rate) for s in seqs],
                              eps_highs=[eps_high(s.pass_rate) for s in seqs])
    assert_gradients(got, want, zero=ids(1, 0), nonzero=ids(0, 0, 1) | ids(1, 1) | ids(2, 0))
    assert got[token_id(0, 0)] == pytest.approx(-1.29 * 0.6 / 5, **TOLERANCE)
