"""Every figure ``selfplay plan`` prints, read back from its output and checked against the memory
model of docs/scale.md#selfplay-plan computed here by hand: the learner's terms per rank, the
engine's, each phase of a step (at rest, during generation, during the learner step), the worst
moment and the verdict. A figure the command prints that no test here reads fails
``test_every_printed_figure_is_read``.

Four plans cover every branch of the model: a fully fine-tuned 4B on 8 GPUs beside sleeping
vLLM replicas of a Ray pool with the KL reference; LoRA on one GPU beside awake vLLM; the tiny
model's hf engine on one GPU with gradient checkpointing; and two CPU ranks (the gloo term, the
load in CPU memory, every process sharing the machine's memory).

Printed figures are rounded (GiB to 0.01 in the tables, 0.1 in the summary lines), so each is
compared with the hand-computed value within half its last printed digit.
"""

from __future__ import annotations

import math
import re

import psutil
import pytest

from selfplay.cli.main import main
from selfplay.core.machine import available_cores
from selfplay.loops import load_experiment
from selfplay.running.plan import KNOWN_MODELS

GIB = 2**30
ROW = re.compile(r"│ (?P<name>[^│]+?)\s+│\s+(?P<value>[\d,.]+)(?P<gib> GiB)?\s+│")
PHASES = re.compile(r"per device: at rest (?P<rest>[\d.]+) GiB, during generation "
                    r"(?P<gen>[\d.]+) GiB, during the learner step (?P<learn>[\d.]+) GiB")
WORST = re.compile(r"(?P<worst>[\d.]+) GiB at the worst moment per device of "
                   r"(?P<device>[\d.]+) GiB: (?P<verdict>fits|does NOT fit)")
TITLE = re.compile(r"(?P<name>\S+) on (?P<devices>.+?): per learner rank \((?P<ranks>\d+) "
                   r"ranks?\)")


# ---------------------------------------------------------------------- the model, by hand
def shape(config) -> dict:
    """hidden, intermediate, layers, heads, kv heads, head dim, vocabulary, tied; parameters."""
    path = config.model.path
    if path in KNOWN_MODELS:
        h, i, layers, heads, kv, hd, vocab, tied = KNOWN_MODELS[path]
        norms = 2 * hd  # Qwen3's q and k norms
    else:  # the tiny model: Llama, its config.json
        import json

        from selfplay.engines.models import resolve_model_path

        c = json.loads((resolve_model_path(path) / "config.json").read_text())
        h, i, layers, heads = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"],
                               c["num_attention_heads"])
        kv, hd, vocab, tied = (c["num_key_value_heads"], c["head_dim"], c["vocab_size"],
                               c["tie_word_embeddings"])
        norms = 0
    attention = h * (2 * heads * hd + 2 * kv * hd)
    layer = attention + 3 * h * i + 2 * h  # q, k, v, o; gate, up, down; two norms
    params = layers * (layer + norms) + vocab * h * (1 if tied else 2) + h
    return {"h": h, "i": i, "layers": layers, "heads": heads, "kv": kv, "hd": hd,
            "vocab": vocab, "tied": tied, "layer": layer, "params": params}


