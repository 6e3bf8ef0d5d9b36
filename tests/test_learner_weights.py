"""The learner's weights: what it saves and restores on resume, what it hands the engine, the
dtype it trains in, the heads it refuses, and the bench's naive baseline — the parts of
`learner.py` that `test_learner_loss.py` does not reach (mutation testing found them untested
among the files it runs per mutant)."""

import io

import pytest
import torch

import selfplay.training.learner
from selfplay.core.errors import UserError
from selfplay.rl.losses import LogitTransform
from selfplay.training.base import LearnerSettings
from selfplay.training.learner import LocalLearner, logit_transform, naive_logprobs
from selfplay.training.state import scheduled_lr
from tests.test_learner_loss import LORA, _full_logprobs, _randomise_lora_b, _samples

ADAPTERS = ["alpha", "beta"]


def _learner(path, seed: int) -> LocalLearner:
    torch.manual_seed(seed)
    learner = LocalLearner(path, LearnerSettings(lora=LORA, lr=1e-2), ADAPTERS)
    _randomise_lora_b(learner)
    return learner


def _both_adapters(advantages_alpha, advantages_beta):
    samples = _samples(advantages_alpha) + _samples(advantages_beta, prompt=range(300, 320))
    for sample in samples[len(advantages_alpha) :]:
        sample.turn.adapter = "beta"
    return samples


def _trainable(learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.model.named_parameters() if p.requires_grad}


def test_a_restored_learner_takes_the_same_next_step(tiny_model_path):
    """Resume restores the trainable weights, the AdamW moments and the version: the restored
    learner's next step lands on exactly the weights the original reaches (a fresh optimizer
    would not: Adam's first step moves every weight by ≈ lr whatever its gradient)."""
    original = _learner(tiny_model_path, seed=0)
    original.step([])  # an empty step counts too: the version is 2, not a coincidental 1
    original.step(_both_adapters([1.0, -1.0, 0.5], [2.0, -0.5, 1.0]))
    buffer = io.BytesIO()  # through bytes, as the runner's checkpoint goes through a file
    torch.save(original.state_dict(), buffer)
    state = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert state["version"] == 2
    names = set(state["trainable"])
    assert names == set(_trainable(original)) and all("lora_" in n for n in names)
    assert any(".alpha." in n for n in names) and any(".beta." in n for n in names)

    restored = _learner(tiny_model_path, seed=1)  # other initial weights
    assert any(
        not torch.equal(restored_p, state["trainable"][n])
        for n, restored_p in _trainable(restored).items()
    )
    restored.load_state_dict(state)
    assert restored.version == 2
    for name, value in _trainable(restored).items():
        assert torch.equal(value, state["trainable"][name]), name

    batch = _both_adapters([-1.0, 2.0, 0.5], [1.0, 1.0, -2.0])
    original.step(batch)
    restored.step(batch)
    assert restored.version == original.version == 3
    want = _trainable(original)
    for name, value in _trainable(restored).items():
        torch.testing.assert_close(value, want[name], rtol=1e-5, atol=1e-7, msg=name)


def test_adapter_weights_are_that_adapters_lora_tensors_copied(tiny_model_path):
    learner = _learner(tiny_model_path, seed=0)
    params = dict(learner.model.named_parameters())
    weights = {a: learner.adapter_weights(a) for a in ADAPTERS}
    assert weights["alpha"].keys() == weights["beta"].keys()
    for adapter, state in weights.items():
        assert state and all("lora_" in k for k in state)
        for key, value in state.items():  # peft drops the adapter name from its keys
            live = key.replace(".weight", f".{adapter}.weight")
            assert torch.equal(value, params[live]), key
    key = next(k for k in weights["alpha"] if "lora_B" in k)
    assert not torch.equal(weights["alpha"][key], weights["beta"][key])
    weights["alpha"][key].add_(1.0)  # a copy: the engine may keep it while training goes on
    assert not torch.equal(weights["alpha"][key], params[key.replace(".weight", ".alpha.weight")])


def test_the_dtype_setting_is_the_dtype_trained_in(tiny_model_path):
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=None, dtype="bfloat16"))
    assert {p.dtype for p in learner.model.parameters()} == {torch.bfloat16}
    (scored,) = learner.score(_samples([1.0, 1.0, 1.0])[:1])
    assert len(scored) == 4 and all(x < 0 for x in scored)


