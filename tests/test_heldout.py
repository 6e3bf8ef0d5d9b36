"""``selfplay.evaluation.heldout``: per-problem records of a held-out evaluation (docs/compare.md).

- the engine scores a batch of given replies as it scores them one by one, and as it reported
  them when it generated them (left padding and masking change nothing);
- the reference answer's log-prob is the score of ``answer}`` after the prompt and ``\\boxed{``;
- scored on the greedy answers' own prefill it is the same number, the answers are the same, and
  no second pass over the prompts is made; an engine that does not score with generation gets
  the second pass;
- the base model's key ignores the seed exactly when answers are greedy only;
- pass@k from the records is the unbiased estimator; scores come in suite order;
- a tiny run's base model and archived step give one record per problem, with every measure.
"""

from __future__ import annotations

import asyncio

import pytest

from selfplay.evaluation.evaluate import Problem, _run_setting
from selfplay.evaluation.heldout import (
    Measures,
    base_key,
    common_ids,
    evaluate_snapshot,
    greedy_answers,
    reference_logprobs,
    scores,
    summary,
)
from selfplay.stats.passk import pass_at_k
from selfplay.types import Request, SamplingParams


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    from selfplay.engines.hf import HFEngine
    from selfplay.engines.lora import LoraSpec

    built = HFEngine(tiny_model_path, lora=LoraSpec(r=4, alpha=8), adapters=["shared"])
    yield built
    built.close()


def requests(n: int) -> list[Request]:
    return [Request(role="eval", messages=[{"role": "user", "content": "word " * (3 * i + 1)}],
                    adapter="shared", sampling=SamplingParams(temperature=0.0, max_new_tokens=5))
            for i in range(n)]


def test_batched_scores_are_the_one_by_one_scores_and_the_sampled_logprobs(engine):
    """Within 1e-4 in log-prob: batched and single forwards sum in different orders (float32)."""
    asked = requests(5)
    completions = engine.generate(asked)
    replies = [c.token_ids for c in completions]
    batched = engine.score(asked, replies)
    for request, reply, completion, scored in zip(asked, replies, completions, batched,
                                                  strict=True):
        (alone,) = engine.score([request], [reply])
        assert scored == pytest.approx(alone, abs=1e-4)
        assert scored == pytest.approx(completion.logprobs, abs=1e-4)
    engine.max_batch_size, size = 2, engine.max_batch_size  # several batches: same answers
    try:
        for again, before in zip(engine.score(asked, replies), batched, strict=True):
            assert again == pytest.approx(before, abs=1e-4)
    finally:
        engine.max_batch_size = size


def test_the_reference_logprob_is_the_score_of_the_boxed_answer(engine):
    from roles import load_role
    from selfplay.engines.policy import BatchingPolicy

    class Model:  # what reference_logprobs reads of a RunModel
        def __init__(self):
            self.engine, self.policy = engine, BatchingPolicy(engine)

    problems = [Problem("What is 2+2?", "4", "f"), Problem("Name 12 × 3.", " 36 ", "g")]
    measured = reference_logprobs(Model(), "shared", problems)
    for problem, (mean, tokens) in zip(problems, measured, strict=True):
        request = Request(role="eval", adapter="shared", prefill="\\boxed{",
                          messages=load_role("solver_terse").render(question=problem.question))
        ids = engine.tokenizer(problem.answer.strip() + "}", add_special_tokens=False).input_ids
        (by_hand,) = engine.score([request], [ids])
        assert tokens == len(ids) and mean == pytest.approx(sum(by_hand) / len(ids), abs=1e-4)
    asyncio.run(asyncio.sleep(0))


def test_generation_scores_references_as_score_does_and_generates_the_same(engine):
    """Per token within 2e-5: the two paths differ in batch shapes only (float32 sums in
    another order, ~1e-6 here); a reference scored one position off differs by ~2e-4 even on
    the tiny random model, whose attention is nearly uniform. The greedy tokens and their
    log-probs do not change: the references leave the cache as they came."""
    asked = requests(5)
    plain = engine.generate(asked)
    for i, request in enumerate(asked):
        request.reference_ids = [5, 6, 7, 8, 9][: i + 1]
    scored = engine.generate(asked)
    for request, before, after in zip(asked, plain, scored, strict=True):
        assert after.token_ids == before.token_ids
        assert after.logprobs == pytest.approx(before.logprobs, abs=2e-5)
        assert before.reference_logprobs is None
        (alone,) = engine.score([request], [request.reference_ids])
        assert after.reference_logprobs == pytest.approx(alone, abs=2e-5)


class _Model:  # what the evaluation reads of a RunModel
    def __init__(self, engine):
        from selfplay.engines.policy import BatchingPolicy

        self.engine, self.policy = engine, BatchingPolicy(engine)


PROBLEMS = [Problem("What is 2+2?", "4", "f"), Problem("Name 12 × 3.", " 36 ", "g"),
            Problem("Sort: b a c", "a, b, c", "h"), Problem("7 - 9 =", "-2", "f")]


