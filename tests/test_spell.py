"""SPELL's curriculum and config (selfplay/loops/spell/clusters.py, settings.py): clusters by
source, the context that grows by the new documents of each round, the memory of three
accepted questions, short clusters counted (never a crash), and one-line config errors.
The loop end to end, on the tiny model and a real corpus, is tests/test_golden.py's ``spell``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from selfplay.core.errors import UserError
from selfplay.loops import load_experiment
from selfplay.loops.spell.clusters import Clusters, fit

GOLDEN = Path(__file__).parent / "golden" / "spell.json"


def clusters() -> Clusters:
    # documents 0..6: topic a holds 0, 2, 3, 5; topic b holds 1, 4; topic c holds 6
    return Clusters.by_source(["a", "b", "a", "a", "b", "a", "c"])


def test_clusters_are_the_documents_of_one_source_in_corpus_order() -> None:
    c = clusters()
    assert c.names == ["a", "b", "c"]
    assert c.members == [[0, 2, 3, 5], [1, 4], [6]]


def test_the_context_grows_by_the_new_documents_of_each_accepted_round() -> None:
    c, rng = clusters(), random.Random(0)
    first = c.plan(0, 2, rng)
    assert first.evidence == [] and len(first.new) == 2 and not first.short
    c.accept(first, "Q1", "A1", memory_size=3)
    second = c.plan(0, 2, rng)
    assert second.evidence == first.new  # past evidence first, then two unseen documents
    assert sorted(second.new) == sorted(set(c.members[0]) - set(first.new))
    assert [(e.question, e.answer) for e in second.examples] == [("Q1", "A1")]
    c.accept(second, "Q2", "A2", memory_size=3)
    third = c.plan(0, 2, rng)  # every document used: the cluster starts over, counted short
    assert third.short and third.evidence == [] and len(third.new) == 2 and c.memory[0] == []


def test_a_rejected_round_leaves_its_documents_unseen() -> None:
    c, rng = clusters(), random.Random(1)
    c.plan(1, 1, rng)  # never accepted
    assert c.used[1] == set() and c.memory[1] == []


def test_the_memory_keeps_the_three_newest_entries() -> None:
    c, rng = Clusters.by_source(["a"] * 5), random.Random(2)
    for k in range(4):
        c.accept(c.plan(0, 1, rng), f"Q{k}", f"A{k}", memory_size=3)
    assert [e.question for e in c.memory[0]] == ["Q1", "Q2", "Q3"]
    assert len(c.used[0]) == 4  # the evicted entry's document stays used


def test_a_cluster_shorter_than_asked_gives_what_it_has_and_is_counted() -> None:
    c, rng = clusters(), random.Random(3)
    plan = c.plan(2, 5, rng)  # topic c holds one document; five were asked for
    assert plan.new == [6] and plan.short
    c.accept(plan, "Q", "A", memory_size=3)
    again = c.plan(2, 1, rng)  # nothing unseen: the cluster starts over, counted short
    assert again.short and again.new == [6] and again.evidence == [] and c.memory[2] == []


def test_fit_drops_other_documents_first_then_the_oldest_kept() -> None:
    lengths = {0: 10, 1: 10, 2: 10, 3: 10}
    assert fit([0, 1, 2, 3], {2, 3}, lengths, 40) == [0, 1, 2, 3]
    assert fit([0, 1, 2, 3], {2, 3}, lengths, 25) == [2, 3]
    assert fit([0, 1, 2, 3], {2, 3}, lengths, 15) == [3]
    assert fit([0, 1, 2, 3], {0}, lengths, 5) == [0]  # one document left: the caller cuts it


def test_memory_survives_a_checkpoint() -> None:
    c, rng = clusters(), random.Random(4)
    c.accept(c.plan(0, 2, rng), "Q", "A", memory_size=3)
    restored = clusters()
    restored.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert restored.memory == c.memory and restored.used == c.used


def test_the_context_budget_grows_by_the_schedule_up_to_its_ceiling() -> None:
    s = load_experiment("spell-cpu").settings
    assert [s.context_budget(step) for step in (0, 1, 6, 100)] == [128, 144, 224, 224]


@pytest.mark.parametrize(("override", "message"), [
    ("spell.responder_context=none", "grounding_filter needs responder_context: documents"),
    ("spell.new_documents=0", "spell.new_documents"),
    ("spell.questioner_reward=cubic", "spell.questioner_reward"),
    ("spell.questioner_reward=reverse", "'reverse' is now 'learnability'"),
    ("spell.responder_samples=4", "'spell.responder_samples' is now 'spell.solver_samples'"),
])
def test_bad_settings_are_one_line_errors(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as error:
        load_experiment("spell-cpu", [override])
    assert "\n" not in str(error.value)


def test_the_golden_run_counts_short_clusters_instead_of_failing() -> None:
    """The golden config asks for more new documents than some pydoc-few topics hold."""
    metrics = json.loads(GOLDEN.read_text())["metrics"]
    assert sum(row.get("spell/short_documents", 0) for row in metrics) > 0


def test_the_held_out_evaluation_answers_as_the_responder() -> None:
    from selfplay.evaluation.evaluate import solver_role

    assert solver_role(load_experiment("spell-cpu")) == "responder"
    assert load_experiment("spell-cpu").settings.trained_families() == set()  # corpora only
