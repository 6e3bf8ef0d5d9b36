"""Scored moves (``spiral.action: scored``): π(a | s) is the softmax over the legal moves of the
model's (normalised) log-probability of each move's reply; a move is drawn from it, the learner
trains log π(chosen | s) over the same candidates, and its gradient reaches every candidate.

Values are worked by hand; gradients are compared with autograd through an independent
reference (the model run on each candidate row alone). Tolerances: float32 on the tiny model,
where the learner's prefix tree changes only the order of reductions (~1e-6 measured); 1e-3
relative on gradients, while a planted bug (the chosen candidate's raw score trained instead of
its normalised log π, or the divisor ignored) moves them by > 10%.
"""

import asyncio
import math
import random

import pytest
import torch

from selfplay.core.errors import UserError
from selfplay.engines.hf import HFEngine
from selfplay.engines.lora import LoraSpec
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import validate
from selfplay.loops.spiral import SpiralLoop
from selfplay.loops.spiral.moves import divisors, draw, log_policy, outside_mass, reply_text
from selfplay.loops.spiral.strategy import measure
from selfplay.training.base import LearnerSettings
from selfplay.training.batches import collate, decision_logprobs
from selfplay.training.learner import LocalLearner
from selfplay.types import Choice, Sample, Turn
from tests.conftest import tiny_config

LORA = LoraSpec(r=4, alpha=8)


def test_policy_over_candidates_by_hand():
    # S = (−2, −3): π = softmax(−2, −3) = (0.7311, 0.2689)
    assert [math.exp(x) for x in log_policy([[-1.0, -1.0], [-3.0]], [1.0, 1.0])] == \
        pytest.approx([1 / (1 + math.e ** -1), 1 / (1 + math.e)], abs=1e-12)
    # token normalisation: S/N = (−1, −3)
    assert [math.exp(x) for x in log_policy([[-1.0, -1.0], [-3.0]], [2.0, 1.0])] == \
        pytest.approx([1 / (1 + math.e ** -2), 1 / (1 + math.e ** 2)], abs=1e-12)
    assert outside_mass([[-1.0, -1.0], [-3.0]]) == pytest.approx(1 - math.e ** -2 - math.e ** -3)
    assert divisors(["[check]", "[raise to 3]"], [[1, 2], [1, 2, 3, 4]], "word") == [1.0, 3.0]
    assert divisors(["a", "b"], [[1, 2], [1, 2, 3, 4]], "token") == [2.0, 4.0]
    assert divisors(["a", "b"], [[1, 2], [1]], "sum") == [1.0, 1.0]
    assert draw([-0.1, -2.5], True, random.Random(0)) == 0
    assert draw([-2.5, -2.5], True, random.Random(0)) == 0  # a tie: the first move


def test_a_started_reply_is_not_repeated_in_the_candidates():
    assert reply_text("[bet]") == "\\boxed{[bet]}"
    assert reply_text("[bet]", "\\boxed{[") == "bet]}"
    assert reply_text("[bet]", "Let me think.") == "\\boxed{[bet]}"  # not its start: in full


def test_decisions_gradient_is_that_of_the_normalised_softmax():
    """d(−A·log π(a))/dS_k = −A·(1[k = a] − π_k)/d_k for every candidate k of a decision, from
    the learner's segment reduction (scatter sums, a per-decision logsumexp)."""
    turns = [
        Turn("p", [1, 2], [5, 6], [0.0, 0.0], [1, 1], "", choice=Choice(
            [[5, 6], [7], [8, 9, 9]], ["a", "b", "c"], 2, [2.0, 1.0, 3.0], [-1.0, -1.0, -1.0])),
        Turn("p", [3], [4], [0.0], [1], "", choice=Choice(
            [[4], [6]], ["x", "y"], 0, [1.0, 1.0], [-0.7, -0.7])),
    ]
    batch = collate("shared", [(Sample(t, 1.0), 1.0) for t in turns], 0.28)
    token_logp = torch.tensor([-0.3, -1.1, -0.9, -2.0, -0.4, -0.5, -1.7, -0.2],
                              requires_grad=True)
    advantages = torch.tensor([1.5, -0.8])
    log_pi, entropy = decision_logprobs(token_logp, batch)
    (-(advantages * log_pi).sum()).backward()
    want = torch.zeros(8)
    segments = [([0, 1], 2.0), ([2], 1.0), ([3, 4, 5], 3.0), ([6], 1.0), ([7], 1.0)]
    for decision, (members, chosen) in enumerate([([0, 1, 2], 2), ([3, 4], 3)]):
        logits = torch.tensor([float(token_logp.detach()[segments[c][0]].sum()) / segments[c][1]
                               for c in members])
        pi = torch.softmax(logits, 0)
        chosen_pi = float(pi[members.index(chosen)].log())
        assert float(log_pi[decision].detach()) == pytest.approx(chosen_pi)
        assert float(entropy[decision].detach()) == pytest.approx(float(-(pi * pi.log()).sum()))
        for j, c in enumerate(members):
            g = -advantages[decision] * (float(c == chosen) - pi[j]) / segments[c][1]
            want[segments[c][0]] = g
    assert torch.allclose(token_logp.grad, want, atol=1e-6)
    assert (token_logp.grad != 0).all()  # every candidate's every token gets gradient


@pytest.fixture(scope="module")
def learner(tiny_model_path):
    torch.manual_seed(0)
    learner = LocalLearner(tiny_model_path, LearnerSettings(
        lora=LORA, tis_cap=None, aggregation="seq-mean-token-sum-norm"), ["shared"])
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return learner


