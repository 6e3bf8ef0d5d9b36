"""A simulated student for comparing samplers without a model (docs/algorithms.md#samplers).

The student is a Rasch model (item response theory; Rasch 1960): task i has a hidden difficulty
d_i and a family f_i, the student an ability θ_f per family, and it solves task i with
probability p_i = σ(θ_f − d_i). Practising task i (training on its group) raises θ_f by
η·p_i(1 − p_i): most learning near p = ½ and little on tasks far too easy or far too hard, the
"zone of proximal development" that Teacher-Student Curriculum Learning (Matiisen et al. 2017),
ALP-GMM (Portelas et al. 2019) and Prioritized Level Replay (Jiang et al. 2021) build on.
Optionally the student forgets: θ_f ← θ_f − λ per step in which family f was not practised.

The sampler never sees d_i or θ: only the family, a difficulty *level* label (the tasks of a
level have difficulty base_f + spacing·level + noise, as a generator's "digits" or "terms"
setting orders its items without pinning them), and the graded groups: G Bernoulli(p_i)
answers per task drawn. Mastery = the mean p over a held-out set of tasks drawn from the same
distribution; the figure of merit is the number of training steps until it reaches a target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curricula.curriculum import Curriculum, Group


@dataclass
class StudentSettings:
    families: int = 4
    levels: int = 6
    items_per_level: int = 40  # training tasks per family × level
    heldout_per_level: int = 25
    family_offset: float = 0.5  # family f's level 0 sits at f·offset
    level_spacing: float = 1.5
    item_noise: float = 0.5  # spread of difficulties within a level
    ability0: float = 0.0
    eta: float = 0.1  # learning rate of the ability
    forgetting: float = 0.0  # λ per step unpractised
    batch: int = 16  # tasks per step
    group: int = 8  # answers per task (G)
    target: float = 0.8  # mastery: mean p over the held-out tasks
    max_steps: int = 1500


@dataclass
class TaskSet:
    family: np.ndarray
    level: np.ndarray
    difficulty: np.ndarray


def make_tasks(settings: StudentSettings, per_level: int, rng: np.random.Generator) -> TaskSet:
    families, levels = np.meshgrid(
        np.arange(settings.families), np.arange(settings.levels), indexing="ij"
    )
    family = np.repeat(families.ravel(), per_level)
    level = np.repeat(levels.ravel(), per_level)
    difficulty = (
        family * settings.family_offset
        + level * settings.level_spacing
        + rng.normal(0.0, settings.item_noise, len(family))
    )
    return TaskSet(family, level, difficulty)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class StudentRun:
    steps_to_mastery: int | None  # None: not within max_steps
    mastery: list[float]  # held-out mastery before each step
    effective_ratio: float  # share of drawn groups with 0 < correct < G (until mastery)
    groups_drawn: int  # groups generated until mastery (DAPO draws more per step)


class Student:
    """The Rasch student: abilities per family, learning by η·p(1 − p) per practised task."""

    def __init__(self, settings: StudentSettings, seed: int) -> None:
        self.settings = settings
        rng = np.random.default_rng(seed)
        self.train = make_tasks(settings, settings.items_per_level, rng)
        self.heldout = make_tasks(settings, settings.heldout_per_level, rng)
        self.ability = np.full(settings.families, settings.ability0)
        self.rng = np.random.default_rng(seed + 1)

    def p(self, tasks: TaskSet, index: np.ndarray | slice = slice(None)) -> np.ndarray:
        return sigmoid(self.ability[tasks.family[index]] - tasks.difficulty[index])

    def mastery(self) -> float:
        return float(self.p(self.heldout).mean())

    def answer(self, indices: np.ndarray) -> np.ndarray:
        """Successes out of G for each task: G Bernoulli(p) answers."""
        return self.rng.binomial(self.settings.group, self.p(self.train, indices))

    def practise(self, indices: np.ndarray) -> None:
        p = self.p(self.train, indices)
        np.add.at(self.ability, self.train.family[indices], self.settings.eta * p * (1 - p))
        if self.settings.forgetting:
            idle = np.ones(self.settings.families, bool)
            idle[self.train.family[indices]] = False
            self.ability[idle] -= self.settings.forgetting


def simulate(curriculum_settings, settings: StudentSettings, seed: int) -> StudentRun:
    """Train one student with one sampler until mastery (or ``max_steps``)."""
    student = Student(settings, seed)
    curriculum = Curriculum(curriculum_settings, seed=seed)
    ids = [
        f"f{f}/L{lv}#{i}"
        for i, (f, lv) in enumerate(zip(student.train.family, student.train.level, strict=True))
    ]
    curriculum.buffer.add_many(
        ids, [f"f{f}" for f in student.train.family], student.train.level.astype(float).tolist()
    )
    G = settings.group
    drawn = effective = 0
    mastery: list[float] = []

    def play(indices: np.ndarray) -> list[Group]:
        successes = student.answer(indices)
        return [
            Group(int(i), int(k), G, [1.0] * int(k) + [0.0] * (G - int(k)))
            for i, k in zip(indices, successes, strict=True)
        ]

    for step in range(settings.max_steps):
        mastery.append(student.mastery())
        if mastery[-1] >= settings.target:
            return StudentRun(step, mastery, effective / max(drawn, 1), drawn)
        kept: list[Group] = []
        tasks = curriculum.draw(settings.batch, step)
        while len(tasks):
            kept += curriculum.report(play(tasks), step)
            tasks = curriculum.redraw(settings.batch - len(kept), step)
        stats = curriculum.metrics(step)
        drawn += int(stats["curriculum/drawn_groups"])
        effective += round(stats["curriculum/effective_ratio"] * stats["curriculum/drawn_groups"])
        if kept:
            student.practise(np.asarray([g.task for g in kept]))
    mastery.append(student.mastery())
    return StudentRun(None, mastery, effective / max(drawn, 1), drawn)
