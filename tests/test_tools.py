"""Tool-integrated rollouts: masking, budgets, truncation, errors, and scheduling.

Most tests script the model's text with a fake engine (tokenised by the real tokenizer) and run
the code in a real ``SandboxPool``; one drives the real hf engine on the tiny model with forced
token choices, so the engine's stop strings, KV cache and log-probs take part end to end.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch

from sandbox import SandboxLimits, SandboxPool
from selfplay.engines.hf import HFEngine
from selfplay.engines.lora import LoraSpec
from selfplay.engines.models import load_tokenizer
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import CLOSE_FENCE, STOP, ToolSettings, extract_code, tool_rollout
from selfplay.loops import validate
from selfplay.loops.rlvr import RlvrLoop
from selfplay.training.base import LearnerSettings
from selfplay.training.learner import LocalLearner
from selfplay.types import Completion, Request, Sample, SamplingParams
from tests.conftest import tiny_config

LORA = LoraSpec(r=4, alpha=8)
CODE_42 = f"Let me compute.\n```python\nprint(6*7)\n{STOP}"


# ---------------------------------------------------------------------- fixtures and fakes
@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="module")
def learner(tiny_model_path):
    return LocalLearner(tiny_model_path, LearnerSettings(lora=LORA), adapters=["shared"])


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=2, limits=SandboxLimits(wall_s=3, cpu_s=3)) as sandbox_pool:
        yield sandbox_pool


def _segment_index(prompt: str) -> int:
    """Output blocks the assistant already opened (a system prompt may mention ```output too)."""
    return prompt.rsplit("<|im_start|>assistant", 1)[-1].count(STOP)


class ScriptedEngine:
    """Answers each request with the next canned segment of the episode its prompt names.

    The episode is the tag in the question (``[A]``, else the script ``*``); the segment index
    is the number of output blocks the assistant already opened. Segments not ending in
    ```output end with eos.
    """

    def __init__(self, tokenizer, scripts: dict[str, list[str]]) -> None:
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.batches: list[list[str]] = []  # the episode tag of every request, per engine call

    def generate(self, requests: list[Request]) -> list[Completion]:
        completions, tags = [], []
        for request in requests:
            prompt_ids = self._prompt_ids(request)
            prompt = self.tokenizer.decode(prompt_ids)
            tag = next((t for t in self.scripts if f"[{t}]" in prompt), "*")
            segments = self.scripts[tag]
            text = segments[min(_segment_index(prompt), len(segments) - 1)]
            completions.append(self._complete(request, prompt_ids, text))
            tags.append(tag)
        self.batches.append(tags)
        return completions

    def _prompt_ids(self, request: Request) -> list[int]:
        if request.prompt_ids is not None:
            return list(request.prompt_ids)
        text = self.tokenizer.apply_chat_template(
            request.messages, add_generation_prompt=True, tokenize=False
        )
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def _complete(self, request: Request, prompt_ids: list[int], text: str) -> Completion:
        stopped = text.endswith(STOP) and STOP in request.sampling.stop
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        if not stopped:
            ids.append(self.tokenizer.eos_token_id)
        limit = request.sampling.max_new_tokens
        finish = "length" if len(ids) > limit else "stop"
        ids = ids[:limit]
        return Completion(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            prompt_ids=prompt_ids,
            token_ids=ids,
            logprobs=[-0.5] * len(ids),
            finish_reason=finish,
            stop_string=STOP if stopped and finish == "stop" else None,
        )


def _request(tag: str, max_new_tokens: int = 200, temperature: float = 1.0) -> Request:
    return Request(
        role="solver",
        messages=[{"role": "user", "content": f"[{tag}] What is 6 * 7?"}],
        sampling=SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
    )


def _roll(tokenizer, pool, scripts, settings=None, **request_kw):
    """One scripted rollout of episode "A" through a real BatchingPolicy."""
    engine = ScriptedEngine(tokenizer, scripts)
    policy = BatchingPolicy(engine)
    settings = settings or ToolSettings()
    return _gather_one(
        policy, tool_rollout(policy, _request("A", **request_kw), pool, tokenizer, settings)
    )


def _gather_one(policy, coroutine):
    """Episodes only make progress inside ``policy.gather`` (it flushes the batches)."""

    async def run():
        (result,) = await policy.gather([coroutine])
        return result

    return asyncio.run(run())


def _tool_spans(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) ranges where the mask is 0."""
    spans, start = [], None
    for k, m in enumerate([*mask, 1]):
        if m == 0 and start is None:
            start = k
        elif m == 1 and start is not None:
            spans.append((start, k))
            start = None
    return spans


# ---------------------------------------------------------------------- code extraction
@pytest.mark.parametrize(
    ("text", "code"),
    [
        (f"```python\nprint(1)\n```\n{STOP}", "print(1)"),
        (f"```python\nprint(1)\n{STOP}", "print(1)"),  # unterminated block
        (f"```py\nx = 2\nprint(x)\n{STOP}", "x = 2\nprint(x)"),
        (f"```python\nprint(1)\n```\nand\n```Python\nprint(2)\n```{STOP}", "print(2)"),
        (f"```python print(3)\n{STOP}", "print(3)"),
        (f"no code here {STOP}", None),
        (f"```pytorch\nprint(1)\n{STOP}", None),
        (f"```python\n\n{STOP}", None),
    ],
)
def test_extract_code(text, code):
    assert extract_code(text) == code


# ---------------------------------------------------------------------- (a) masking
def test_tool_tokens_are_masked_and_model_tokens_are_not(tokenizer, pool, learner):
    final = "So the answer is \\boxed{42}."
    rollout = _roll(tokenizer, pool, {"A": [CODE_42, final]})
    turn = rollout.turn
    assert rollout.tool_calls == 1 and rollout.tool_errors == 0 and rollout.model_calls == 2
    assert rollout.calls[0].code == "print(6*7)"
    assert turn.text == f"{CODE_42}\n42\n{CLOSE_FENCE}{final}"
    assert tokenizer.decode(turn.completion_ids, skip_special_tokens=True) == turn.text

    first = tokenizer(CODE_42, add_special_tokens=False).input_ids
    second = tokenizer(final, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    ((start, end),) = _tool_spans(turn.loss_mask)
    assert (start, end) == (len(first), len(turn.completion_ids) - len(second))
    assert tokenizer.decode(turn.completion_ids[start:end]) == f"\n42\n{CLOSE_FENCE}"
    assert turn.completion_ids[:start] == first and turn.completion_ids[end:] == second
    assert sum(turn.loss_mask) == len(first) + len(second)
    assert all(
        lp == 0.0 for lp, m in zip(turn.engine_logprobs, turn.loss_mask, strict=True) if m == 0
    )
    assert all(
        lp == -0.5 for lp, m in zip(turn.engine_logprobs, turn.loss_mask, strict=True) if m == 1
    )
    assert turn.prompt_ids == ScriptedEngine(tokenizer, {})._prompt_ids(_request("A"))

    # The learner trains on exactly the model tokens: targets and the positions predicting them.
    (batch,) = learner._micro_batches([Sample(turn=turn, advantage=1.0)])
    model_positions = [k for k, m in enumerate(turn.loss_mask) if m]
    assert batch.targets.tolist() == [turn.completion_ids[k] for k in model_positions]
    assert batch.cols.tolist() == [len(turn.prompt_ids) + k - 1 for k in model_positions]
    # ... and the tool tokens still sit in the context the model tokens are scored in.
    assert batch.input_ids[0].tolist() == turn.prompt_ids + turn.completion_ids


def test_a_started_reply_continues_after_the_tool_call(tokenizer, pool):
    """A request with a prefill (agent0-cpu's executor starts its reply with a code block): the
    segment after the tool output continues from token ids, which already hold the prefill."""
    engine = ScriptedEngine(tokenizer, {"A": [CODE_42, "So \\boxed{42}."]})
    policy = BatchingPolicy(engine)
    request = dataclasses.replace(_request("A"), prefill="```python\n")
    rollout = _gather_one(policy, tool_rollout(policy, request, pool, tokenizer, ToolSettings()))
    assert rollout.tool_calls == 1 and rollout.model_calls == 2
    assert rollout.turn.text.endswith("So \\boxed{42}.")


# ---------------------------------------------------------------------- (b) budgets
def test_at_most_max_tool_turns(tokenizer, pool):
    always_code = f"```python\nprint(1)\n{STOP}"
    rollout = _roll(tokenizer, pool, {"A": [always_code]}, ToolSettings(max_tool_turns=2))
    assert rollout.tool_calls == 2 and rollout.model_calls == 3
    assert rollout.finish_reason == "tool_budget"
    assert len(_tool_spans(rollout.turn.loss_mask)) == 2
    assert rollout.turn.text.endswith(STOP)  # the third request to run code is not served


def test_model_tokens_bounded_by_max_new_tokens(tokenizer, pool):
    long_answer = "The answer is " + "very " * 40 + "\\boxed{42}."
    budget = len(tokenizer(CODE_42, add_special_tokens=False).input_ids) + 10
    rollout = _roll(tokenizer, pool, {"A": [CODE_42, long_answer]}, max_new_tokens=budget)
    assert rollout.tool_calls == 1 and rollout.finish_reason == "length"
    assert rollout.turn.num_model_tokens == budget


# ---------------------------------------------------------------------- (c) truncation
def test_long_observation_is_truncated_and_flagged(tokenizer, pool):
    spam = f"```python\nprint('spam ' * 500)\n{STOP}"
    settings = ToolSettings(max_observation_tokens=16)
    rollout = _roll(tokenizer, pool, {"A": [spam, "\\boxed{1}"]}, settings)
    assert rollout.truncated_observations == 1 and rollout.calls[0].truncated
    assert rollout.tool_errors == 0
    ((start, end),) = _tool_spans(rollout.turn.loss_mask)
    marker_and_fence = tokenizer("\n... [output truncated]\n```\n", add_special_tokens=False)
    assert end - start <= 1 + 16 + len(marker_and_fence.input_ids) + 1
    assert "[output truncated]" in rollout.turn.text
    assert len(tokenizer(rollout.calls[0].observation).input_ids) <= 17


# ---------------------------------------------------------------------- (d) errors, timeouts
@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_errors_and_timeouts_are_counted(tokenizer, pool):
    crash = f"```python\n1/0\n{STOP}"
    spin = f"```python\nwhile True:\n    pass\n{STOP}"
    settings = ToolSettings(wall_s=1.0)
    rollout = _roll(
        tokenizer, pool, {"A": [crash, spin, f"No code this time.{STOP}", "ok"]}, settings
    )
    assert rollout.tool_calls == 3
    assert rollout.tool_errors == 3 and rollout.timeouts == 1
    assert "ZeroDivisionError" in rollout.calls[0].observation
    assert rollout.calls[1].timed_out and "TimeoutError" in rollout.calls[1].observation
    assert rollout.calls[2].code == "" and "no ```python code block" in rollout.calls[2].observation
    assert rollout.finish_reason == "stop"


# ---------------------------------------------------------------------- (e) scheduling
@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_engine_serves_other_episodes_while_one_waits_on_the_sandbox(tokenizer, pool):
    slow = f"```python\nimport time\ntime.sleep(1.5)\nprint('slow')\n{STOP}"
    fast = f"```python\nprint('fast')\n{STOP}"
    engine = ScriptedEngine(tokenizer, {"A": [slow, "\\boxed{1}"], "B": [fast, fast, "\\boxed{2}"]})
    policy = BatchingPolicy(engine)

    async def both():
        settings = ToolSettings(wall_s=3.0)
        return await policy.gather(
            tool_rollout(policy, _request(tag), pool, tokenizer, settings) for tag in "AB"
        )

    slow_rollout, fast_rollout = asyncio.run(both())
    assert slow_rollout.tool_calls == 1 and fast_rollout.tool_calls == 2
    assert slow_rollout.calls[0].observation == "slow\n"
    # B's two continuations ran while A slept in the sandbox, without waiting for A.
    assert engine.batches == [["A", "B"], ["B"], ["B"], ["A"]]
    assert policy.engine_calls == 4


# ---------------------------------------------------------------------- end to end
class ForcedEngine(HFEngine):
    """The real hf engine whose sampled tokens are replaced by a script (per segment).

    Prefill, KV cache, stop strings, eos, and log-probs are the engine's own: the log-prob
    recorded is the model's log-prob of the forced token.
    """

    script: list[list[int]]  # token ids per segment, set by the test

    def _sample(self, logits: torch.Tensor, rows) -> torch.Tensor:
        temps = torch.tensor([r.temperature for r in rows], device=logits.device)
        logprobs = torch.log_softmax(logits.float() / temps[:, None], dim=-1)
        tokens = []
        for i, row in enumerate(rows):
            segment = _segment_index(self.tokenizer.decode(row.prompt_ids))
            planned = self.script[min(segment, len(self.script) - 1)]
            token = planned[len(row.tokens)] if len(row.tokens) < len(planned) else planned[-1]
            row.tokens.append(token)
            row.logprobs.append(float(logprobs[i, token]))
            self._check_finished(row)
            tokens.append(token)
        return torch.tensor(tokens, device=logits.device)


def test_real_engine_and_sandbox_end_to_end(tiny_model_path, tokenizer, pool, learner):
    engine = ForcedEngine(tiny_model_path, lora=LORA, adapters=["shared"], seed=0)
    eos = tokenizer.eos_token_id
    ids = tokenizer(CODE_42, add_special_tokens=False).input_ids
    answer = tokenizer("\\boxed{42}", add_special_tokens=False).input_ids + [eos]
    engine.script = [ids + ids, answer]  # the engine must stop at ```output by itself
    policy = BatchingPolicy(engine)
    request = Request(
        role="solver",
        messages=[{"role": "user", "content": "What is 6 * 7?"}],
        sampling=SamplingParams(temperature=1.0, max_new_tokens=64),
    )
    rollout = _gather_one(policy, tool_rollout(policy, request, pool, tokenizer, ToolSettings()))
    turn = rollout.turn
    assert rollout.tool_calls == 1 and rollout.tool_errors == 0 and policy.engine_calls == 2
    assert turn.text == f"{CODE_42}\n42\n{CLOSE_FENCE}\\boxed{{42}}"
    assert turn.completion_ids[: len(ids)] == ids and turn.completion_ids[-len(answer) :] == answer

    # The learner, fed the whole interleaved sequence, scores the model tokens exactly as the
    # engine did in its two separate calls (the second one prefilled the tool output).
    (scored,) = learner.score([Sample(turn=turn, advantage=1.0)])
    engine_model_logprobs = [
        lp for lp, m in zip(turn.engine_logprobs, turn.loss_mask, strict=True) if m
    ]
    assert len(scored) == sum(turn.loss_mask) == len(ids) + len(answer)
    assert scored == pytest.approx(engine_model_logprobs, abs=1e-4)


# ---------------------------------------------------------------------- the rlvr loop
@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_rlvr_loop_uses_the_tool_and_reports_it(tmp_path, tokenizer):
    data = tiny_config(tmp_path, sampling={"max_new_tokens": 64})
    data["roles"] = {"solver": {"prompt": "tool_solver"}}
    data["rlvr"]["tool"] = {"max_tool_turns": 2, "wall_s": 2.0, "pool_size": 1}
    loop = RlvrLoop(validate(data, "test"))
    crash = f"```python\n1/0\n{STOP}"
    engine = ScriptedEngine(tokenizer, {"*": [crash, f"```py\nprint(1)\n{STOP}", "\\boxed{1}"]})
    policy = BatchingPolicy(engine)
    assert loop.tool._pool is None  # no sandbox until an episode needs one
    collected = asyncio.run(loop.collect(policy, 0))
    episodes = collected.episodes
    assert len(episodes) == 2 * 3
    for episode in episodes:
        (turn,) = episode.turns
        assert episode.info["tool_calls"] == 2 and episode.info["tool_errors"] == 1
        assert 0 in turn.loss_mask and episode.info["answer"] == "1"
    metrics = collected.metrics
    assert metrics["rollout/tool_calls"] == 2.0
    assert metrics["rollout/tool_error_rate"] == 0.5
    pool = loop.tool._pool
    loop.close()
    assert loop.tool._pool is None
    with pytest.raises(RuntimeError):
        pool.run("print(1)")