def test_naive_logprobs_equal_the_learners_scores(tiny_model_path):
    """The bench baseline (full [B, T, V] log-softmax) scores what the chunked learner scores."""
    learner = _learner(tiny_model_path, seed=0)
    samples = _samples([1.0, 1.0, 1.0])
    longest = max(len(s.turn.completion_ids) for s in samples)
    ids = torch.zeros((3, 20 + longest), dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, sample in enumerate(samples):
        tokens = sample.turn.prompt_ids + sample.turn.completion_ids
        ids[row, : len(tokens)] = torch.tensor(tokens)
        attention[row, : len(tokens)] = 1
    with torch.no_grad():
        naive = naive_logprobs(learner.model, ids, attention)
    for row, scored in enumerate(learner.score(samples)):
        got = naive[row, 19 : 19 + len(scored)]
        torch.testing.assert_close(got, torch.tensor(scored), rtol=0, atol=1e-4)


def _scaled_logits_model(path, factor: float = 2.0, head_scale: float = 40.0):
    """A Llama whose forward multiplies its logits by ``factor`` after the head: a transform
    nobody declares. ``head_scale`` peaks the head, so the same factor moves log-probs more."""
    from transformers import LlamaForCausalLM

    class ScaledLogits(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * factor
            return out

    model = ScaledLogits.from_pretrained(path)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(head_scale)
    return model


@pytest.mark.parametrize(
    "factor, head_scale, dtype, gap",
    [
        (2.0, 40.0, "float32", 85.0),  # far off
        (1.01, 1.0, "float32", 0.011),  # above float32's tolerance 1e-3, below bf16's 5e-2
        (1.1, 1.0, "bfloat16", 0.11),  # above bf16's 5e-2
    ],
)
def test_a_head_the_learner_cannot_reproduce_is_refused_in_one_line(
    tiny_model_path, factor, head_scale, dtype, gap
):
    model = _scaled_logits_model(tiny_model_path, factor, head_scale).to(getattr(torch, dtype))
    with pytest.raises(UserError) as info:
        logit_transform(model, "scaled")
    message = str(info.value)
    measured = message.split("differ by ")[1].split(" ")[0]
    assert float(measured) == pytest.approx(gap, rel=0.1)
    assert message == (
        "model scaled: its logits are not reproduced from its hidden states (log-probs differ "
        f"by {measured} on a probe; ScaledLogits may apply a logit transform the learner does "
        "not know), so it would train on other log-probs than the engine samples"
    )


def test_a_plain_head_passes_the_probe(tiny_model_path):
    from transformers import LlamaForCausalLM

    plain = LlamaForCausalLM.from_pretrained(tiny_model_path)
    assert logit_transform(plain, "plain") == LogitTransform()


def test_the_learner_names_the_model_it_refuses(tiny_model_path, monkeypatch):
    def load(path, dtype):
        assert dtype == "float32"
        return _scaled_logits_model(path)

    monkeypatch.setattr(selfplay.training.learner, "load_causal_lm", load)
    with pytest.raises(UserError, match=f"^model {tiny_model_path}: its logits are not reproduced"):
        LocalLearner(tiny_model_path, LearnerSettings(lora=None))


@pytest.mark.parametrize("weight_decay", [0.0, 0.25])
def test_weight_decay_is_the_configured_one(tiny_model_path, weight_decay):
    """Zero advantages give a zero gradient, so Adam's update is 0 and only AdamW's decoupled
    decay moves the weights: p ← p·(1 − lr·λ) exactly (torch's default λ would be 0.01)."""
    torch.manual_seed(0)
    settings = LearnerSettings(lora=LORA, lr=0.1, weight_decay=weight_decay)
    learner = LocalLearner(tiny_model_path, settings, ["shared"])
    _randomise_lora_b(learner)
    before = _trainable(learner)
    learner.step(_samples([0.0, 0.0, 0.0]))
    for name, value in _trainable(learner).items():
        torch.testing.assert_close(value, before[name] * (1 - 0.1 * weight_decay), msg=name)


def test_adapters_named_like_modules_train_only_their_lora_tensors(tiny_model_path):
    """Adapter (role) names are free text: ones that also name model modules ("mlp",
    "self_attn") must not make the base weights under those modules trainable."""
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=LORA), ["mlp", "self_attn"])
    trainable = [n for n, p in learner.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any(".mlp." in n and "lora_" not in n for n, _ in learner.model.named_parameters())


def test_learned_absolute_positions_score_like_the_models_own_forward(tmp_path):
    """GPT-2 adds a learned embedding per absolute position (RoPE only sees relative ones, so
    the Llama tests cannot tell a shifted position from the right one): the learner's plain
    and shared-prefix batches must both give the positions of the model's own forward."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(tmp_path)
    learner = LocalLearner(tmp_path, LearnerSettings(lora=None, share_prefix=True))
    prompt = [(7 * i) % 300 for i in range(5)]
    samples = _samples([1.0, 1.0, 1.0], prompt=prompt)
    batches = learner._micro_batches(samples)
    assert len(batches) == 1 and batches[0].tree is not None
    with torch.no_grad():
        shared = learner.scorer.token_logprobs(batches[0])[0].tolist()
        learner.settings.share_prefix = False
        plain = sum(learner.score(samples), [])  # padded rows
    expected = []
    for sample in samples:
        targets = torch.tensor(sample.turn.completion_ids)[:, None]
        expected += _full_logprobs(learner, sample.turn).gather(1, targets)[:, 0].tolist()
    assert plain == pytest.approx(expected, abs=1e-5)
    assert shared == pytest.approx(expected, abs=1e-5)


def test_bf16_allows_its_rounding_but_float32_does_not(tiny_model_path):
    """A head 0.02 nats off: inside bf16's tolerance (5e-2, for rounding that differs between
    the model's forward and the learner's chunks), far outside float32's 1e-3."""
    model = _scaled_logits_model(tiny_model_path, 1.02, 1.0)
    with pytest.raises(UserError):
        logit_transform(model, "scaled")
    assert logit_transform(model.to(torch.bfloat16), "scaled").scale == 1.0


