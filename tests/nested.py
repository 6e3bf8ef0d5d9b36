"""Where two nested JSON values (a run's essence: its metrics, episodes and tasks) differ, for
the golden runs and the fault tests' resumed runs, each with its own rule for a leaf."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (expected leaf, actual leaf, the keys and indices above them) -> whether they count as equal
SameLeaf = Callable[[Any, Any, tuple], bool]


def differences(expected: Any, actual: Any, same: SameLeaf, path: tuple = ()) -> list[str]:
    """Every place where the two differ: a dict's keys, a list's length, a leaf ``same``
    rejects; each as ``<where>: <expected> → <actual>``."""
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = [f"{where}: keys {sorted(set(expected) ^ set(actual))}"] if set(expected) != set(
            actual) else []
        for key in sorted(set(expected) & set(actual)):
            found += differences(expected[key], actual[key], same, (*path, key))
        return found
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} items, now {len(actual)}"]
        return [d for k, (e, a) in enumerate(zip(expected, actual, strict=True))
                for d in differences(e, a, same, (*path, k))]
    return [] if same(expected, actual, path) else [f"{where}: {expected!r} → {actual!r}"]
