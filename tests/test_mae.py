"""Multi-Agent Evolve: the judge-score parsing and the three roles' rewards against hand-computed
numbers (curricula/mae_rewards.py), TRR++ as one baseline per role, the pool, the records of an
unparsable judge reply, the config's one-line errors, the page section and the GPU plan (the
loop end to end is tests/test_golden.py's `mae` run)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from curricula.mae_rewards import (
    ProposerReward,
    extract_answer,
    extract_question,
    judge_format,
    judge_score,
    mean_judge,
    parse_scores,
    proposer_format,
    proposer_reward,
    solver_format,
    solver_reward,
)
from selfplay.analysis.metric_sections import claimed, loop_section
from selfplay.core.errors import UserError
from selfplay.loops import load_experiment, make_loop
from selfplay.loops.mae.pool import Pool
from selfplay.loops.mae.records import Answer, Judged, Question, step_metrics
from selfplay.running.plan import plan
from selfplay.types import Episode, Turn

# rewards are sums and quotients of a few decimals: exact but for the last bit of a double
TOL = 1e-12


def turn(role: str, reply: str = "", tokens: int = 1) -> Turn:
    return Turn(role, [0], [1] * tokens, [0.0] * tokens, [1] * tokens, reply)


@pytest.mark.parametrize("text, scores", [
    ("<score>7/10</score>", [0.7]),  # a fraction first
    ("<score>8.5</score> <score>3</score>", [8.5, 3.0]),  # every tag, in order
    ("<score>about 6 or 7</score>", [6.0]),  # the first integer of the tag
    ("<score>2/0</score> so 8", [8.0]),  # a tag over zero gives nothing: the last number
    ("I rate it 4 out of 10", [10.0]),  # no tag: the LAST number anywhere
    ("no tag, 3/4", [0.75]),
    ("<score>good</score>", []),  # nothing parses
])
def test_parse_scores(text: str, scores: list[float]) -> None:
    assert parse_scores(text) == scores


@pytest.mark.parametrize("text, score", [
    ("<score>7</score><score>1</score><score>1</score>", 6 / 9),  # the FIRST score: (7 − 1)/9
    ("<score>8.5</score>", 7.5 / 9),
    ("<score>1</score>", 0.0),
    ("<score>10</score>", 1.0),
    ("<score>12</score>", 1.0),  # clipped above
    ("<score>0</score>", 0.0),  # clipped below: (0 − 1)/9 < 0
    ("<score>7/10</score>", 0.0),  # a fraction is read on the 1-10 scale too: (0.7 − 1)/9 < 0
    ("the answer is fine", None),  # unparsable: skipped
])
def test_judge_score_maps_the_first_score_from_1_10(text: str, score: float | None) -> None:
    got = judge_score(text)
    assert got == score if score is None else math.isclose(got, score, abs_tol=TOL)


def test_unparsable_judge_samples_are_skipped_and_an_unscored_item_gets_half() -> None:
    assert math.isclose(mean_judge([0.5, None, 1.0]), 0.75, abs_tol=TOL)  # not (0.5+0+1)/3
    assert mean_judge([None, None]) == 0.5
    assert mean_judge([]) == 0.5


@pytest.mark.parametrize("text, solver, judge", [
    ("<answer>4</answer>", 1.0, 0.0),
    ("<answer>4</answer><answer>5</answer>", 0.5, 0.0),  # balanced, more than one
    ("<answer>4", 0.0, 0.0),  # unbalanced
    ("4", 0.0, 0.0),
    ("", 0.5, 0.5),  # an empty reply: the released code's neutral 0.5
    ("<score>1</score><score>2</score><score>3</score>", 0.0, 1.0),
    ("<score>1</score>" * 4, 0.0, 0.5),
    ("<score>1</score><score>2</score>", 0.0, 0.0),  # fewer than three
    ("<score>1</score><score>2</score><score>3", 0.0, 0.0),
])
def test_solver_and_judge_format(text: str, solver: float, judge: float) -> None:
    assert (solver_format(text), judge_format(text)) == (solver, judge)


@pytest.mark.parametrize("text, fmt", [
    ("<question>Q</question>", 1.0),
    ("<question>Q</question><type>math</type>", 1.0),  # (1 + 1)/2
    ("<question>Q</question><answer>A</answer>", 1.0),  # as many answers as questions
    ("<question>Q</question><answer>A</answer><answer>B</answer>", 0.5),  # (1 + 0)/2
    ("<question>A</question><question>B</question><type>x</type><type>y</type>", 0.5),
    ("<question>Q</question><type>x", 0.5),  # (1 + 0)/2: an unclosed type
    ("<question>Q", 0.0),
])
def test_proposer_format_averages_the_tags_present(text: str, fmt: float) -> None:
    assert math.isclose(proposer_format(text), fmt, abs_tol=TOL)


def test_proposer_reward_admits_at_the_threshold() -> None:
    # q = 0.8 ≥ 0.7: (q + d + f)/3 = (0.8 + 0.25 + 1)/3
    admitted = proposer_reward(True, 0.8, 0.25, 1.0)
    assert admitted.admitted and math.isclose(admitted.reward, 2.05 / 3, abs_tol=TOL)
    # q = 0.6 < 0.7: d does not count, (0.6 + 0.5)/3
    low = proposer_reward(True, 0.6, 0.25, 0.5)
    assert not low.admitted and math.isclose(low.reward, 1.1 / 3, abs_tol=TOL)
    assert proposer_reward(True, 0.7, 0.0, 0.0).admitted  # q ≥ threshold, not >
    assert not proposer_reward(True, 0.7, 0.0, 0.0, threshold=0.71).admitted
    assert proposer_reward(False, 0.9, 0.9, 1.0) == ProposerReward(0.0, False)  # no question
    with pytest.raises(ValueError, match="difficulty"):
        proposer_reward(True, 0.8, None, 1.0)


def test_solver_reward_is_half_judge_half_format() -> None:
    assert math.isclose(solver_reward(0.6, "<answer>x</answer>"), 0.3 + 0.5, abs_tol=TOL)
    assert math.isclose(solver_reward(0.6, "x"), 0.3, abs_tol=TOL)


def test_question_and_answer_extraction() -> None:
    reply = "<question>one?</question> then <question> two? </question>"
    assert extract_question(reply) == "two?"  # the last, stripped
    assert extract_question("<question></question>") is None  # empty
    assert extract_question("<question>What is 2 + 2") is None  # unclosed: strict
    assert extract_question("<question>What is 2 + 2", lenient=True) == "What is 2 + 2"
    assert extract_question("<question>Why?<answer>x", lenient=True) == "Why?"
    assert extract_question("no tags", lenient=True) is None
    assert extract_answer("so <answer>1</answer> or <answer> 2 </answer>") == "2"
    assert extract_answer("  just 3 ") == "just 3"  # no tag: the whole reply


def test_unparsable_judge_replies_are_counted_never_fatal() -> None:
    judged = Judged([turn("judge", "<score>7</score>"), turn("judge", "no idea"),
                     turn("judge", "<score>10</score>")])
    assert judged.scores[1] is None and not judged.unscored
    assert math.isclose(judged.score, (6 / 9 + 1.0) / 2, abs_tol=TOL)  # the None is skipped
    silent = Judged([turn("judge", "hmm"), turn("judge", "")])
    assert silent.unscored and silent.score == 0.5
    proposal = Question(task_id="q0", turn=turn("proposer", "<question>Q</question>"),
                        question="Q", reference="", judged=judged)
    answer = Answer(turn("solver", "<answer>4</answer>"), "Q", silent, reward=0.75)
    metrics = step_metrics([proposal], [answer], [*judged.turns, *silent.turns], 5, 13)
    assert math.isclose(metrics["mae/judge_parse_rate"], 2 / 5, abs_tol=TOL)
    assert metrics["mae/unscored_item_share"] == 0.5  # of the two items judged
    assert metrics["mae/judge_format_rate"] == 0.0 and metrics["mae/pool_size"] == 13.0


def test_trr_is_one_whitened_batch_per_role() -> None:
    loop = make_loop(load_experiment("mae-cpu", ["model.path=tiny-random"]))

    def episode(role: str, reward: float, tokens: int) -> Episode:
        return Episode(loop="mae", env="general", turns=[turn(role, tokens=tokens)],
                       rewards={role: reward}, group_id=role)

    episodes = [episode("proposer", 0.2, 1), episode("proposer", 0.8, 3),
                episode("solver", 1.0, 2), episode("solver", 0.5, 2),
                episode("judge", 1.0, 1), episode("judge", 0.0, 1), episode("judge", 0.0, 1)]
    got = [s.advantage for s in loop.samples(episodes)]
    # REINFORCE++ whitened over each role's tokens: proposer μ = (0.2 + 3·0.8)/4 = 0.65,
    # var = (0.45² + 3·0.15²)/3 = 0.09; solver μ = 0.75, var = 4·0.0625/3; judge μ = 1/3,
    # var = (4/9 + 1/9 + 1/9)/2 = 1/3
    want = [-1.5, 0.5, 0.25 / math.sqrt(1 / 12), -0.25 / math.sqrt(1 / 12),
            (2 / 3) / math.sqrt(1 / 3), (-1 / 3) / math.sqrt(1 / 3), (-1 / 3) / math.sqrt(1 / 3)]
    # the 1e-8 under the root moves an advantage by < 1e-6 relative at these variances
    assert all(math.isclose(g, w, rel_tol=1e-6) for g, w in zip(got, want, strict=True)), got


def test_pool_keeps_its_seeds_and_caps_the_admitted() -> None:
    pool = Pool(["s1", "s2"], cap=2)
    for question in ("a", "b", "c"):
        pool.add(question)
    assert pool.questions == ["s1", "s2", "b", "c"] and len(pool) == 4  # "a" left, seeds stay
    again = Pool(["s1", "s2"], cap=2)
    again.load_state_dict(pool.state_dict())
    assert again.questions == pool.questions
    assert set(pool.sample(20, random.Random(0))) <= set(pool.questions)


def test_shipped_seed_questions_fill_the_pool() -> None:
    loop = make_loop(load_experiment("mae-cpu", ["model.path=tiny-random"]))
    assert len(loop.pool) == 12 and loop.pool.questions[0] == "What is 7 + 5?"
    assert loop.settings.trained_families() == set()  # no reasoning-gym family is trained on


@pytest.mark.parametrize("rows, error", [
    (None, "does not exist"),
    ([{"prompt": "x"}], ":1: field `question` must be a non-empty string"),
    ([{"question": "ok"}, {"question": "  "}], ":2: field `question`"),
    ([], "holds no question"),
])
def test_bad_seed_questions_are_one_line(tmp_path: Path, rows, error: str) -> None:
    path = tmp_path / "seeds.jsonl"
    if rows is not None:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(UserError, match=error):  # at the config's check or the loop's
        make_loop(load_experiment("mae-cpu", ["model.path=tiny-random",
                                              f"mae.seed_questions={path}"]))


def test_a_judge_prompt_must_not_read_other_fields(tmp_path: Path) -> None:
    prompt = tmp_path / "judge.yaml"
    prompt.write_text("name: judge\nuser: '{{ question }} {{ reference }}'\n")
    config = load_experiment("mae-cpu", ["model.path=tiny-random", f"roles.judge.prompt={prompt}"])
    with pytest.raises(UserError, match="reference"):
        make_loop(config)


def test_mae_metrics_get_their_own_section() -> None:
    rows = [{"step": 0, "mae/judge_parse_rate": 0.5, "reward/judge": 0.0},
            {"step": 1, "mae/judge_parse_rate": 0.75}]
    (table,) = loop_section(SimpleNamespace(loop="mae", training_rows=rows)).tables
    assert {row[0]: (row[1], row[2]) for row in table.rows} == {
        "mae/judge_parse_rate": ("0.500", "0.750")}
    assert claimed("mae/judge_parse_rate", "mae") and not claimed("mae/judge_parse_rate", "azr")


def test_gpu_experiment_fits_8_gpus() -> None:
    config = load_experiment("mae")
    assert config.train.lr == 1e-6 and config.train.kl_coef == 0.0
    s = config.settings
    assert s.proposals_per_step == s.solves_per_step == s.judges_per_step == 128
    assert (s.judge_samples, s.include_references, s.admit_threshold) == (5, 0.5, 0.7)
    assert plan(config, gpus=8, gpu_memory_gib=80).fits
