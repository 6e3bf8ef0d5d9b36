"""SPICE loop: challenger parsing, the reward path, per-role groups, waves, contamination, errors.

A scripted engine stands in for the model (so the reasoner's correctness is chosen exactly);
everything else is the real loop: role prompts with their prefill, the parser, math-verify,
curricula rewards, the advantage estimators and the MiniLM contamination guard.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re

import pytest

from curricula.questions import GeneratedTask, is_correct, parse_challenger, reasoner_answer
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import make_loop, validate
from tests.conftest import tiny_config
from tests.scripted import ScriptedEngine as Scripted

ROLES = {"challenger": {"prompt": "challenger"}, "reasoner": {"prompt": "reasoner"}}


def spice_config(tmp_path, roles=None, curriculum=None, **spice):
    settings = {
        "grounded": False,
        "documents_per_step": 5,
        "attempts_per_document": 1,
        "solver_samples": 8,
        "formats": "free",
        "contamination": {"enabled": False},
        **spice,
    }
    config = tiny_config(tmp_path, loop="spice", spice=settings)
    del config["rlvr"]
    config["roles"] = roles or ROLES
    if curriculum is not None:
        config["curriculum"] = curriculum
    return validate(config, "test")


class ScriptedEngine(Scripted):
    """Replies by role: ``challenger(prompt, index)`` and ``reasoner(prompt)``."""

    def __init__(self, tokenizer, challenger, reasoner):
        super().__init__(tokenizer)
        self.challenger, self.reasoner = challenger, reasoner
        self.challenger_calls = 0

    def reply(self, request, prompt):
        if request.role != "challenger":
            return self.reasoner(prompt)
        self.challenger_calls += 1
        return self.challenger(prompt, self.challenger_calls - 1)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from selfplay.engines.models import load_tokenizer

    return load_tokenizer(tiny_model_path)


def free_question(index: int, answer: str = "7") -> str:
    """A challenger reply after the prefill '{"question": "'."""
    return f'Item q{index}: what is three plus four?", "answer": "{answer}"}}'


def solved_by_schedule(correct_of: dict[int, int]):
    """A reasoner that answers question i correctly in its first ``correct_of[i]`` samples."""
    seen: dict[int, int] = {}

    def reasoner(prompt: str) -> str:
        index = int(re.search(r"Item q(\d+)", prompt).group(1))
        seen[index] = seen.get(index, 0) + 1
        return "\\boxed{7}" if seen[index] <= correct_of.get(index, 0) else "\\boxed{5}"

    return reasoner


@dataclasses.dataclass
class Ran:
    """One ``collect``: its tasks.jsonl rows (as written), its metrics, the policy it used."""

    rows: list[dict]
    metrics: dict
    policy: BatchingPolicy


def run_collect(loop, engine, step=0):
    policy = BatchingPolicy(engine)
    collected = asyncio.run(loop.collect(policy, step))
    rows = [dataclasses.asdict(row) for row in collected.tasks]
    return collected.episodes, Ran(rows, collected.metrics, policy)


def challenger_rewards(episodes):
    return [e.rewards["challenger"] for e in episodes if "challenger" in e.rewards]


# ---------------------------------------------------------------------- rewards, through the loop
def test_variance_reward_table_through_the_loop(tmp_path, tokenizer):
    """docs/algorithms.md#challenger-reward at K = 8: j/8 correct → 0.044, 0.372, 0.823, 0.988, 1.0
    (and symmetric)."""
    loop = make_loop(spice_config(tmp_path, documents_per_step=9))
    engine = ScriptedEngine(
        tokenizer,
        lambda prompt, i: free_question(i),
        solved_by_schedule({j: j for j in range(9)}),
    )
    episodes, ran = run_collect(loop, engine)
    rewards = [round(r, 3) for r in challenger_rewards(episodes)]
    assert rewards == [0.044, 0.372, 0.823, 0.988, 1.0, 0.988, 0.823, 0.372, 0.044]
    rows = ran.rows
    assert [row["p_hat"] for row in rows] == [j / 8 for j in range(9)]
    assert all(row["samples"] == 8 and row["valid"] for row in rows)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("uncertainty", [0.0, 0.25, 0.5, 0.75, 1.0]),  # 1 − 2|p̂ − ½|
        ("learnability", [0.0, 0.875, 0.75, 0.625, 0.5]),  # 1 − p̂, 0 at p̂ ∈ {0, 1}
        ("threshold", [0.0, 0.0, 0.0, 1.0, 1.0]),  # 0.3 ≤ p̂ ≤ 0.7
    ],
)
def test_ablation_rewards_by_name(tmp_path, tokenizer, name, expected):
    loop = make_loop(spice_config(tmp_path, challenger_reward=name))
    engine = ScriptedEngine(
        tokenizer, lambda prompt, i: free_question(i), solved_by_schedule({j: j for j in range(5)})
    )
    episodes, ran = run_collect(loop, engine)
    assert [round(r, 4) for r in challenger_rewards(episodes)] == expected


def test_invalid_questions_get_rho(tmp_path, tokenizer):
    loop = make_loop(spice_config(tmp_path, documents_per_step=2, invalid_reward=-0.5))
    replies = [free_question(0), 'According to the text, what is three plus four?", "answer": "7"}']
    engine = ScriptedEngine(tokenizer, lambda prompt, i: replies[i], solved_by_schedule({0: 4}))
    episodes, ran = run_collect(loop, engine)
    assert challenger_rewards(episodes) == [1.0, -0.5]
    rows = ran.rows
    assert [row["valid"] for row in rows] == [True, False]
    assert rows[1]["samples"] == 0 and rows[1]["p_hat"] is None
    metrics = ran.metrics
    assert metrics["spice/challenger/valid_rate"] == 0.5
    assert metrics["spice/challenger/not_self_contained"] == 1.0
    assert metrics["spice/reasoner/accuracy"] == 0.5


# ---------------------------------------------------------------------- per-role advantages
def test_per_role_groups_and_dr_grpo_advantages(tmp_path, tokenizer):
    """Two documents × two attempts, K = 4. Challenger groups = attempts of one document;
    reasoner groups = the K samples of one question; no group holds both roles."""
    loop = make_loop(
        spice_config(tmp_path, documents_per_step=2, attempts_per_document=2, solver_samples=4)
    )
    replies = {
        0: free_question(0),  # doc 0, attempt 0: valid, 2/4 correct → r = 1.0
        1: "broken",  # doc 0, attempt 1: invalid → ρ = −0.1
        2: free_question(2),  # doc 1: 1/4 correct → r = exp(−(3/16 − 1/4)²/0.02)
        3: free_question(3),  # doc 1: 0/4 correct → r = exp(-(1/4)²/0.02)
    }
    engine = ScriptedEngine(
        tokenizer, lambda prompt, i: replies[i], solved_by_schedule({0: 2, 2: 1, 3: 0})
    )
    episodes, ran = run_collect(loop, engine)
    samples = loop.samples(episodes)
    by_group: dict[str, set] = {}
    for sample in samples:
        by_group.setdefault(sample.group_id, set()).add(sample.turn.role)
    assert all(len(roles) == 1 for roles in by_group.values())

    r1, r0 = 0.8226, 0.0439  # exp(−(3/16 − 1/4)²/0.02), exp(−(1/4)²/0.02)
    challenger = {
        s.group_id + f"#{i}": round(s.advantage, 4)
        for i, s in enumerate(x for x in samples if x.turn.role == "challenger")
    }
    assert list(challenger.values()) == [
        round((1.0 + 0.1) / 2, 4),
        round(-(1.0 + 0.1) / 2, 4),
        round((r1 - r0) / 2, 4),
        round(-(r1 - r0) / 2, 4),
    ]
    reasoner = [round(s.advantage, 4) for s in samples if s.turn.role == "reasoner"]
    # question 0: 2/4 correct → ±0.5; question 2: 1/4 → 0.75, −0.25 ×3; question 3: all 0
    assert reasoner == [0.5, 0.5, -0.5, -0.5, 0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0]


# ---------------------------------------------------------------------- waves and rounds
def test_attempts_are_batched_in_waves_and_rounds_retry_only_failed_documents(tmp_path, tokenizer):
    loop = make_loop(
        spice_config(
            tmp_path,
            documents_per_step=3,
            attempts_per_document=2,
            max_rounds=3,
            solver_samples=4,
        )
    )

    def challenger(prompt, i):
        # round 1 (calls 0-5): only slot 0 valid; round 2 (calls 6-9): slot 1 valid; never 2
        return free_question(i) if i in (0, 7) else "{not json"

    engine = ScriptedEngine(tokenizer, challenger, solved_by_schedule({}))
    episodes, ran = run_collect(loop, engine)
    assert engine.batches == [6, 4, 2, 8]  # 3 challenger waves, then one reasoner wave
    assert ran.policy.engine_calls == 4
    attempts = [e for e in episodes if e.env == "challenger"]
    assert len(attempts) == 12
    slot_of_round = [(e.group_id, e.info["round"]) for e in attempts]
    assert slot_of_round.count(("s0-d0", 0)) == 2 and ("s0-d0", 1) not in slot_of_round
    assert slot_of_round.count(("s0-d2", 2)) == 2


# ---------------------------------------------------------------------- parsing
MC_JSON = (
    '{"question": "Which keyword defines a function in Python?", '
    '"options": {"A": "def", "B": "fun", "C": "lambda x", "D": "func"}, "answer": "A"}'
)


def test_parse_multiple_choice_json():
    task, reason = parse_challenger(MC_JSON)
    assert reason == ""
    stem = MC_JSON.replace(
        "Which keyword defines a function in Python?", "Functions are defined by:"
    )
    assert parse_challenger(stem)[1] == ""  # an mc stem need not end in "?"
    assert (task.answer_type, task.answer) == ("mc", "A")
    assert task.text().splitlines()[1:] == ["A) def", "B) fun", "C) lambda x", "D) func"]


def test_parse_multiple_choice_bad_json_and_lines():
    # unescaped quotes, a trailing comma, no closing brace: read field by field
    broken = (
        '{"question": "What does the "pass" statement do in Python?", "options": {"A": "nothing",'
        ' "B": "exits", "C": "loops", "D": "raises"}, "answer": "(A) nothing",'
    )
    task, reason = parse_challenger(broken)
    assert reason == "" and task.answer == "A"
    assert task.question == 'What does the "pass" statement do in Python?'
    # a value that runs into the next key is cut there
    swallowed = '{"question": "Can garbage collection be tuned?", {"answer": "yes"'
    task, reason = parse_challenger(swallowed)
    assert reason == "" and (task.question, task.answer) == (
        "Can garbage collection be tuned?",
        "yes",
    )
    lines = "Question: Which value is falsy in Python?\nA) 1\nB) 0\nC) 'a'\nD) [0]\nAnswer: B"
    task, reason = parse_challenger(lines)
    assert reason == "" and (task.answer_type, task.answer) == ("mc", "B")
    # the answer given as the option's text
    task, _ = parse_challenger(MC_JSON.replace('"answer": "A"', '"answer": "lambda x"'))
    assert task.answer == "C"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ('{"question": "Which keyword defines a function?"}', "no answer"),
        ('{"answer": "def"}', "no question"),
        ("", "no question"),
        ('{"question": "Why?", "answer": "yes"}', "question too short"),
        (MC_JSON.replace('"answer": "A"', '"answer": "E"'), "mc answer is not an option"),
        (MC_JSON.replace('"fun"', '"def"'), "duplicate options"),
        (
            '{"question": "How many bits are in a byte?", "answer": "there are eight bits"}',
            "answer longer than 3 words",
        ),
        (
            '{"question": "According to the passage, what does pass do?", "answer": "nothing"}',
            "not self-contained",
        ),
        # statements, and questions that state their own numeric answer (reward hacks the
        # 135M model found in its first CPU run)
        (
            '{"question": "The answer to the question is the number 11.", "answer": "11"}',
            "not a question",
        ),
        (
            '{"question": "Is the answer to this question 11?", "answer": "11"}',
            "answer given in the question",
        ),
        (
            '{"question": "Is one half equal to 1/2?", "answer": "1/2"}',
            "answer given in the question",
        ),
        (
            '{"question": "What keyword is described in the document above?", "answer": "pass"}',
            "not self-contained",
        ),
        # what the ungrounded challenger collapsed to on this CPU (docs/results.md): a question
        # about "the following" something that never follows, answered "True" every time
        (
            '{"question": "Is the following sentence a fact?", "answer": "True"}',
            "not self-contained",
        ),
        (
            '{"question": "Is the following a valid mathematical expression?", "answer": "1"}',
            "not self-contained",
        ),
    ],
)
def test_parse_rejects(reply, reason):
    task, why = parse_challenger(reply)
    assert task is None and why == reason


def test_the_following_with_what_follows_is_self_contained():
    stated = '{"question": "Is the following statement true: 2 + 2 = 4?", "answer": "True"}'
    code = '{"question": "What does the following code print: print(1 + 1)?", "answer": "2"}'
    for reply in (stated, code):
        task, why = parse_challenger(reply)
        assert task is not None, why
    options = MC_JSON.replace("Which keyword", "Which of the following")
    assert parse_challenger(options)[0] is not None  # the options follow


def test_parse_free_form_types_and_allowed_formats():
    cases = {
        '{"question": "How many bits are in a byte?", "answer": "8"}': ("integer", "8"),
        '{"question": "How many bytes are in a megabyte?", "answer": "1,048,576"}': (
            "integer",
            "1048576",
        ),
        '{"question": "What is one half written as a fraction?", "answer": "$\\\\frac{1}{2}$"}': (
            "expression",
            "\\frac{1}{2}",
        ),
        '{"question": "Which statement does nothing at all?", "answer": "the pass statement."}': (
            "string",
            "the pass statement",
        ),
    }
    for reply, (kind, gold) in cases.items():
        task, reason = parse_challenger(reply)
        assert reason == "" and (task.answer_type, task.answer) == (kind, gold), reply
    free = '{"question": "How many bits are in a byte?", "answer": "8"}'
    assert parse_challenger(free, ("mc",)) == (None, "needs four options A-D")
    assert parse_challenger(MC_JSON, ("free",)) == (None, "multiple choice not allowed")


def test_reasoner_grading():
    mc = GeneratedTask("Q?", "B", "mc", {"A": "x", "B": "y", "C": "z", "D": "w"})
    assert is_correct(reasoner_answer("so \\boxed{(B)}", mc), mc)
    assert is_correct(reasoner_answer("The answer is B.", mc), mc)
    assert not is_correct(reasoner_answer("\\boxed{A}", mc), mc)
    expression = GeneratedTask("Q?", "\\frac{1}{2}", "expression")
    assert is_correct(reasoner_answer("\\boxed{0.5}", expression), expression)  # math-verify
    assert not is_correct(reasoner_answer("\\boxed{0.25}", expression), expression)
    string = GeneratedTask("Q?", "the pass statement", "string")
    assert is_correct(reasoner_answer("\\boxed{Pass statement!}", string), string)
    assert not is_correct(reasoner_answer("\\boxed{break}", string), string)
    assert reasoner_answer("no box here at all, sorry", string, lenient=False) is None
    # the terse reasoner's reply starts with "\\boxed{" (its prefill); small models may not close it
    assert is_correct(reasoner_answer("\\boxed{pass statement\nmore", string), string)
    integer = GeneratedTask("Q?", "7", "integer")
    assert is_correct(reasoner_answer("\\boxed{7", integer), integer)


# ---------------------------------------------------------------------- prompts and samplers
def test_ungrounded_prompt_has_no_document(tmp_path, tokenizer):
    loop = make_loop(spice_config(tmp_path, documents_per_step=1))
    engine = ScriptedEngine(tokenizer, lambda prompt, i: free_question(i), solved_by_schedule({}))
    run_collect(loop, engine)
    challenger_prompt = next(p for role, p in engine.prompts if role == "challenger")
    assert "Write one question" in challenger_prompt
    assert "document:" not in challenger_prompt.lower()
    assert challenger_prompt.rstrip().endswith('{"question": "')  # the reply is started
    assert ("challenger", ('"}',)) in engine.stops  # a free-form JSON reply ends at `"}`
    reasoner_prompt = next(p for role, p in engine.prompts if role == "reasoner")
    assert reasoner_prompt.startswith("Item q0: what is three plus four?")


def two_documents(monkeypatch):
    """Two real corpus chunks from different sources: questions written from the "HALF" one are
    solved by every other reasoner sample (p̂ = ½), those from the "ZERO" one never (p̂ = 0)."""
    from corpora.corpus import Chunk

    chunks = [
        Chunk("c-half", "HALF: the while statement repeats a block.", "while.txt", 9),
        Chunk("c-zero", "ZERO: the pass statement does nothing.", "pass.txt", 8),
    ]
    monkeypatch.setattr("selfplay.loops.spice.loop.load_documents", lambda *args: chunks)
    calls: dict[str, int] = {}

    def challenger(prompt: str, index: int) -> str:
        kind = "h" if "HALF" in prompt else "z"
        return f'Item {kind}{index}: what is three plus four?", "answer": "7"}}'

    def reasoner(prompt: str) -> str:
        question = re.search(r"Item (\w+)", prompt).group(1)
        calls[question] = calls.get(question, 0) + 1
        solved = question.startswith("h") and calls[question] % 2 == 0
        return "\\boxed{7}" if solved else "\\boxed{5}"

    return challenger, reasoner


def document_draws(tmp_path, tokenizer, monkeypatch, steps=20, **settings):
    """Run ``steps`` collects with one document per step; count the draws of each document."""
    challenger, reasoner = two_documents(monkeypatch)
    config = spice_config(tmp_path, grounded=True, documents_per_step=1, **settings)
    loop = make_loop(config)
    engine = ScriptedEngine(tokenizer, challenger, reasoner)
    counts = [0, 0]
    for step in range(steps):
        _, ran = run_collect(loop, engine, step)
        document = ran.rows[0]["document"]
        counts[["c-half", "c-zero"].index(document)] += 1
    return loop, counts, ran


def test_documents_are_drawn_by_the_curriculum_sampler(tmp_path, tokenizer, monkeypatch):
    """learnability (p̂(1 − p̂)) prefers the document whose questions land at p̂ = ½ over the one
    at p̂ = 0 (seeded counts); uniform draws both about alike; the p̂ is the reasoners'."""
    loop, counts, _ = document_draws(
        tmp_path, tokenizer, monkeypatch, curriculum={"sampler": "learnability"}
    )
    buffer = loop.curriculum.buffer
    assert buffer.ids == ["c-half", "c-zero"]
    assert buffer.p_hat[0] == pytest.approx(0.5) and buffer.p_hat[1] == 0.0
    assert counts[0] >= 17 and counts[1] <= 3, counts
    _, uniform, _ = document_draws(tmp_path, tokenizer, monkeypatch)
    assert 5 <= uniform[0] <= 15, uniform
    # the legacy key is an alias of the curricula learnability sampler
    legacy = make_loop(spice_config(tmp_path, grounded=True, sampler="near_half"))
    assert legacy.curriculum.sampler.name == "learnability"
    with pytest.raises(UserError, match="near_half is an alias of curriculum.sampler"):
        make_loop(spice_config(tmp_path, sampler="near_half", curriculum={"sampler": "band"}))