def _scored_turn(prompt, candidates, chosen, divs):
    return Turn("player_0", prompt, candidates[chosen], [0.0] * len(candidates[chosen]),
                [1] * len(candidates[chosen]), "", choice=Choice(
                    candidates, [str(i) for i in range(len(candidates))], chosen, divs,
                    [0.0] * len(candidates)))


@pytest.mark.parametrize("share_prefix", [True, False])
def test_learner_trains_log_pi_of_the_chosen_move_over_its_candidates(learner, share_prefix):
    """Two decisions at two states (sharing the start of their prompts): the learner's gradient
    equals autograd through the reference −(1/n)·Σ A·log softmax(S/d)[chosen], each S_k from
    the model run on prompt + candidate k alone."""
    prompt = [(3 * i) % 200 + 5 for i in range(18)]
    other = prompt[:12] + [150, 151]
    samples = [
        Sample(_scored_turn(prompt, [[20, 21], [22], [20, 23, 24]], 1, [2.0, 1.0, 3.0]), 1.2),
        Sample(_scored_turn(other, [[30], [31, 32]], 0, [1.0, 2.0]), -0.9),
    ]
    learner.settings.share_prefix = share_prefix
    learner.optimizer.zero_grad(set_to_none=True)
    learner._accumulate(learner._micro_batches(samples))
    got = {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
    learner.optimizer.zero_grad(set_to_none=True)
    loss = 0.0
    for sample in samples:
        choice = sample.turn.choice
        scores = []
        for candidate, d in zip(choice.candidates, choice.divisors, strict=True):
            ids = torch.tensor([sample.turn.prompt_ids + candidate])
            logp = torch.log_softmax(learner.model(input_ids=ids).logits[0].float(), -1)
            start = len(sample.turn.prompt_ids)
            scores.append(sum(logp[start + j - 1, t] for j, t in enumerate(candidate)) / d)
        log_pi = torch.log_softmax(torch.stack(scores), 0)[choice.chosen]
        loss = loss - sample.advantage * log_pi / len(samples)  # Dr. GRPO: 1/(n·1) per move
    loss.backward()
    want = {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
    assert got.keys() == want.keys() and want
    assert max(float(g.abs().max()) for g in want.values()) > 1e-3
    for name, grad in want.items():
        assert (got[name] - grad).norm() <= 1e-3 * grad.norm() + 1e-8, name


def spiral_config(tmp_path, games, **spiral):
    config = tiny_config(tmp_path, loop="spiral", roles={"player": {"prompt": "player"}},
                         advantage={"estimator": "rae"},
                         spiral={"games": games, "games_per_step": 4, "eval_games": 2,
                                 "eval_opponents": ["random"], "action": "scored", **spiral})
    del config["rlvr"]
    config["roles"] = {"player": {"prompt": "player"}}
    return validate(config, "test")


@pytest.fixture(scope="module")
def tiny_policy(tiny_model_path):
    torch.manual_seed(0)
    return BatchingPolicy(HFEngine(tiny_model_path))


@pytest.mark.parametrize("game", [
    {"id": "kuhn_poker", "kwargs": {"rounds": 1}},
    {"id": "textarena:TicTacToe-v0"},  # legal moves from the oracle
    {"id": "openspiel:leduc_poker"},
], ids=["native", "textarena", "openspiel"])
def test_scored_games_never_see_an_invalid_move_and_record_each_choice(
        tmp_path, tiny_policy, game):
    loop = SpiralLoop(spiral_config(tmp_path, [game]))
    collected = asyncio.run(loop.collect(tiny_policy, 0))
    assert collected.metrics["game/invalid_rate"] == 0.0
    assert 0.0 <= collected.metrics["game/outside_mass"] <= 1.0
    turns = [t for e in collected.episodes for t in e.turns]
    assert turns and all(t.choice is not None for t in turns)
    for turn in turns:
        choice = turn.choice
        assert sum(math.exp(x) for x in choice.log_pi) == pytest.approx(1.0)
        assert turn.completion_ids == choice.candidates[choice.chosen]
        assert turn.text.endswith(f"{choice.names[choice.chosen]}}}")
    samples = loop.samples(collected.episodes)
    assert len(samples) == len(turns)  # one decision each, with its RAE advantage


def test_greedy_evaluation_plays_the_most_likely_move(tmp_path, tiny_policy):
    loop = SpiralLoop(spiral_config(tmp_path, [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}]))
    first = asyncio.run(loop.evaluate(tiny_policy, 0))
    again = asyncio.run(loop.evaluate(tiny_policy, 0))
    assert first == again  # greedy: no draw involved
    assert first["eval/kuhn_poker/random/invalid"] == 0.0


def test_a_scored_run_is_measured_exactly(tmp_path, tiny_policy):
    """Its strategy at every Kuhn state is π itself: it sums to 1 with no invalid mass,
    whatever the number of samples asked."""
    loop = SpiralLoop(spiral_config(tmp_path, [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}]))
    _, rows = asyncio.run(measure(loop, tiny_policy, "kuhn_poker", 16, kwargs={"rounds": 1}))
    assert len(rows) == 12
    for row in rows:
        assert sum(row.counts) == pytest.approx(1.0) and row.invalid == 0.0
        assert 0.0 <= row.outside <= 1.0


def test_scored_moves_on_a_game_without_legal_moves_are_refused_in_one_line(tmp_path):
    with pytest.raises(UserError, match="action: scored needs each game's legal moves"):
        SpiralLoop(spiral_config(tmp_path, [{"id": "simple_negotiation"}]))
