"""The strategies a SPIRAL run measured, in order: one row of ``strategies.jsonl`` per game and
evaluation (``spiral.eval_exploitability``), and the running average policy of each game over
them (``eval/exploitability/<game>/average``; docs/algorithms.md#the-average-policy).

Self-play's last policy can circle around an equilibrium while the average of the policies it
went through converges (fictitious play). The average here weights every measurement alike,
each by its own reach at every state (``selfplay.stats.average_policy``).

What a checkpoint keeps is exact on resume: a measurement is *settled* (folded into the saved
sums) once the step it was made at has been trained (``settle``, from the loop's
``after_update``); one made later (the final evaluation, or an asynchronous run's producer
ahead of the checkpoint) stays pending, is not saved, and is redone by a resumed run, which
also drops its row from ``strategies.jsonl`` (the runner truncates the loop's ``eval_files``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from selfplay.stats.average_policy import Average
from selfplay.stats.exploitability import StateCounts, exploitability

STRATEGIES = "strategies.jsonl"


@dataclass
class Measured:
    """One game's strategy as one evaluation measured it."""

    step: int
    hands: int  # training games played before it
    game: str
    kwargs: dict
    measure: str  # "sampled" (replies counted) or "scored" (each move's probability)
    states: list[StateCounts]

    @property
    def game_key(self) -> str:
        """The game with its arguments: what an average may mix."""
        return game_key(self.game, self.kwargs)

    def row(self) -> dict:
        """Its row of ``strategies.jsonl`` (docs/run-folder.md)."""
        return {"step": self.step, "hands": self.hands, "game": self.game,
                "kwargs": self.kwargs, "measure": self.measure,
                "states": [{"key": s.key, "player": s.player, "actions": s.actions,
                            "names": s.names, "counts": s.counts, "invalid": s.invalid}
                           for s in self.states]}

    @classmethod
    def from_row(cls, row: dict) -> Measured:
        return cls(int(row["step"]), int(row["hands"]), row["game"], row.get("kwargs") or {},
                   row["measure"],
                   [StateCounts(s["key"], int(s["player"]), list(s["actions"]), list(s["names"]),
                                [float(c) for c in s["counts"]], float(s["invalid"]))
                    for s in row["states"]])


def game_key(game_id: str, kwargs: dict | None) -> str:
    return f"{game_id} {json.dumps(kwargs, sort_keys=True)}" if kwargs else game_id


class PendingAverages:
    """Average policies per game, each step's strategies pending until that step's update is
    done (``settle``): a checkpoint holds exactly the steps it has trained on."""

    def __init__(self) -> None:
        self.settled: dict[str, Average] = {}
        self.pending: list[tuple[int, str, str, list[StateCounts]]] = []  # step, key, game
        self._lock = threading.Lock()

    def hold(self, step: int, key: str, game_string: str, states: list[StateCounts]) -> None:
        """Step ``step``'s strategies of game ``key``, pending until that step settles."""
        with self._lock:
            self.pending.append((step, key, game_string, states))

    def average(self, key: str, before: int | None = None) -> Average | None:
        """The average of game ``key``'s settled strategies and its pending ones (those of
        steps before ``before`` only, if given); None when there is none."""
        with self._lock:
            settled = self.settled.get(key)
            average = settled.copy() if settled is not None else None
            for step, game_key, game_string, states in self.pending:
                if game_key == key and (before is None or step < before):
                    average = average or Average(game_string)
                    average.add(states)
        return average

    def settle(self, step: int) -> None:
        """Fold the strategies of ``step`` and earlier into the saved sums."""
        with self._lock:
            later = []
            for item in self.pending:
                if item[0] > step:
                    later.append(item)
                    continue
                _, key, game_string, states = item
                self.settled.setdefault(key, Average(game_string)).add(states)
            self.pending = later

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {key: average.state_dict() for key, average in self.settled.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.settled = {key: Average.from_state_dict(s) for key, s in state.items()}
            self.pending = []


class StrategyHistory(PendingAverages):
    """Measured strategies: rows not yet written, measurements not yet settled, and the settled
    running sums per game (the part a checkpoint saves). An asynchronous run measures on its
    producer thread and settles on the learner's: the lock keeps the two apart."""

    def __init__(self) -> None:
        super().__init__()
        self.unwritten: list[dict] = []

    def add(self, measured: Measured, spiel_game) -> dict[str, float]:
        """Record one measurement; return the exploitability of its game's average policy over
        every measurement so far, this one included (``<prefix>/average``), and the training
        games played before it (``<prefix>/hands``), under ``eval/exploitability/<game>``."""
        self.hold(measured.step, measured.game_key, str(spiel_game), measured.states)
        with self._lock:
            self.unwritten.append(measured.row())
        average = self.average(measured.game_key)
        prefix = f"eval/exploitability/{measured.game}"
        return {f"{prefix}/average": exploitability(spiel_game, average.states()),
                f"{prefix}/hands": float(measured.hands)}

    def take_rows(self) -> list[dict]:
        """The rows measured since the last call (for ``strategies.jsonl``)."""
        with self._lock:
            rows, self.unwritten = self.unwritten, []
        return rows

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with self._lock:
            self.unwritten = []
