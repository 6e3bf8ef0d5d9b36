"""Agent0: role prefills, the loop's two phases, ADPO end to end, resume, bad input."""

from __future__ import annotations

from selfplay.config import validate
from selfplay.loops.base import Loop
from tests.conftest import tiny_config


def test_prefill_is_appended_after_the_generation_prompt(tmp_path, tiny_model_path):
    from selfplay.models import load_tokenizer

    role = tmp_path / "asker.yaml"
    role.write_text("user: 'Ask about {{ topic }}.'\nprefill: 'Question: What is {{ topic }}'\n")
    config = validate(tiny_config(tmp_path, roles={"solver": {"prompt": str(role)}}), "test")
    loop = Loop(config)
    tokenizer = load_tokenizer(tiny_model_path)
    request = loop.request("solver", tokenizer=tokenizer, topic="pi")
    assert request.messages is None
    template = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Ask about pi."}], add_generation_prompt=True, tokenize=False
    )
    assert tokenizer.decode(request.prompt_ids) == template + "Question: What is pi"
    assert loop.reply_text("solver", " 3?", topic="pi") == "Question: What is pi 3?"
    plain = tmp_path / "plain.yaml"
    plain.write_text("user: 'Ask.'\n")
    config = validate(tiny_config(tmp_path, roles={"solver": {"prompt": str(plain)}}), "test")
    assert Loop(config).request("solver").messages[-1]["content"] == "Ask."
