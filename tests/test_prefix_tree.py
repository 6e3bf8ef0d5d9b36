"""Prefix trees (``selfplay.engines.tree``): rows packed into one row of unique nodes, each
attending to its ancestors at its depth's position, must give every row the hidden states,
log-probs and gradients it gets alone; the learner's tree batches with the KL reference pass
and full fine-tuning too; the engine's batched ``score`` equals scoring each row alone.

Tolerances: the tiny model runs in float32, where packing changes only the order of reductions
(a 4D-masked attention over more keys): differences of ~1e-6 measured; 1e-4 absolute on
log-probs and 1e-3 relative on gradients leave room for other CPUs' kernels, while a wrong
position or a row that sees a sibling's tokens moves log-probs by ~1e-1 (planted: both fail).
"""

import pytest
import torch

from selfplay.engines.hf import HFEngine
from selfplay.engines.lora import LoraSpec
from selfplay.engines.tree import pack_rows, tree_batches, tree_hidden, tree_tokens
from selfplay.training.base import LearnerSettings
from selfplay.training.learner import LocalLearner
from selfplay.types import Request, Sample, Turn

LORA = LoraSpec(r=4, alpha=8)


def test_rows_become_a_depth_first_trie_with_subtree_ends():
    rows = [[1, 2, 3], [1, 2, 4], [1, 5], [1, 2, 3], [9]]
    tree = pack_rows(rows)
    assert tree.ids == [1, 2, 3, 4, 5, 9]
    assert tree.depth == [0, 1, 2, 2, 1, 0]
    assert tree.end == [5, 4, 3, 4, 5, 6]
    assert tree.nodes == [[0, 1, 2], [0, 1, 3], [0, 4], [0, 1, 2], [5]]
    assert tree_tokens(rows) == tree.size == 6
    mask = tree.mask()[0, 0]
    # node 3 ([1, 2, 4]) sees 0, 1 and itself, never its sibling 2 nor the other branch
    assert mask[3].nonzero().flatten().tolist() == [0, 1, 3]
    assert mask[5].nonzero().flatten().tolist() == [5]


def test_a_row_that_is_a_prefix_of_another_shares_all_its_nodes():
    tree = pack_rows([[4, 5, 6], [4, 5]])
    assert tree.size == 3 and tree.nodes == [[0, 1, 2], [0, 1]]


def test_tree_batches_respect_the_node_budget():
    rows = [[1] * 10 + [k] for k in range(6)]  # each row adds one node after the first's 11
    assert [len(g) for g in tree_batches(rows, 13)] == [3, 3]
    assert [len(g) for g in tree_batches(rows, 100)] == [6]
    assert tree_batches([[1] * 50], 10) == [[0]]  # too long for the budget: alone


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


def test_every_node_has_the_hidden_state_of_its_row_computed_alone(tiny_lm):
    base = [(11 * i) % 200 + 3 for i in range(30)]
    rows = [base + [5, 6, 7], base + [5, 8], base[:12] + [9, 9, 9], base + [5, 6, 7], base[:4]]
    tree = pack_rows(rows)
    assert tree.size < sum(len(r) for r in rows) - 60  # the shared beginnings are held once
    decoder = tiny_lm.get_decoder()
    with torch.no_grad():
        packed = tree_hidden(decoder, tree, "cpu")
        for r, row in enumerate(rows):
            alone = decoder(input_ids=torch.tensor([row])).last_hidden_state[0]
            assert (packed[tree.nodes[r]] - alone).abs().max() < 1e-4


def _turn(prompt, completion, shift=0.0):
    return Turn("r", list(prompt), list(completion), [shift] * len(completion),
                [1] * len(completion), "")


def _samples():
    prompt = [(7 * i) % 200 + 3 for i in range(24)]
    other = prompt[:16] + [100, 101, 102]  # a different prompt sharing 16 tokens
    turns = [_turn(prompt, [5, 6, 7]), _turn(prompt, [5, 9]), _turn(other, [8, 8, 8, 8]),
             _turn(prompt, [10])]
    return [Sample(t, a, group_id="g") for t, a in zip(turns, [1.5, -2.0, 0.7, 1.0],
                                                        strict=True)]


