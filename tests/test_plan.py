"""``selfplay plan``: the memory model's terms, the GPU experiments fit the GPUs they name, and
``selfplay run`` refuses what cannot run here in one line, before a run folder exists."""

from __future__ import annotations

import pytest
import torch
import yaml

from selfplay.cli.main import main
from selfplay.loops import load_experiment, validate
from selfplay.running.plan import GIB, KNOWN_MODELS, plan, shape_of
from tests.conftest import tiny_config

EIGHT_GPU = ["spiral-kuhn", "spiral-tictactoe", "spiral-multigame", "spice", "agent0",
             "rlvr-curriculum"]
EIGHT_GPU += ["rzero", "sqlm"]
ONE_GPU = ["spiral-kuhn-1gpu", "spice-1gpu", "agent0-1gpu"]


@pytest.mark.parametrize("name", sorted(KNOWN_MODELS))
def test_known_model_shapes_count_what_transformers_builds(name):
    """The table's parameter count is the one transformers' Qwen3 builds from the same config
    (on the meta device: no weights)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    shape = shape_of(name)
    config = Qwen3Config(hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
                         vocab_size=shape.vocab, tie_word_embeddings=shape.tied)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert shape.params == sum(p.numel() for p in model.parameters())


def test_qwen3_4b_full_finetune_terms_on_8_gpus():
    """fp32 master weights, gradients and AdamW's two moments, each an eighth per rank."""
    config = load_experiment("spiral-kuhn")
    result = plan(config, gpus=8)
    params = shape_of("Qwen/Qwen3-4B-Base").params
    assert result.learner["weights"] == pytest.approx(params * 4 / 8)
    assert result.learner["gradients"] == pytest.approx(params * 4 / 8)
    assert result.learner["optimizer"] == pytest.approx(2 * params * 4 / 8)
    assert 14 * GIB < result.learner_peak < 20 * GIB  # prime-rl measured 17.1 GiB on 8 x H100
    assert result.engine["during learning"] == pytest.approx(1.0 * GIB)  # vLLM asleep
    assert result.fits


def test_checkpointing_keeps_one_layer_of_activations(tmp_path):
    data = tiny_config(tmp_path)
    with_ckpt = plan(validate({**data, "train": {**data["train"], "micro_batch_size": 8,
                                                 "gradient_checkpointing": True}}, "t"))
    without = plan(validate({**data, "train": {**data["train"], "micro_batch_size": 8}}, "t"))
    assert with_ckpt.learner["activations"] < without.learner["activations"] / 1.5


@pytest.mark.parametrize("name", EIGHT_GPU)
def test_gpu_experiments_fit_the_8_gpus_they_name(name):
    config = load_experiment(name)
    assert config.train.parallel.ranks == 8
    result = plan(config, gpus=8, gpu_memory_gib=80)
    assert result.fits, f"{name}: {result.per_device / GIB:.1f} GiB per GPU"


@pytest.mark.parametrize("name", ONE_GPU)
def test_one_gpu_variants_are_lora_and_fit_one_gpu(name):
    config = load_experiment(name)
    assert config.train.finetune == "lora" and config.train.parallel.ranks == 1
    result = plan(config, gpus=1, gpu_memory_gib=80)
    assert result.fits, f"{name}: {result.per_device / GIB:.1f} GiB"


def test_a_full_4b_beside_awake_vllm_on_one_gpu_does_not_fit_and_says_what_to_change():
    config = load_experiment("spiral-kuhn", ["train.parallel.ranks=1", "cluster.replicas=1",
                                             "engine.sleep=false"])
    result = plan(config, gpus=1, gpu_memory_gib=80)
    assert not result.fits and result.per_device > 80 * GIB
    assert any("train.finetune: lora" in line for line in result.advice)
    assert any("engine.sleep: true" in line for line in result.advice)


def _experiment(tmp_path, **sections) -> str:
    data = tiny_config(tmp_path, **sections)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"train": {"parallel": {"ranks": 64}}}, "64 learner ranks, but this machine has"),
        ({"train": {"parallel": {"ranks": 2, "strategy": "zero3"}}}, "train.parallel.strategy"),
        ({"train": {"micro_batch_size": 4096}}, "`selfplay plan tiny` says what to change"),
        ({"engine": {"backend": "vllm", "sleep": True}}, "engine.sleep: vLLM's sleep mode"),
        ({"sync": {"transport": "nccl"}}, "sync.transport: nccl broadcasts between GPUs"),
    ],
)
def test_run_refuses_what_cannot_run_here_in_one_line(tmp_path, capsys, sections, message):
    if torch.cuda.is_available() and ("engine" in sections or "sync" in sections):
        pytest.skip("a GPU can run these")
    overrides = ["sampling.max_new_tokens=8192"] if "micro_batch_size" in str(sections) else []
    code = main(["run", _experiment(tmp_path, **sections), *overrides])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()  # no run folder


def test_plan_command_exit_status_says_whether_it_fits(tmp_path, capsys):
    assert main(["plan", _experiment(tmp_path)]) == 0
    assert "fits" in capsys.readouterr().out
    assert main(["plan", _experiment(tmp_path), "train.micro_batch_size=4096",
                 "sampling.max_new_tokens=8192"]) == 1
    assert "does NOT fit" in capsys.readouterr().out
