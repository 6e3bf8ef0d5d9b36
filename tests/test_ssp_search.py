"""The search tool and SSP's retrieval check on a small corpus built here (three invented facts,
so nothing the embedding model knows answers them): the observation is masked from the loss
with log-prob 0 and exact ids, repeats and the budget are handled, an unbuilt corpus is one
line, and held-out questions go through the RAG check with their retrieved documents.

The model's text is scripted (a fake engine, the real tokenizer of the tiny model); the search
is the real FAISS index over real MiniLM embeddings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re

import pytest

from corpora import build_corpus, corpus_settings, load_corpus
from selfplay.core.errors import UserError
from selfplay.engines.models import load_tokenizer
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.rag import check_questions, mixed_documents
from selfplay.engines.search_tool import (
    INFO_OPEN,
    SearchSettings,
    open_corpus,
    search_rollout,
)
from selfplay.types import Completion, Request, SamplingParams

FACTS = {
    "river.txt": "The Zorblax river flows through Quenton valley. The Zorblax river is 417 "
                 "kilometres long and freezes every winter.",
    "tower.txt": "The Hivelight tower was built by the architect Mirela Osk in the town of "
                 "Brannoch. It has 29 floors.",
    "bird.txt": "The glimmerwing is a small bird that nests only on the cliffs of Tassary "
                "island and sings at dawn.",
}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("facts")
    for name, text in FACTS.items():
        (folder / name).write_text(text)
    cache = tmp_path_factory.mktemp("corpora")
    settings = corpus_settings(tokenizer="embedding", chunk_tokens=64, overlap_tokens=8,
                               batch_size=2)
    build_corpus("facts", [str(folder)], settings, cache, False)
    return load_corpus("facts", cache)


class ScriptedEngine:
    """Answers each request with ``script(prompt_text)``; a reply ending in one of the
    request's stop strings stops there (as the hf engine reports it)."""

    def __init__(self, tokenizer, script) -> None:
        self.tokenizer, self.script = tokenizer, script

    def generate(self, requests: list[Request]) -> list[Completion]:
        return [self._complete(r) for r in requests]

    def _complete(self, request: Request) -> Completion:
        if request.prompt_ids is None:
            text = self.tokenizer.apply_chat_template(request.messages, tokenize=False,
                                                      add_generation_prompt=True)
            prompt_ids = self.tokenizer(text + request.prefill, add_special_tokens=False).input_ids
        else:
            prompt_ids = list(request.prompt_ids)
        reply = self.script(self.tokenizer.decode(prompt_ids))
        stop = next((s for s in request.sampling.stop if reply.endswith(s)), None)
        ids = self.tokenizer(reply, add_special_tokens=False).input_ids
        if stop is None:
            ids.append(self.tokenizer.eos_token_id)
        return Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True),
                          prompt_ids=prompt_ids, token_ids=ids, logprobs=[-0.5] * len(ids),
                          finish_reason="stop", stop_string=stop, prefill=request.prefill)


def run(engine, coroutine):
    policy = BatchingPolicy(engine)

    async def go():
        (result,) = await policy.gather([coroutine(policy)])
        return result

    return asyncio.run(go())


def request(question: str = "How long is the Zorblax river?") -> Request:
    return Request(role="solver", messages=[{"role": "user", "content": question}],
                   sampling=SamplingParams(max_new_tokens=200))


def solver_script(prompt: str) -> str:
    """Search twice for the river, then answer with the number the search showed."""
    searches = prompt.count(INFO_OPEN)
    if searches < 2:
        return f"Let me look.\n<search> Zorblax river length {searches} </search>"
    shown = re.findall(r"(\d+) kilometres", prompt)
    return f"<answer> {shown[-1] if shown else 'unknown'} </answer>"


def test_retrieved_information_is_masked_from_the_loss(tokenizer, corpus):
    settings = SearchSettings(top_k=1)
    rollout = run(ScriptedEngine(tokenizer, solver_script),
                  lambda policy: search_rollout(policy, request(), corpus, settings))
    turn = rollout.turn
    assert rollout.tool_calls == 2 and rollout.finish_reason == "stop"
    assert [c.query for c in rollout.calls] == ["Zorblax river length 0",
                                               "Zorblax river length 1"]
    # the answer came from the tool: the river's chunk was retrieved and shown
    assert turn.text.rstrip().endswith("<answer> 417 </answer>")
    assert all("417 kilometres" in c.documents[0] for c in rollout.calls)
    # the observation's tokens: mask 0, log-prob 0.0; the model's: mask 1, its log-prob
    masked = [k for k, m in enumerate(turn.loss_mask) if m == 0]
    assert masked and all(turn.engine_logprobs[k] == 0.0 for k in masked)
    assert all(lp == -0.5 for lp, m in zip(turn.engine_logprobs, turn.loss_mask, strict=True)
               if m == 1)
    shown = tokenizer.decode([turn.completion_ids[k] for k in masked])
    assert shown.count("<information>") == 2 and "417 kilometres" in shown
    assert "<search>" not in shown and "<answer>" not in shown  # the model's text is trained on
    model_text = tokenizer.decode([i for i, m in zip(turn.completion_ids, turn.loss_mask,
                                                     strict=True) if m == 1])
    assert "<answer> 417 </answer>" in model_text and "kilometres" not in model_text


