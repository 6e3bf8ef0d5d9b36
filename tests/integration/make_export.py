"""Make the folders ``tests/integration/test_vllm_export.py`` loads in vLLM, in the project's own
venv (the vLLM venv lacks the loops' dependencies): a 2-step LoRA run on the embedded model,
exported as a PEFT adapter and merged, and the greedy continuation transformers gives for a
prompt with the merged weights (token ids and log-probs), for vLLM to reproduce.

    python -m tests.integration.make_export DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

PROMPT = "What is 2 + 3?"
NEW_TOKENS = 8


def greedy(model, tokenizer) -> dict:
    text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                         add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             output_scores=True, return_dict_in_generate=True)
    tokens = out.sequences[0, len(ids):].tolist()
    logprobs = [float(torch.log_softmax(score[0].float(), -1)[t])
                for score, t in zip(out.scores, tokens, strict=True)]
    return {"prompt_ids": ids, "tokens": tokens, "logprobs": logprobs}


def main(out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay.engines.models import resolve_model_path
    from selfplay.evaluation.export import export
    from tests.tiny_run import make_tiny_run

    (out / "tmp").mkdir(parents=True, exist_ok=True)
    run_dir, _ = make_tiny_run(out / "tmp", model="embedded", train={"lr": 1e-3})
    (adapter,) = export(run_dir, out / "adapter")
    (merged,) = export(run_dir, out / "merged", merge=True)
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    expected = greedy(model, AutoTokenizer.from_pretrained(merged))
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("embedded")).eval()
    before = greedy(base, AutoTokenizer.from_pretrained(merged))
    moved = max(abs(a - b) for a, b in zip(before["logprobs"], expected["logprobs"], strict=True))
    if before["tokens"] == expected["tokens"] and moved < 1e-3:  # else the test means nothing
        raise SystemExit("the 2-step run left the model as it was; raise its learning rate")
    expected |= {"adapter": str(adapter), "merged": str(merged),
                 "base": str(resolve_model_path("embedded"))}
    (out / "expected.json").write_text(json.dumps(expected))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
