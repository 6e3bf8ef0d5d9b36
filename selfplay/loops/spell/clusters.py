"""SPELL's curriculum over document clusters (docs/algorithms.md#spell): the corpus chunks
grouped by their source, and per cluster a memory of up to ``memory_size`` accepted
(evidence, question, answer) entries. The next questioner context holds all past evidence plus
``new_documents`` unseen ones, with the past questions as examples, so it grows each round
(the released code's spell dataset); a token budget caps it, oldest evidence first.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field


@dataclass
class Entry:
    """One accepted question of a cluster: the documents it was written from, and itself."""

    evidence: list[int]
    question: str
    answer: str


@dataclass
class Plan:
    """What one questioner prompt of a cluster reads: past evidence, then new documents."""

    cluster: int
    evidence: list[int]  # past entries' documents, oldest first
    new: list[int]  # unseen documents drawn this round
    examples: list[Entry]
    short: bool  # the cluster had fewer unseen documents than asked (or none: restarted)

    @property
    def documents(self) -> list[int]:
        return self.evidence + self.new


@dataclass
class Clusters:
    """The clusters (lists of document indices, in corpus order) and their memories."""

    names: list[str]
    members: list[list[int]]
    memory: list[list[Entry]] = field(default_factory=list)
    used: list[set[int]] = field(default_factory=list)  # documents of accepted entries, ever

    def __post_init__(self) -> None:
        self.memory = self.memory or [[] for _ in self.members]
        self.used = self.used or [set() for _ in self.members]

    @classmethod
    def by_source(cls, sources: list[str]) -> Clusters:
        """Document k joins the cluster of its source (pydoc-topics: one topic's chunks)."""
        index: dict[str, int] = {}
        members: list[list[int]] = []
        for k, source in enumerate(sources):
            if source not in index:
                index[source] = len(members)
                members.append([])
            members[index[source]].append(k)
        return cls(list(index), members)

    def plan(self, cluster: int, new_documents: int, rng: random.Random) -> Plan:
        """The next round's documents: the memory's evidence and ``new_documents`` unseen ones
        drawn at random (kept in corpus order). A cluster with fewer unseen documents than
        asked gives what it has; one with none left starts over (memory cleared)."""
        unseen = [d for d in self.members[cluster] if d not in self.used[cluster]]
        short = len(unseen) < new_documents
        if not unseen:
            self.memory[cluster], self.used[cluster] = [], set()
            unseen = list(self.members[cluster])
        new = sorted(rng.sample(unseen, min(new_documents, len(unseen))))
        entries = self.memory[cluster]
        evidence = list(dict.fromkeys(d for e in entries for d in e.evidence))
        return Plan(cluster, evidence, new, list(entries), short)

    def accept(self, plan: Plan, question: str, answer: str, memory_size: int) -> None:
        """Cache an accepted question with the new documents it was written from; the oldest
        entry goes when the memory holds ``memory_size``."""
        if memory_size == 0:
            return
        entries = self.memory[plan.cluster]
        entries.append(Entry(list(plan.new), question, answer))
        del entries[: max(len(entries) - memory_size, 0)]
        self.used[plan.cluster].update(plan.new)

    def state_dict(self) -> dict:
        return {
            "memory": [[asdict(e) for e in entries] for entries in self.memory],
            "used": [sorted(u) for u in self.used],
        }

    def load_state_dict(self, state: dict) -> None:
        self.memory = [[Entry(**e) for e in entries] for entries in state["memory"]]
        self.used = [set(u) for u in state["used"]]


def fit(documents: list[int], keep: set[int], lengths: dict[int, int], budget: int) -> list[int]:
    """The documents that fit ``budget`` tokens: others than ``keep`` dropped first, earliest
    first, then the earliest of ``keep`` (the caller cuts what still overflows)."""
    chosen = list(documents)
    for droppable in ([d for d in chosen if d not in keep], [d for d in chosen if d in keep]):
        for d in droppable:
            if sum(lengths[k] for k in chosen) <= budget or len(chosen) == 1:
                return chosen
            chosen.remove(d)
    return chosen