def test_a_prefill_ending_in_a_search_is_run_before_the_model_writes(tokenizer, corpus):
    prefilled = dataclasses.replace(request(), prefill="<search> Zorblax river </search>")
    rollout = run(ScriptedEngine(tokenizer, solver_script_after_one),
                  lambda policy: search_rollout(policy, prefilled, corpus, SearchSettings(top_k=1)))
    turn = rollout.turn
    assert [c.query for c in rollout.calls] == ["Zorblax river"] and rollout.model_calls == 1
    # the prompt ends with the prefill; the completion opens with the masked observation
    assert tokenizer.decode(turn.prompt_ids).endswith("<search> Zorblax river </search>")
    first_model = turn.loss_mask.index(1)
    assert first_model > 0 and "417 kilometres" in tokenizer.decode(
        turn.completion_ids[:first_model])
    assert turn.reply.startswith("<search> Zorblax river </search>\n<information>")
    assert turn.reply.rstrip().endswith("<answer> 417 </answer>")


def solver_script_after_one(prompt: str) -> str:
    shown = re.findall(r"(\d+) kilometres", prompt)
    return f"<answer> {shown[-1] if shown else 'unknown'} </answer>"


def test_a_repeated_query_is_marked_and_the_budget_ends_the_rollout(tokenizer, corpus):
    def script(prompt: str) -> str:
        return "<search> Hivelight tower </search>"  # the same query, forever

    settings = SearchSettings(top_k=1, max_searches=3)
    rollout = run(ScriptedEngine(tokenizer, script),
                  lambda policy: search_rollout(policy, request(), corpus, settings))
    assert rollout.finish_reason == "tool_budget" and rollout.tool_calls == 3
    assert [c.repeated for c in rollout.calls] == [False, True, True]
    assert "already searched" in rollout.calls[1].observation
    assert rollout.info()["tool_errors"] == 2  # the repeats


def test_a_long_observation_is_cut_to_its_token_budget(tokenizer, corpus):
    settings = SearchSettings(top_k=3, max_searches=1, max_observation_tokens=16)
    rollout = run(ScriptedEngine(tokenizer, lambda p: "<search> bird </search>"),
                  lambda policy: search_rollout(policy, request(), corpus, settings))
    (call,) = rollout.calls
    assert call.truncated and len(tokenizer(call.observation).input_ids) <= 16


def test_a_search_over_an_unbuilt_corpus_is_one_line(tmp_path):
    with pytest.raises(UserError) as error:
        open_corpus(SearchSettings(corpus="wiki-missing", corpus_cache=str(tmp_path)))
    message = str(error.value)
    assert "'wiki-missing' is not built" in message and "selfplay corpus build" in message
    assert "\n" not in message


def judge_script(prompt: str) -> str:
    """A reader: answers with the number in the shown document about the question's subject
    (so it can answer only when that document was retrieved)."""
    question = prompt.rsplit("Question:", 1)[-1]
    subject = "Zorblax" if "Zorblax" in question else "Hivelight"
    docs = [line for line in prompt.splitlines() if line.startswith("Doc") and subject in line]
    numbers = re.findall(r"\b(\d+) (?:kilometres|floors)", " ".join(docs))
    return f"{numbers[0] if numbers else 'unknown'}</answer>"


def judge_request(**fields) -> Request:
    text = f"{fields['documents']}\nQuestion: {fields['question']}"
    return Request(role="judge", messages=[{"role": "user", "content": text}],
                   sampling=SamplingParams(temperature=0.0, max_new_tokens=16,
                                           stop=("</answer>",)), prefill="<answer>")


def test_held_out_questions_go_through_the_retrieval_check(tokenizer, corpus):
    rows = [
        {"question": "How many kilometres long is the Zorblax river?", "answer": "417"},
        {"question": "How many floors does the Hivelight tower have?", "answer": "29"},
        # the right documents, a wrong target: the judge's answer does not match
        {"question": "How many floors does the Hivelight tower have?", "answer": "30"},
    ]
    verdicts = run(ScriptedEngine(tokenizer, judge_script), lambda policy: check_questions(
        policy, judge_request, corpus, rows, top_k=1, noisy=1, seed=0))
    assert [v.answer for v in verdicts] == ["417", "29", "29"]
    assert [v.passed for v in verdicts] == [True, True, False]
    assert "417 kilometres" in " ".join(verdicts[0].documents)
    # each judge read its own retrieved chunk plus one other row's (noisy = 1)
    assert [len(v.documents) for v in verdicts] == [2, 2, 2]


def test_the_retrieval_check_fails_without_the_right_documents(tokenizer, corpus):
    # documents given (none about the river) and no other row to draw noise from
    rows = [{"question": "How long is the Zorblax river?", "answer": "417",
             "documents": ["The glimmerwing nests on cliffs."]}]
    (verdict,) = run(ScriptedEngine(tokenizer, judge_script), lambda policy: check_questions(
        policy, judge_request, corpus, rows, top_k=1, noisy=4, seed=0))
    assert verdict.documents == ["The glimmerwing nests on cliffs."]
    assert verdict.answer == "unknown" and not verdict.passed


def test_noisy_documents_come_from_others_and_are_shuffled_in():
    import random

    own, others = ["mine A", "mine B"], ["mine A", "x", "y", "z"]
    mixed = mixed_documents(own, others, 2, random.Random(3))
    assert sorted(mixed)[:2] == ["mine A", "mine B"] and len(mixed) == 4
    assert len(set(mixed) - set(own)) == 2  # two others, never a copy of its own
    assert len(mixed_documents(own, others, 9, random.Random(3))) == 5  # all 3 others
