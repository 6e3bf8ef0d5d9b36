"""MAE's question pool: the seed questions, then every proposed question the judge scored at
or above the admission threshold (newest last, ``cap`` kept; seeds never leave)."""

from __future__ import annotations

import random
from pathlib import Path

import curricula
from selfplay.core.errors import UserError
from selfplay.core.jsonl import read_rows

DEFAULT_QUESTIONS = Path(curricula.__file__).parent / "data" / "mae_questions.jsonl"


def load_questions(path: str | Path) -> list[str]:
    """The ``question`` of every row of a JSONL file; a row without a non-empty string
    ``question``, or a file without rows, is one line naming the file (and the line)."""
    questions = []
    for number, row in read_rows(path, "mae.seed_questions file"):
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise UserError(f"{path}:{number}: field `question` must be a non-empty string")
        questions.append(question.strip())
    if not questions:
        raise UserError(f"mae.seed_questions: {path} holds no question")
    return questions


class Pool:
    """The questions the solver trains on and proposers are shown as references."""

    def __init__(self, seeds: list[str], cap: int) -> None:
        self.seeds = list(seeds)
        self.admitted: list[str] = []
        self.cap = cap

    @property
    def questions(self) -> list[str]:
        return self.seeds + self.admitted

    def add(self, question: str) -> None:
        self.admitted.append(question)
        del self.admitted[: max(0, len(self.admitted) - self.cap)]

    def sample(self, count: int, rng: random.Random) -> list[str]:
        """``count`` questions drawn uniformly with replacement."""
        pool = self.questions
        return [pool[rng.randrange(len(pool))] for _ in range(count)]

    def __len__(self) -> int:
        return len(self.seeds) + len(self.admitted)

    def state_dict(self) -> dict:
        return {"admitted": list(self.admitted)}

    def load_state_dict(self, state: dict) -> None:
        self.admitted = list(state["admitted"])
