"""The hf engine and the learner agree, adapters stay apart, and training changes the policy."""

import pytest
import torch

from selfplay.engines.hf import HFEngine
from selfplay.engines.lora import LoraSpec
from selfplay.training.base import LearnerSettings
from selfplay.training.learner import LocalLearner
from selfplay.types import Request, Sample, SamplingParams, Turn

LORA = LoraSpec(r=4, alpha=8)


def _requests(adapters, temperature=0.8, max_new_tokens=10, stop=()):
    return [
        Request(
            role=a,
            messages=[{"role": "user", "content": f"count to {i} " * (i + 1)}],
            adapter=a,
            sampling=SamplingParams(
                temperature=temperature, max_new_tokens=max_new_tokens, stop=stop
            ),
        )
        for i, a in enumerate(adapters)
    ]


def _randomize_lora(learner, std=0.05):
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, std)


@pytest.fixture(scope="module")
def pair(tiny_model_path):
    learner = LocalLearner(
        tiny_model_path,
        LearnerSettings(lora=LORA, lr=5e-2, micro_batch_size=3),
        adapters=["alpha", "beta"],
    )
    engine = HFEngine(tiny_model_path, lora=LORA, adapters=["alpha", "beta"], seed=0)
    _randomize_lora(learner)
    for adapter in ("alpha", "beta"):
        engine.load_weights(adapter, learner.adapter_weights(adapter))
    return engine, learner


def test_engine_logprobs_equal_learner_logprobs(pair):
    engine, learner = pair
    requests = _requests(["alpha", "beta", "alpha", "beta", "base"])
    completions = engine.generate(requests)
    samples = [
        Sample(
            turn=Turn.from_completion(r.role, c, adapter=r.adapter, temperature=0.8), advantage=1.0
        )
        for r, c in zip(requests, completions, strict=True)
    ]
    for sample, scored in zip(samples[:4], learner.score(samples[:4]), strict=True):
        assert len(scored) == len(sample.turn.engine_logprobs) > 0
        assert (
            max(abs(x - y) for x, y in zip(scored, sample.turn.engine_logprobs, strict=True)) < 1e-4
        )


def test_mixed_adapter_batch_equals_separate_batches(pair):
    engine, _ = pair
    mixed = engine.generate(_requests(["alpha", "beta"], temperature=0.0))
    alone_a = engine.generate(_requests(["alpha"], temperature=0.0))
    alone_b = engine.generate(_requests(["alpha", "beta"], temperature=0.0)[1:])
    assert mixed[0].token_ids == alone_a[0].token_ids
    assert mixed[1].token_ids == alone_b[0].token_ids
    assert mixed[0].logprobs == pytest.approx(alone_a[0].logprobs, abs=1e-4)


def test_stop_strings_and_max_tokens(pair):
    engine, _ = pair
    (free,) = engine.generate(_requests(["alpha"], temperature=0.0, max_new_tokens=12))
    assert len(free.token_ids) == 12 and free.finish_reason == "length"
    stop = engine.tokenizer.decode(free.token_ids[3:5])
    (stopped,) = engine.generate(
        _requests(["alpha"], temperature=0.0, max_new_tokens=12, stop=(stop,))
    )
    assert stopped.finish_reason == "stop" and stopped.stop_string == stop
    assert stop in stopped.text and len(stopped.token_ids) <= 5


def test_own_adapters_train_apart_and_sync_changes_outputs(pair, tiny_model_path):
    engine, learner = pair
    before_a = learner.adapter_weights("alpha")
    before_b = learner.adapter_weights("beta")
    requests = _requests(["alpha", "alpha", "alpha"], temperature=1.0)
    completions = engine.generate(requests)
    samples = [
        Sample(turn=Turn.from_completion("alpha", c, adapter="alpha"), advantage=adv)
        for c, adv in zip(completions, [1.0, -1.0, 0.5], strict=True)
    ]
    greedy_before = engine.generate(_requests(["alpha"], temperature=0.0))[0].token_ids
    metrics = learner.step(samples)
    assert metrics["train/grad_norm"] > 0
    after_a, after_b = learner.adapter_weights("alpha"), learner.adapter_weights("beta")
    assert any(not torch.equal(before_a[k], after_a[k]) for k in before_a)
    assert all(torch.equal(before_b[k], after_b[k]) for k in before_b)  # b was not trained
    assert any(
        not torch.equal(after_a[k], after_b[k.replace(".alpha.", ".beta.")]) for k in after_a
    )
    for _ in range(3):
        learner.step(samples)
    engine.load_weights("alpha", learner.adapter_weights("alpha"))
    greedy_after = engine.generate(_requests(["alpha"], temperature=0.0))[0].token_ids
    assert greedy_after != greedy_before


