"""CURE's config section (``cure:``; docs/cure.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from selfplay.config import InputFile
from selfplay.loops.base import LoopSettings


class CureSettings(LoopSettings):
    """``codes`` programs and ``tests`` unit tests per problem, every program on every test."""

    renamed = {f"{role}_{key}": f"roles.{role}.{key}" for role in ("coder", "tester")
               for key in ("max_tokens", "stop")}

    # a JSONL file of problems (curricula/unit_tests.py: id, statement, reference, tests);
    # None: the problems shipped with the package (curricula/data/cure_problems.jsonl)
    problems: InputFile | None = None
    max_problems: int | None = Field(None, ge=1)  # only the file's first N problems (None: all)
    problems_per_step: int = Field(4, ge=1)
    order: Literal["shuffle", "file"] = "shuffle"  # file: in the file's order (easy first)
    codes: int = Field(16, ge=2)  # n programs per problem (the released code's k_code)
    tests: int = Field(16, ge=2)  # m generated unit tests per problem (k_case)
    max_gt_tests: int = Field(8, ge=1)  # t ≤ this many ground-truth tests per problem
    # the unit-test reward: paper (counts) or code (shares, ±1 when every program is right)
    reward_form: Literal["paper", "code"] = "paper"
    post_stage: bool = False  # {1 if all wrong programs fail, else 0} / {−1 if any passes}
    time_limit_s: float = Field(1.0, gt=0)  # per program run (one program on one test)
    pool_size: int = Field(2, ge=1)  # sandbox workers