def test_document_curriculum_survives_a_checkpoint_and_logs_metrics(
    tmp_path, tokenizer, monkeypatch
):
    loop, _, ran = document_draws(
        tmp_path, tokenizer, monkeypatch, steps=3, curriculum={"sampler": "plr"}
    )
    metrics = ran.metrics
    assert metrics["curriculum/drawn_groups"] == 1.0  # the step's one valid question
    assert metrics["curriculum/effective_ratio"] in (0.0, 1.0)
    assert "c-" in metrics["curriculum/top_tasks"]
    state = copy.deepcopy(loop.state_dict())  # what a checkpoint pickles
    restored = make_loop(loop.config)
    restored.load_state_dict(state)
    assert restored.curriculum.buffer.ids == loop.curriculum.buffer.ids
    assert list(restored.curriculum.buffer.attempts) == list(loop.curriculum.buffer.attempts)
    assert [restored.choose_documents(9) for _ in range(5)] == [
        loop.choose_documents(9) for _ in range(5)
    ]
    loop.save_artifacts(tmp_path)
    table = (tmp_path / "curriculum" / "tasks.csv").read_text()
    assert "c-half" in table and "while.txt" in table


# ---------------------------------------------------------------------- contamination
def test_contamination_drops_near_copies_of_eval_items(tmp_path, tokenizer):
    items = tmp_path / "eval.jsonl"
    items.write_text(
        json.dumps({"question": "What is the capital city of France?", "answer": "Paris"}) + "\n"
    )
    loop = make_loop(
        spice_config(
            tmp_path,
            documents_per_step=3,
            contamination={"enabled": True, "eval_files": [str(items)], "threshold": 0.9},
        )
    )
    replies = [
        'What is the capital city of France?", "answer": "Paris"}',  # exact copy
        'what is the capital city of france ?", "answer": "Paris"}',  # near copy
        free_question(2),
    ]
    engine = ScriptedEngine(tokenizer, lambda prompt, i: replies[i], solved_by_schedule({2: 4}))
    episodes, ran = run_collect(loop, engine)
    rows = ran.rows
    assert [row["valid"] for row in rows] == [False, False, True]
    assert challenger_rewards(episodes) == [-0.1, -0.1, 1.0]
    metrics = ran.metrics
    assert metrics["spice/challenger/contamination_drops"] == 2.0
    assert engine.batches == [3, 8]  # dropped questions never reach the reasoner


