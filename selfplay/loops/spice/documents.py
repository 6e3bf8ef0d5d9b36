"""SPICE's corpus side: how the documents the challenger reads are drawn (the documents
themselves: ``corpora.documents``), and the guard that drops questions copying an evaluation
item."""

from __future__ import annotations

from selfplay.core.errors import UserError
from selfplay.core.jsonl import read_rows


def document_sampler(settings, curriculum_settings):
    """The curriculum settings that choose documents: ``curriculum.sampler``, or ``learnability``
    when the legacy ``spice.sampler: near_half`` asks for documents whose questions land near
    p̂ = ½ (p̂(1 − p̂) is largest there; docs/spice.md)."""
    if settings.sampler != "near_half":
        return curriculum_settings
    if curriculum_settings.sampler not in ("uniform", "learnability"):
        raise UserError(
            f"spice.sampler: near_half is an alias of curriculum.sampler: learnability; "
            f"it conflicts with curriculum.sampler: {curriculum_settings.sampler} (drop one)"
        )
    return curriculum_settings.model_copy(update={"sampler": "learnability"})


def document_ids(documents) -> list[str]:
    """Curriculum task ids: the chunk ids (a hash of the text), ``#k`` added to a repeated one
    so that task index k is always document k."""
    ids: list[str] = []
    taken: set[str] = set()
    for k, document in enumerate(documents):
        task_id = document.id if document.id not in taken else f"{document.id}#{k}"
        taken.add(task_id)
        ids.append(task_id)
    return ids


def read_eval_questions(path: str) -> list[str]:
    """The ``question`` of every row of a local JSONL file of evaluation items."""
    questions = []
    for number, row in read_rows(path, what="spice.contamination.eval_files:"):
        if not str(row.get("question", "")).strip():
            raise UserError(f"{path}:{number}: a row needs a `question` field")
        questions.append(str(row["question"]))
    return questions


def contamination_guard(settings, eval_questions: list[str]):
    """The near-copy guard over the held-out questions and ``eval_files`` (None when off or
    when there is nothing to guard)."""
    if not settings.enabled:
        return None
    texts = eval_questions + [q for path in settings.eval_files for q in read_eval_questions(path)]
    if not texts:
        return None
    from corpora.contamination import ContaminationGuard  # MiniLM: loaded only when needed

    return ContaminationGuard(texts, threshold=settings.threshold)