def test_scheduled_lr_decays_from_lr_to_lr_final_and_holds():
    """Linear and cosine decay from ``lr`` at update 0 to ``lr * lr_final`` at the schedule's
    last update, held after it (a run longer than its schedule does not restart it)."""
    linear = LearnerSettings(lr=1.0, lr_schedule="linear", lr_final=0.1, schedule_steps=5)
    assert [scheduled_lr(linear, v) for v in range(7)] == pytest.approx(
        [1.0, 0.775, 0.55, 0.325, 0.1, 0.1, 0.1])
    cosine = LearnerSettings(lr=2.0, lr_schedule="cosine", lr_final=0.0, schedule_steps=3)
    assert [scheduled_lr(cosine, v) for v in range(4)] == pytest.approx([2.0, 1.0, 0.0, 0.0])
    constant = LearnerSettings(lr=0.3, lr_final=0.1, schedule_steps=3)
    assert {scheduled_lr(constant, v) for v in range(5)} == {0.3}


def test_the_scheduled_lr_moves_the_weights_and_survives_a_resume(tiny_model_path):
    """Each update steps at its scheduled lr (Adam's first step moves every weight with a
    gradient by ≈ lr, so the largest change is the lr used), and a learner restored after two
    updates takes its third at the third update's lr, not the first's."""
    settings = LearnerSettings(lora=LORA, lr=1e-2, lr_schedule="linear", lr_final=0.1,
                               schedule_steps=5, adam_betas=(0.0, 0.999))
    torch.manual_seed(0)
    original = LocalLearner(tiny_model_path, settings, ["shared"])
    _randomise_lora_b(original)
    assert original.optimizer.param_groups[0]["betas"] == (0.0, 0.999)
    before = _trainable(original)
    first = original.step(_samples([1.0, -1.0, 0.5]))
    moved = max((p - before[n]).abs().max().item() for n, p in _trainable(original).items())
    # within 5%: a step is lr·g/(|g| + ε), a little under lr where gradients are small
    assert first["train/lr"] == pytest.approx(1e-2) and moved == pytest.approx(1e-2, rel=0.05)
    assert original.step(_samples([0.5, -1.0, 1.0]))["train/lr"] == pytest.approx(7.75e-3)
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    restored = LocalLearner(tiny_model_path, settings, ["shared"])
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=False))
    assert restored.step(_samples([1.0, 0.5, -1.0]))["train/lr"] == pytest.approx(5.5e-3)
    assert restored.optimizer.param_groups[0]["lr"] == pytest.approx(5.5e-3)
