"""Issue 23's measuring tools: the step breakdown with prefix reuse off and on, the roofline's
FLOP counts, the thread policy, and bench names checked in one line."""

import os
import subprocess
import sys

import pytest
import torch

from selfplay.bench.engine import linear_flops_per_token, phase_flops
from selfplay.bench.step import run_prefix_mode
from selfplay.bench.trees import bench_trees
from selfplay.cli.main import main
from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.core.machine import available_cores
from selfplay.engines.models import load_causal_lm
from selfplay.running.threads import apply_thread_policy


def test_an_unknown_bench_is_one_line_and_exit_2(capsys):
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown bench 'nope'" in err[0] and "step" in err[0]


def test_step_breakdown_counts_prefill_and_the_tokens_reuse_saves(tiny_model_path):
    """Both modes run the same steps; with reuse the prefill computes fewer tokens of the same
    prompts, the parts of a rollout add up to it, and I/O and evaluation are measured."""
    extra = ["model.path=tiny-random", "rlvr.eval_size=2"]
    off = run_prefix_mode("rlvr-sanity", 2, False, extra)
    on = run_prefix_mode("rlvr-sanity", 2, True, extra)
    assert off["prompt_tokens"] == on["prompt_tokens"] > 0
    assert off["prefill_tokens"] == off["prompt_tokens"]  # nothing reused without it
    assert on["prefill_tokens"] < 0.5 * on["prompt_tokens"]  # 8 prompts x 8 samples each
    for figures in (off, on):
        parts = figures["prefill_seconds"] + figures["decode_seconds"] + figures["other_s"]
        assert parts == pytest.approx(figures["rollout_s"])
        assert figures["other_s"] >= 0  # only the rollouts' generation is counted in it
        # rollouts only (not the probe check after the sync): each prompt is sampled 8 times
        assert figures["prompt_tokens"] % 8 == 0
        assert figures["prefill_seconds"] > 0 and figures["decode_seconds"] > 0
        assert figures["io_s"] > 0 and figures["eval_s"] > 0
        assert figures["tool_s"] == 0.0  # rlvr calls no tool


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_trees_bench_counts_hands_and_the_learners_seconds_per_sample(tiny_model_path):
    """Both arms of ``--compare trees`` run the same games (the same seed) and train on the
    same number of samples; hands per minute is 60·games / s per step."""
    extra = ["model.path=tiny-random", "spiral.games_per_step=8"]
    result = bench_trees("spiral-kuhn-cpu", 2, extra)
    prompt, trees = result["arms"]["prompt"], result["arms"]["trees"]
    assert prompt["games"] == trees["games"] == 8
    assert prompt["samples"] == trees["samples"] > 0
    for arm in (prompt, trees):
        assert arm["hands_per_min"] == pytest.approx(60 * arm["games"] / arm["step_s"])
    assert result["ratios"]["learner_per_sample"] == pytest.approx(
        prompt["train_s_per_sample"] / trees["train_s_per_sample"])
    with pytest.raises(UserError, match="counts hands"):
        bench_trees("rlvr-sanity", 2, ["model.path=tiny-random"])


def test_flop_counts_follow_the_model_shapes(tiny_model_path):
    model = load_causal_lm(tiny_model_path)
    config = model.config
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (hidden // config.num_attention_heads)
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inter  # q o, k v, mlp
    assert linear_flops_per_token(model) == 2 * layers * per_layer
    vocab = model.get_output_embeddings().weight.shape[0]
    # 3 new tokens after 2 cached ones attend to 3, 4 and 5 keys; logits for one position
    expected = 3 * 2 * layers * per_layer + 4 * hidden * layers * 12 + 2 * hidden * vocab
    assert phase_flops(model, [(2, 3)], 1) == pytest.approx(expected)


def test_thread_policy_uses_the_cores_this_process_may_use():
    saved = torch.get_num_threads()
    try:
        config = ExperimentConfig(name="t", loop="rlvr", roles={})
        assert apply_thread_policy(config)["torch"] == available_cores()
        assert torch.get_num_threads() == available_cores()
        config = ExperimentConfig(name="t", loop="rlvr", roles={}, threads={"torch": 1})
        apply_thread_policy(config)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize(("given", "seen"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_waits_passively_unless_the_environment_says_otherwise(given, seen):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    code = "import os, selfplay.cli.main; print(os.environ['OMP_WAIT_POLICY'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == seen
