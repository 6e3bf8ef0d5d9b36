"""The SSP loop's own pieces: targets mined from chunks or read from a file, the lenient
question, the pool that failed proposals reuse, the advantages (the proposer's raw reward, the
solver's GRPO), and an unbuilt search corpus refused in one line before any step."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from corpora.corpus import Chunk
from curricula.ssp_rewards import proposed_question
from curricula.targets import mine_targets, read_targets, spans
from selfplay.core.errors import UserError
from selfplay.loops import make_loop, validate
from selfplay.loops.ssp import SspLoop
from selfplay.loops.ssp.loop import Problem
from selfplay.types import Episode, Turn


def test_targets_are_numbers_and_names_not_sentence_starts():
    text = ("Guido van Rossum released Python 3.8 in 2019. The walrus operator came with it.\n"
            "Since then Unicode Standard Annex 31 defines identifiers. Bob wrote 7 lines.")
    # "Guido" starts the text and "The"/"Since"/"Bob" start sentences; "7" has one digit
    names = ["Rossum", "Python", "3.8", "2019", "Unicode Standard Annex", "31"]
    assert spans(text) == names
    chunks = [Chunk("a", text, "s", 1), Chunk("b", "A second Python mention, 2019 again.", "s", 1)]
    mined = mine_targets(chunks, limit=10)
    assert [t.answer for t in mined] == names
    assert {t.chunk_id for t in mined} == {"a"}  # repeats in chunk b are not new targets
    assert [t.answer for t in mine_targets(chunks, limit=2)] == ["Rossum", "Python"]


def test_a_targets_file_without_answers_is_one_line(tmp_path):
    good = tmp_path / "t.jsonl"
    good.write_text('{"answer": "Paris"}\n\n{"answer": 1991}\n')
    assert [t.answer for t in read_targets(str(good))] == ["Paris", "1991"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": "Paris"}\n{"question": "no answer"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: a target row needs"):
        read_targets(str(bad))


def test_a_question_left_open_counts_only_when_lenient():
    reply = ("<search> x </search>\n<information>\nDoc 1: <question> in a doc </question>\n"
             "</information>\n<question> What does a bare return give back\n\nmore")
    assert proposed_question(reply) is None
    assert proposed_question(reply, lenient=True) == "What does a bare return give back"
    assert proposed_question("<question>Closed one?</question> <question>open", True) == (
        "Closed one?")


def episode(role: str, reward: float, group: str) -> Episode:
    turn = Turn(role=role, prompt_ids=[1], completion_ids=[2, 3], engine_logprobs=[-1.0, -1.0],
                loss_mask=[1, 1], text="x")
    return Episode(loop="ssp", env=role, turns=[turn], rewards={role: reward}, group_id=group)


def test_advantages_proposer_raw_reward_solver_grpo():
    fake = SimpleNamespace(config=SimpleNamespace(
        advantage=SimpleNamespace(estimator="auto"), train=SimpleNamespace(loss="grpo")))
    episodes = [
        episode("proposer", 0.75, "s0-p0"),  # a one-proposal group: its advantage is 0.75
        episode("proposer", -1.0, "s0-p1"),  # a failed proposal's penalty
        episode("solver", 1.0, "s0-p0-solve"), episode("solver", 0.0, "s0-p0-solve"),
        episode("solver", 0.0, "s0-p0-solve"), episode("solver", 0.0, "s0-p0-solve"),
        Episode(loop="ssp", env="judge", turns=[], rewards={}, group_id="s0-p0-rag"),
    ]
    samples = SspLoop.own_samples(fake, episodes)
    by_role = {}
    for sample in samples:
        by_role.setdefault(sample.turn.role, []).append(sample.advantage)
    assert by_role["proposer"] == [0.75, -1.0]
    # GRPO over [1, 0, 0, 0]: mean 1/4, population std √3/4 → 0.75/(√3/4) = √3 and
    # −0.25/(√3/4) = −1/√3; ε in the denominator (1e-6) moves them by < 1e-5
    root3 = 3 ** 0.5
    assert by_role["solver"] == pytest.approx([root3] + [-1 / root3] * 3, abs=1e-5)


def test_failed_proposals_reuse_pooled_problems():
    fake = SimpleNamespace(settings=SimpleNamespace(pool_size=2, failure_strategy="reuse"),
                           rng=random.Random(0), pool=[Problem("old", "Old question?", "Old")])

    def proposal(slot, reason):
        return SimpleNamespace(slot=slot, reason=reason, valid=not reason, problem=None,
                               question=f"Question {slot}?", target=SimpleNamespace(answer="T"))

    proposals = [proposal(0, ""), proposal(1, "length"), proposal(2, "")]
    SspLoop.assign_problems(fake, proposals, step=3)
    assert proposals[0].problem == Problem("s3-p0", "Question 0?", "T")
    assert [p.key for p in fake.pool] == ["s3-p0", "s3-p2"]  # the newest two kept
    assert proposals[1].problem in fake.pool  # the failed slot got a pooled problem
    fake.settings.failure_strategy = "skip"
    failed = proposal(4, "length")
    SspLoop.assign_problems(fake, [failed], step=4)
    assert failed.problem is None


def test_an_unbuilt_search_corpus_is_refused_before_any_step(tmp_path):
    config = validate({
        "name": "ssp-missing", "loop": "ssp", "model": {"path": "tiny-random"},
        "roles": {"proposer": {"prompt": "ssp_proposer"}, "solver": {"prompt": "ssp_solver"},
                  "judge": {"prompt": "ssp_judge"}},
        "ssp": {"search": {"corpus": "wiki-18", "corpus_cache": str(tmp_path)}},
    }, "test")
    with pytest.raises(UserError) as error:
        make_loop(config)
    assert "corpus 'wiki-18' is not built" in str(error.value)
    assert "selfplay corpus build wiki-18" in str(error.value)