def expected(config, gpu: bool, devices: int, capacity: float, prompt: int = 512) -> dict:
    """Every figure of the plan, from docs/scale.md's description of the model."""
    s, train, ranks = shape(config), config.train, config.train.parallel.ranks
    size = {"float32": 4, "bfloat16": 2, "float16": 2}
    trains_weights = ranks > 1 or train.finetune == "full"
    stored = 4 if gpu and train.parallel.mixed_precision and trains_weights else size[
        config.model.dtype]
    compute = 2 if gpu and train.parallel.mixed_precision and ranks > 1 else stored
    if train.finetune == "lora":
        q, kv = s["heads"] * s["hd"], s["kv"] * s["hd"]
        dims = {"q_proj": (s["h"], q), "k_proj": (s["h"], kv), "v_proj": (s["h"], kv),
                "o_proj": (q, s["h"]), "gate_proj": (s["h"], s["i"]),
                "up_proj": (s["h"], s["i"]), "down_proj": (s["i"], s["h"])}
        trainable = sum(train.lora.r * (a + b) for name, (a, b) in dims.items()
                        if name in train.lora.target_modules) * s["layers"] * len(
            config.adapters())
        weights = (s["params"] + trainable) * stored / ranks
    else:
        trainable, weights = s["params"], s["params"] * stored / ranks
    learner = {"weights": weights, "gradients": trainable * stored / ranks,
               "optimizer": 2 * trainable * stored / ranks}
    if train.finetune == "full" and train.kl_coef > 0:
        learner["KL reference (frozen copy)"] = s["params"] * stored / ranks
    if ranks > 1:
        root = s["vocab"] * s["h"] * (1 if s["tied"] else 2) + s["h"]
        learner["gathered units"] = (2 * s["layer"] + root) * compute
    tokens = train.micro_batch_size * (prompt + config.sampling.max_new_tokens)
    one_layer = tokens * (8 * s["h"] + 4 * s["i"]) * compute
    learner["activations"] = (s["layers"] * tokens * s["h"] * compute + one_layer
                              if train.gradient_checkpointing else s["layers"] * one_layer)
    scored = min(train.logprob_chunk_size, train.micro_batch_size * config.sampling.max_new_tokens)
    learner["log-prob chunk"] = 3 * scored * s["vocab"] * 4
    if not gpu and ranks > 1:
        learner["gloo buffers (calibrated)"] = s["params"] * stored
    learner["overhead"] = 1.5 * GIB if gpu else 0.25 * GIB
    steady = sum(learner.values())
    load = s["params"] * stored
    learner["total"] = steady if gpu else max(steady, load + learner["overhead"])
    learner["loading (CPU, rank 0)"] = load
    learner["at rest"] = sum(learner.get(k, 0.0) for k in (
        "weights", "gradients", "optimizer", "overhead", "KL reference (frozen copy)"))

    engine_config, kv_token = config.engine, 2 * s["layers"] * s["kv"] * s["hd"]
    if engine_config.backend == "vllm" and gpu:
        reserved = engine_config.gpu_memory_utilization * capacity
        engine = {"weights": s["params"] * 2.0,
                  "KV cache": max(reserved - s["params"] * 2.0 - 1.5 * GIB, 0.0),
                  "total": reserved}
        engine["KV cache tokens"] = engine["KV cache"] / (kv_token * 2)
        engine["at rest"] = reserved
        engine["during learning"] = 1.0 * GIB if engine_config.sleep else reserved
    else:
        weights_bytes = s["params"] * size[config.model.dtype]
        cache = (engine_config.max_batch_size * (prompt + config.sampling.max_new_tokens)
                 * kv_token * size[config.model.dtype])
        engine = {"weights": weights_bytes, "KV cache": cache, "total": weights_bytes + cache}
        engine["at rest"] = engine["during learning"] = engine["total"]
    if config.cluster.backend == "ray":
        engine["per device"] = float(math.ceil(config.cluster.replicas / devices) if gpu
                                     else config.cluster.replicas)
    share = engine.get("per device", 1.0)
    if gpu:
        phases = {"rest": learner["at rest"] + share * engine["at rest"],
                  "gen": learner["at rest"] + share * engine["total"],
                  "learn": learner["total"] + share * engine["during learning"]}
    else:
        phases = {"rest": ranks * learner["at rest"] + share * engine["at rest"],
                  "gen": ranks * learner["at rest"] + share * engine["total"],
                  "learn": ranks * learner["total"] + share * engine["total"]}
    return {"learner": learner, "engine": engine, "phases": phases,
            "worst": max(phases.values())}