# ---------------------------------------------------------------------- bad input
def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(UserError, match="unknown proposer reward 'varience'"):
        make_loop(spice_config(tmp_path, challenger_reward="varience"))
    with pytest.raises(UserError, match="needs a `reasoner` role"):
        make_loop(spice_config(tmp_path, roles={"challenger": {"prompt": "challenger"}}))
    with pytest.raises(UserError, match="corpus 'no-such-corpus' is not built"):
        make_loop(
            spice_config(
                tmp_path, grounded=True, corpus="no-such-corpus", corpus_cache=str(tmp_path)
            )
        )
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(UserError, match="missing.jsonl does not exist"):
        make_loop(spice_config(tmp_path, contamination={"eval_files": [str(missing)]}))
    with pytest.raises(UserError, match="unknown key 'spice.rho'"):
        spice_config(tmp_path, rho=-0.1)


@pytest.mark.parametrize(
    "question",
    [
        "Does the provided text exceed its maximum length?",
        "What is this passage mainly about?",
        "As mentioned above, which keyword ends a loop?",
        "In the given document, which keyword ends a loop?",
        "What does the author call a lambda?",
        "Is 'the passage' on the previous video?",
    ],
)
def test_questions_that_lean_on_the_document_are_invalid(question):
    reply = json.dumps({"question": question, "answer": "break"})
    assert parse_challenger(reply) == (None, "not self-contained")


def test_option_letter_without_options_is_invalid():
    reply = '{"question": "Which keyword defines a function?", "answer": "B"}'
    assert parse_challenger(reply) == (None, "option letter without options")