def _grads(learner):
    return {n: p.grad.clone() for n, p in learner.model.named_parameters()
            if p.requires_grad and p.grad is not None}


def _loss_and_grads(learner, samples, share):
    learner.settings.share_prefix = share
    batches = learner._micro_batches(samples)
    assert all((b.tree is not None) == share for b in batches)
    learner.optimizer.zero_grad(set_to_none=True)
    metrics = learner._accumulate(batches)
    return metrics, _grads(learner)


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_tree_batches_train_exactly_as_padded_rows_with_the_kl_reference(tiny_model_path, lora):
    """Loss, KL and every gradient of one batch (two prompts sharing 16 tokens, a group of
    three completions) equal between the prefix-tree and padded layouts, with the KL term's
    reference pass on, for LoRA and full fine-tuning."""
    torch.manual_seed(0)
    settings = LearnerSettings(lora=LORA if lora else None, kl_coef=0.5, tis_cap=None,
                               aggregation="token-mean")
    learner = LocalLearner(tiny_model_path, settings, ["shared"] if lora else None)
    with torch.no_grad():  # the policy away from the reference, so the KL term has a gradient
        for name, param in learner.model.named_parameters():
            if param.requires_grad:
                param.add_(torch.randn_like(param) * (0.5 if "lora_B" in name else 0.02))
    samples = _samples()
    tree_metrics, tree_grads = _loss_and_grads(learner, samples, True)
    for sample in samples:  # the reference log-probs are computed again for the padded rows
        sample.turn = _turn(sample.turn.prompt_ids, sample.turn.completion_ids)
    rows_metrics, rows_grads = _loss_and_grads(learner, samples, False)
    assert tree_metrics["train/kl"] > 1e-4  # the KL term is on and not trivially zero
    assert tree_metrics["train/loss"] == pytest.approx(rows_metrics["train/loss"], rel=1e-4)
    assert tree_metrics["train/kl"] == pytest.approx(rows_metrics["train/kl"], rel=1e-4)
    assert tree_grads.keys() == rows_grads.keys() and tree_grads
    for name, grad in rows_grads.items():
        assert (tree_grads[name] - grad).norm() <= 1e-3 * grad.norm() + 1e-8, name


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    torch.manual_seed(0)
    engine = HFEngine(tiny_model_path, lora=LORA, adapters=["a", "b"])
    with torch.no_grad():  # two adapters with different weights
        for name, param in engine.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return engine


def test_engine_scores_rows_in_trees_as_each_alone(engine):
    """Two adapters and the base model, repeated and prefix-sharing rows: each continuation's
    log-probs are those of the model's own forward over that row alone, under its adapter."""
    prompt = [(5 * i) % 200 + 3 for i in range(20)]
    cases = [("a", prompt, [7, 8, 9]), ("a", prompt, [7, 10]), ("b", prompt, [7, 8, 9]),
             ("base", prompt[:10], [4]), ("a", prompt, [7, 8, 9])]
    requests = [Request(role="r", prompt_ids=p, adapter=a) for a, p, _ in cases]
    scored = engine.score(requests, [c for *_, c in cases])
    with torch.no_grad():
        for (adapter, p, c), got in zip(cases, scored, strict=True):
            engine._unmerge()
            if adapter == "base":
                with engine.model.disable_adapter():
                    logits = engine.model(input_ids=torch.tensor([p + c])).logits[0]
            else:
                engine.model.set_adapter(adapter)
                logits = engine.model(input_ids=torch.tensor([p + c])).logits[0]
            logp = torch.log_softmax(logits.float(), -1)
            want = [float(logp[len(p) + j - 1, t]) for j, t in enumerate(c)]
            assert got == pytest.approx(want, abs=1e-4)
    assert scored[0] == pytest.approx(scored[4]) and scored[0] != pytest.approx(scored[2])