def test_the_reference_scored_on_the_greedy_prefill_is_the_separate_pass(engine):
    """Same answers, and each reference's mean log-prob within 1e-4 of its own pass (float32
    sums over other batch shapes); the engine scored only the references' tokens, never the
    prompts again (its score pass did not run)."""
    model, measures = _Model(engine), Measures("s", len(PROBLEMS), tokens=5)
    separate = reference_logprobs(model, "shared", PROBLEMS)
    alone = asyncio.run(_run_setting(model, PROBLEMS, 1, 0.0, 5, None, "shared", 0))
    before = engine.stats["score_tokens"], engine.stats["reference_tokens"]
    answers, likelihood = greedy_answers(model, "shared", PROBLEMS, measures, 0)
    assert engine.stats["score_tokens"] == before[0]
    assert engine.stats["reference_tokens"] > before[1]
    assert [a["answer"] for a in answers] == [a[0]["answer"] for a in alone]
    for (mean, tokens), (want, want_tokens) in zip(likelihood, separate, strict=True):
        assert tokens == want_tokens and mean == pytest.approx(want, abs=1e-4)


def test_an_engine_that_scores_no_references_gets_the_separate_pass(engine, monkeypatch):
    model, measures = _Model(engine), Measures("s", len(PROBLEMS), tokens=5)
    separate = reference_logprobs(model, "shared", PROBLEMS)
    generate = engine.generate

    def without_references(requests):
        completions = generate(requests)
        for completion in completions:
            completion.reference_logprobs = None
        return completions

    monkeypatch.setattr(engine, "generate", without_references)
    _, likelihood = greedy_answers(model, "shared", PROBLEMS, measures, 0)
    assert [t for _, t in likelihood] == [t for _, t in separate]
    assert [m for m, _ in likelihood] == pytest.approx([m for m, _ in separate], abs=1e-4)


def test_the_base_key_depends_on_the_seed_only_when_answers_are_sampled(tmp_path):
    from selfplay.loops import validate
    from tests.conftest import tiny_config

    config = validate(tiny_config(tmp_path), "test")
    greedy = Measures("compare", 640)
    sampled = Measures("compare", 640, samples=4)
    assert base_key(config, greedy, 0) == base_key(config, greedy, 7)
    assert base_key(config, sampled, 0) != base_key(config, sampled, 7)
    assert base_key(config, greedy, 0) != base_key(config, Measures("compare", 320), 0)
    other = validate(tiny_config(tmp_path, model={"path": "tiny-random", "dtype": "bfloat16"}),
                     "test")
    assert base_key(other, greedy, 0) != base_key(config, greedy, 0)
    # the loop, its LoRA rank, its learning rate do not change the base model's answers
    loop = validate(tiny_config(tmp_path, train={"lr": 0.5, "lora": {"r": 8, "alpha": 16}}),
                    "test")
    assert base_key(loop, greedy, 0) == base_key(config, greedy, 0)


def test_summary_and_scores_from_records():
    records = [{"id": "g/0", "index": 1, "family": "g", "greedy": 0, "n": 4, "c": 0,
                "logprob": -2.0},
               {"id": "f/0", "index": 0, "family": "f", "greedy": 1, "n": 4, "c": 2,
                "logprob": -1.0}]
    row = summary(records, Measures("s", 2, samples=4))
    assert row["greedy"] == 0.5 and row["logprob"] == -1.5
    assert row["pass@1"] == pytest.approx(0.25) and row["pass@4"] == pytest.approx(0.5)
    assert row["families"] == {"f": 1.0, "g": 0.0}
    assert scores(records, "greedy") == [1.0, 0.0]  # suite order, not file order
    assert scores(records, "pass@2", 2) == [pass_at_k(4, 2, 2), 0.0]
    assert scores(records, "logprob") == [-1.0, -2.0]
    assert scores(records, "logprob", ids=["g/0"]) == [-2.0]  # paired by id: a curve's subset
    assert common_ids(records, records[:1]) == ["g/0"]


def test_a_tiny_runs_snapshots_give_one_record_per_problem(tmp_path):
    from tests.tiny_run import make_tiny_run

    run_dir, _ = make_tiny_run(tmp_path)
    measures = Measures("rg:basic_arithmetic", 3, samples=2, tokens=4)
    base = evaluate_snapshot(run_dir, 0, measures)
    later = evaluate_snapshot(run_dir, 2, measures)
    assert base["step"] == 0 and later["step"] == 2
    for result in (base, later):
        assert [r["index"] for r in result["records"]] == [0, 1, 2]
        assert all(r["n"] == 2 and 0 <= r["c"] <= 2 and r["logprob"] < 0
                   for r in result["records"])
        assert result["cpu_seconds"] >= result["load_cpu_seconds"] > 0
        assert 0 < result["generated_tokens"] <= 3 * 3 * 4  # greedy + 2 samples, ≤ 4 tokens
    # trained weights change the reference's likelihood (LoRA adapters no longer zero)
    assert [r["logprob"] for r in base["records"]] != [r["logprob"] for r in later["records"]]