def test_full_finetune_syncs_full_weights(tiny_model_path):
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=None, lr=1e-2))
    engine = HFEngine(tiny_model_path, seed=1)
    requests = _requests(["shared"] * 2, temperature=1.0)
    completions = engine.generate(requests)
    samples = [
        Sample(turn=Turn.from_completion("r", c), advantage=a)
        for c, a in zip(completions, [1.0, -1.0], strict=True)
    ]
    learner.step(samples)
    engine.load_weights(None, learner.full_weights())
    rescored = learner.score(samples)
    again = engine.generate(requests[:1])
    assert again[0].prompt_ids == completions[0].prompt_ids
    # The engine now serves the learner's weights: its log-probs match a fresh scoring.
    turn = Turn.from_completion("r", again[0])
    assert learner.score([Sample(turn=turn, advantage=1.0)])[0] == pytest.approx(
        again[0].logprobs, abs=1e-4
    )
    assert rescored[0] != pytest.approx(samples[0].turn.engine_logprobs, abs=1e-6)


# Shared-prefix gradients: tests/test_learner_loss.py (every micro-batch size against the loss
# written out by hand, relative tolerance, gradients of order 1e-1).


def test_merged_single_adapter_batches_leave_base_weights_exact(pair, tiny_model_path):
    from selfplay.engines.models import load_causal_lm

    engine, learner = pair
    engine.generate(_requests(["alpha"], temperature=0.0))  # merges alpha into the base
    engine.load_weights("alpha", learner.adapter_weights("alpha"))  # unmerges first
    fresh = load_causal_lm(tiny_model_path).state_dict()
    for name, param in engine.model.named_parameters():
        if ".base_layer." in name:
            plain = name.replace("base_model.model.", "").replace(".base_layer", "")
            assert torch.equal(param, fresh[plain]), name


def test_learner_scores_top_p_turns_like_the_engine(pair):
    """Top-p < 1: engine and learner both use the renormalised nucleus, so they agree and the
    TIS weight is 1; scoring the untruncated distribution instead would be ~log(1/p) away."""
    engine, learner = pair
    requests = _requests(["alpha", "beta", "alpha"], temperature=0.8)
    for request, top_p in zip(requests, [0.5, 0.3, 0.9], strict=True):
        request.sampling = SamplingParams(temperature=0.8, top_p=top_p, max_new_tokens=10)
    completions = engine.generate(requests)
    samples = [
        Sample(
            turn=Turn.from_completion(
                r.role, c, adapter=r.adapter, temperature=0.8, top_p=r.sampling.top_p
            ),
            advantage=1.0,
        )
        for r, c in zip(requests, completions, strict=True)
    ]
    untruncated = [
        Sample(
            turn=Turn.from_completion(r.role, c, adapter=r.adapter, temperature=0.8), advantage=1
        )
        for r, c in zip(requests, completions, strict=True)
    ]
    for sample, scored, plain in zip(
        samples, learner.score(samples), learner.score(untruncated), strict=True
    ):
        engine_lp = sample.turn.engine_logprobs
        assert max(abs(x - y) for x, y in zip(scored, engine_lp, strict=True)) < 1e-4
        assert min(x - y for x, y in zip(scored, plain, strict=True)) > 0.05
    batch = learner._micro_batches(samples)[0]
    logp, _ = learner.scorer.token_logprobs(batch)
    from selfplay.rl.losses import tis_weights

    weights = tis_weights(logp.detach(), batch.engine_logprobs, 2.0)
    assert torch.allclose(weights, torch.ones_like(weights), atol=1e-3)


# ---------------------------------------------------------------- heads beyond hidden @ W


