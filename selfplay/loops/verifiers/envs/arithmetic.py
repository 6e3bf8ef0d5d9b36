"""arithmetic: a single-agent verifiers v1 taskset: add two small numbers.

Written exactly as a verifiers environment package is (``vf init``'s layout): a ``TaskData``
with the gold answer, a ``Task`` whose ``@vf.reward`` scores the reply, a ``Taskset`` whose
``load`` yields the tasks, exported through ``__all__``. With no ``Env`` exported, verifiers
plays it with ``SingleAgentEnv`` (one agent, named ``agent``).
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

__all__ = ["ArithmeticTaskset"]


class ArithmeticData(vf.TaskData):
    answer: int


class ArithmeticTask(vf.Task[ArithmeticData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the last integer of the reply is the sum, else 0."""
        numbers = re.findall(r"-?\d+", trace.last_reply or "")
        return float(bool(numbers) and int(numbers[-1]) == self.data.answer)


class ArithmeticConfig(vf.TasksetConfig):
    num_tasks: int = 16
    max_operand: int = 9
    seed: int = 0


class ArithmeticTaskset(vf.Taskset[ArithmeticTask, ArithmeticConfig]):
    def load(self) -> list[ArithmeticTask]:
        rng = random.Random(self.config.seed)
        tasks = []
        for _ in range(self.config.num_tasks):
            a, b = rng.randint(0, self.config.max_operand), rng.randint(0, self.config.max_operand)
            prompt = f"What is {a} + {b}? Answer with the number only."
            data = ArithmeticData(prompt=prompt, answer=a + b)
            tasks.append(ArithmeticTask(data, self.config.task))
        return tasks