# ---------------------------------------------------------------------- reading the output
def printed(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main(["plan", *argv])
    out = capsys.readouterr().out
    tables = out.split("┏")
    title = " ".join(tables[0].split())
    learner_part, engine_part = tables[1], tables[2]
    rows = {}
    for part, unit in ((learner_part, "learner"), (engine_part, "engine")):
        rows[unit] = {m["name"].strip(): (float(m["value"].replace(",", "")), bool(m["gib"]))
                      for m in ROW.finditer(part)}
    tail = " ".join(out.split("└")[-1].split())
    return code, {"title": TITLE.search(title), "rows": rows, "phases": PHASES.search(tail),
                  "worst": WORST.search(tail), "advice": re.findall(r"to fit: (.+)", out),
                  "out": out}


def check(seen: dict, want: dict, devices: str, ranks: int, capacity: float) -> None:
    title = seen["title"]
    assert title is not None, seen["out"]
    assert (title["devices"], int(title["ranks"])) == (devices, ranks)
    learner, engine = seen["rows"]["learner"], seen["rows"]["engine"]
    assert list(learner) == list(want["learner"])  # every row, in the printed order
    for name, (value, _) in learner.items():  # the learner table is in GiB, 2 decimals
        assert value == pytest.approx(want["learner"][name] / GIB, abs=0.005 + 1e-9), name
    assert list(engine) == list(want["engine"])
    for name, (value, gib) in engine.items():
        if name in ("KV cache tokens", "per device"):  # counts, printed whole
            assert not gib and value == round(want["engine"][name]), name
        else:
            assert gib and value == pytest.approx(want["engine"][name] / GIB, abs=0.005), name
    phases = seen["phases"]
    for key in ("rest", "gen", "learn"):
        assert float(phases[key]) == pytest.approx(want["phases"][key] / GIB, abs=0.05), key
    worst = seen["worst"]
    assert float(worst["worst"]) == pytest.approx(want["worst"] / GIB, abs=0.05)
    assert float(worst["device"]) == pytest.approx(capacity / GIB, abs=0.05)
    assert worst["verdict"] == ("fits" if want["worst"] <= capacity else "does NOT fit")


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rows and lines unwrapped


def test_full_fine_tuning_on_8_gpus_beside_sleeping_vllm_with_the_kl_reference(capsys):
    overrides = ["train.kl_coef=0.01"]
    code, seen = printed(capsys, ["spiral-kuhn", *overrides, "--gpus", "8", "--gpu-memory", "80"])
    want = expected(load_experiment("spiral-kuhn", overrides), True, 8, 80 * GIB)
    check(seen, want, "8 x 80 GiB GPU", 8, 80 * GIB)
    # the phases: generation is the worst moment (vLLM awake beside the learner at rest)
    assert want["phases"]["gen"] > want["phases"]["learn"]
    assert code == 0 and seen["advice"] == []


def test_lora_on_one_gpu_beside_awake_vllm_does_not_fit_and_says_what_to_change(capsys):
    overrides = ["engine.sleep=false", "engine.gpu_memory_utilization=0.9"]
    code, seen = printed(capsys, ["spice-1gpu", *overrides, "--gpus", "1", "--gpu-memory", "40"])
    want = expected(load_experiment("spice-1gpu", overrides), True, 1, 40 * GIB)
    check(seen, want, "1 x 40 GiB GPU", 1, 40 * GIB)
    assert want["phases"]["learn"] > want["phases"]["gen"]  # awake vLLM beside the step
    assert code == 1 and seen["advice"] == [
        "more ranks: train.parallel.ranks: 2", "train.micro_batch_size: 2",
        "engine.sleep: true (vLLM frees the GPU while the learner steps)",
        "train.parallel.offload: true (optimizer and weights in CPU memory)"]


def test_the_hf_engine_on_one_gpu_with_gradient_checkpointing(capsys, tmp_path):
    import yaml

    from tests.conftest import tiny_config

    data = tiny_config(tmp_path, train={"gradient_checkpointing": True, "micro_batch_size": 4},
                       engine={"max_batch_size": 16})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    code, seen = printed(capsys, [str(path), "--gpus", "1", "--gpu-memory", "24",
                                  "--prompt-tokens", "100"])
    from selfplay.loops import validate

    want = expected(validate(data, "t"), True, 1, 24 * GIB, prompt=100)
    check(seen, want, "1 x 24 GiB GPU", 1, 24 * GIB)
    assert code == 0


def test_two_cpu_ranks_share_the_machines_memory(capsys, tmp_path):
    import torch
    import yaml

    from tests.conftest import tiny_config

    if torch.cuda.is_available():
        pytest.skip("a plan without --gpus plans for this machine's GPUs")
    # a 1.7B model (its shape is known without a download): the CPU terms are whole GiB, so a
    # planted change of one shows at the tables' 0.01 GiB
    data = tiny_config(tmp_path, model={"path": "Qwen/Qwen3-1.7B-Base"},
                       train={"parallel": {"ranks": 2}, "finetune": "full"})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    code, seen = printed(capsys, [str(path)])
    from selfplay.loops import validate

    capacity = float(psutil.virtual_memory().total)
    want = expected(validate(data, "t"), False, available_cores(), capacity)
    check(seen, want, f"CPU, {capacity / GIB:.0f} GiB", 2, capacity)
    assert want["learner"]["gloo buffers (calibrated)"] > 6 * GIB
    assert code == (0 if want["worst"] <= capacity else 1)


def test_every_printed_figure_is_read(capsys):
    """Each number in the output is one the tests above compare: the table rows, the phases
    line, the worst-moment line, the title's devices and ranks. A new figure fails here until a
    test reads it."""
    _, seen = printed(capsys, ["spiral-kuhn", "train.kl_coef=0.01", "--gpus", "8"])
    text = seen["out"]
    for rows in seen["rows"].values():  # a row's name is not a figure ("rank 0")
        for name in rows:
            text = text.replace(f"│ {name} ", "│ ")
    numbers = re.findall(r"\d[\d,.]*", text)
    read = 3  # title: GPUs, GiB per GPU, ranks
    read += sum(len(rows) for rows in seen["rows"].values())
    read += 3 + 2  # phases; worst moment and device size
    assert len(numbers) == read, numbers