def _tiny(config_cls, model_cls, tokenizer_vocab: int, **extra):
    config = config_cls(vocab_size=tokenizer_vocab, hidden_size=32, intermediate_size=64,
                        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=256, **extra)
    torch.manual_seed(0)
    model = model_cls(config)
    with torch.no_grad():  # logits large enough that a bias, a scale or a cap matters
        head = model.get_output_embeddings()
        head.weight.mul_(40.0)
        if head.bias is not None:
            head.bias.normal_(0, 2.0)
    return model


def _save(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def biased_model_path(tiny_model_path, tmp_path_factory):
    """A tiny Phi: its lm_head has a bias, so logits ≠ hidden @ lm_head.weight."""
    from transformers import AutoTokenizer, PhiConfig, PhiForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = _tiny(PhiConfig, PhiForCausalLM, len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    assert model.get_output_embeddings().bias.abs().max() > 1
    return _save(model, tokenizer, tmp_path_factory.mktemp("phi-bias"))


def test_lm_head_bias_model_trains_on_the_engines_logprobs(biased_model_path):
    engine = HFEngine(biased_model_path, seed=3)
    learner = LocalLearner(biased_model_path, LearnerSettings(lora=None, lr=1e-3))
    requests = _requests(["shared"] * 3, temperature=0.9)
    requests[1].sampling = SamplingParams(temperature=0.9, top_p=0.7, max_new_tokens=10)
    completions = engine.generate(requests)
    samples = [
        Sample(
            turn=Turn.from_completion("r", c, temperature=0.9, top_p=r.sampling.top_p),
            advantage=a,
        )
        for r, c, a in zip(requests, completions, [1.0, -1.0, 0.5], strict=True)
    ]
    for sample, scored in zip(samples, learner.score(samples), strict=True):
        engine_lp = sample.turn.engine_logprobs
        assert max(abs(x - y) for x, y in zip(scored, engine_lp, strict=True)) < 1e-4
    metrics = learner.step(samples)
    assert metrics["train/mismatch_abs_max"] < 1e-4
    assert metrics["train/tis_weight_mean"] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(
    "name, extra",
    [
        ("Gemma2", {"head_dim": 8, "final_logit_softcapping": 2.0}),
        ("Cohere", {"logit_scale": 0.25}),
        ("Granite", {"logits_scaling": 4.0}),
    ],
)
def test_scaled_and_softcapped_heads_score_like_the_model(tmp_path, name, extra):
    import transformers

    config_cls = getattr(transformers, f"{name}Config")
    model_cls = getattr(transformers, f"{name}ForCausalLM")
    model = _tiny(config_cls, model_cls, 300, **extra)
    model.save_pretrained(tmp_path)
    learner = LocalLearner(tmp_path, LearnerSettings(lora=None))
    ids = [(7 * i) % 300 for i in range(12)]
    turn = Turn(
        role="r",
        prompt_ids=ids[:5],
        completion_ids=ids[5:],
        engine_logprobs=[0.0] * 7,
        loss_mask=[1] * 7,
        text="",
        temperature=0.7,
    )
    (scored,) = learner.score([Sample(turn=turn, advantage=1.0)])
    with torch.no_grad():
        logits = learner.model(input_ids=torch.tensor([ids])).logits[0, 4:-1].float()
    expected = torch.log_softmax(logits / 0.7, -1).gather(1, torch.tensor(ids[5:])[:, None])
    assert scored == pytest.approx(expected.squeeze(1).tolist(), abs=1e-4)
    plain = torch.log_softmax(
        learner.model.model(input_ids=torch.tensor([ids])).last_hidden_state[0, 4:-1]
        @ learner.model.get_output_embeddings().weight.T
        / 0.7,
        -1,
    )
    # the transform matters here: ignoring it would be far off
    assert (
        plain.gather(1, torch.tensor(ids[5:])[:, None]).squeeze(1) - expected.squeeze(1)
    ).abs().max() > 0.1


def test_a_refused_model_leaves_no_run_folder(tmp_path, capsys, monkeypatch):
    import yaml

    import selfplay.running.runner
    from selfplay.cli.main import main
    from selfplay.core.errors import UserError
    from tests.conftest import tiny_config

    def refuse(*args, **kwargs):
        raise UserError("model tiny: its logits are not reproduced from its hidden states")

    monkeypatch.setattr(selfplay.running.runner, "make_learner", refuse)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path)))
    assert main(["run", str(path)]) == 2
    assert "not reproduced" in capsys.readouterr().err
    assert not list((tmp_path / "runs").glob("*"))
