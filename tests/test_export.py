"""``selfplay export``: the exported folders load in plain transformers + peft and give the
log-probs the trained learner gives, as an adapter, merged, and fully fine-tuned."""

from __future__ import annotations

import json

import pytest
import torch

from selfplay.cli.main import main
from selfplay.engines.models import resolve_model_path
from selfplay.evaluation.export import export
from selfplay.types import Sample, Turn
from tests.tiny_run import make_tiny_run

PROMPT, COMPLETION = [5, 17, 42, 9, 3], [11, 23, 7, 60]


def _learner_logprobs(world, adapter: str) -> list[float]:
    turn = Turn("solver", PROMPT, COMPLETION, [0.0] * 4, [1] * 4, "", adapter=adapter)
    return world.learner.score([Sample(turn, 1.0)])[0]


def _hf_logprobs(model) -> list[float]:
    ids = torch.tensor([PROMPT + COMPLETION])
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    logprobs = torch.log_softmax(logits[0, len(PROMPT) - 1 : -1], dim=-1)
    return logprobs.gather(1, torch.tensor(COMPLETION)[:, None])[:, 0].tolist()


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("lora"))


def test_lora_adapter_loads_in_peft_and_matches_the_learner(lora_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run_dir, world = lora_run
    adapter = world.config.adapters()[0]
    (folder,) = export(run_dir, tmp_path / "out")
    assert folder == tmp_path / "out" / adapter
    assert (folder / "adapter_config.json").exists() and (folder / "README.md").exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == [adapter]  # nothing strays above
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("tiny-random"))
    untrained = _hf_logprobs(base)
    model = PeftModel.from_pretrained(base, folder).eval()
    expected = _learner_logprobs(world, adapter)
    assert _hf_logprobs(model) == pytest.approx(expected, abs=1e-5)
    # the run trained (lr 5e-2): the adapter moved the log-probs, so the match means something
    assert max(abs(a - b) for a, b in zip(untrained, expected, strict=True)) > 1e-3
    provenance = json.loads((folder / "selfplay_export.json").read_text())
    assert provenance["step"] == 2 and provenance["merged"] is False


def test_merged_export_is_a_plain_model_with_its_tokenizer(lora_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir, world = lora_run
    adapter = world.config.adapters()[0]
    (folder,) = export(run_dir, tmp_path / "merged", merge=True)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert not any("lora" in name for name, _ in model.named_parameters())
    assert _hf_logprobs(model) == pytest.approx(_learner_logprobs(world, adapter), abs=1e-4)
    original = AutoTokenizer.from_pretrained(resolve_model_path("tiny-random"))
    assert AutoTokenizer.from_pretrained(folder).encode("1 + 2") == original.encode("1 + 2")


def test_full_finetune_export_and_an_older_step(tmp_path):
    from transformers import AutoModelForCausalLM

    run_dir, world = make_tiny_run(tmp_path, train={"finetune": "full"})
    (folder,) = export(run_dir, tmp_path / "out")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert _hf_logprobs(model) == pytest.approx(_learner_logprobs(world, "shared"), abs=1e-5)
    (older,) = export(run_dir, tmp_path / "step1", step=1)
    before = _hf_logprobs(AutoModelForCausalLM.from_pretrained(older).eval())
    assert before != pytest.approx(_hf_logprobs(model), abs=1e-4)  # step 1 is not step 2


def test_export_of_a_missing_step_is_one_line(lora_run, tmp_path, capsys):
    run_dir, _ = lora_run
    assert main(["export", str(run_dir), "--out", str(tmp_path / "x"), "--step", "7"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no checkpoint of step 7" in err and "saved: 1, 2" in err and len(err.splitlines()) == 1
