"""Shared prompt prefixes, computed once: the hf engine's counterpart of vLLM's prefix caching.

Prompts of one wave share long prefixes: a role's system text and the game's rules, a GRPO
group's prompt repeated ``group_size`` times, a game's history so far. The hf engine groups the
rows of a batch by adapter and common prefix (``group_by_prefix``), computes each group's prefix
once (one row per group) and starts every row of the group from copies of those keys/values, so
only the rows' own suffixes go through the prefill.

Prefixes computed that way are also kept in a ``PrefixStore``, a least-recently-used store
bounded in bytes and keyed by (adapter, tokens): a later wave that begins with a stored prefix
(the same rules, a longer history) starts from the stored keys/values. Keys/values of the first
``m`` tokens depend on those ``m`` tokens only (causal attention), so any stored entry serves
the tokens it shares with a new prompt. The engine empties the store whenever weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

# per layer: keys and values of one row, each (1, kv_heads, tokens, head_dim)
LayerKV = list[tuple[torch.Tensor, torch.Tensor]]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class PrefixGroup:
    """Rows of one batch (``members``, indices into it) that start with ``prefix``."""

    adapter: str
    prefix: tuple[int, ...]
    members: list[int] = field(default_factory=list)


def group_by_prefix(
    adapters: list[str], prompts: list[list[int]], min_prefix: int
) -> list[PrefixGroup]:
    """Partition rows into groups of one adapter whose common prefix is worth computing once.

    Rows are sorted by (adapter, tokens), so rows with long common prefixes are neighbours, and
    taken greedily: a row joins the open group when the tokens the group saves grow, that is when
    ``n * lcp >= (n - 1) * p`` (``n`` members sharing ``p`` tokens save ``(n - 1) * p`` token
    computations; with the newcomer they share ``lcp``). A prefix always leaves each row at least
    one token of its own: the prefill must end on it to give the first logits. Groups of one row
    get an empty prefix (nothing shared; the engine may still find one in its store).
    """
    order = sorted(range(len(prompts)), key=lambda i: (adapters[i], prompts[i]))
    groups: list[PrefixGroup] = []
    for i in order:
        ids = prompts[i]
        open_group = groups[-1] if groups else None
        if open_group is not None and open_group.adapter == adapters[i]:
            n, shared = len(open_group.members), open_group.prefix
            lcp = min(common_prefix_length(shared, ids), len(ids) - 1)
            if lcp >= min_prefix and n * lcp >= (n - 1) * len(shared):
                open_group.members.append(i)
                open_group.prefix = shared[:lcp]
                continue
        groups.append(PrefixGroup(adapters[i], tuple(ids[: len(ids) - 1]), [i]))
    for group in groups:
        if len(group.members) == 1:
            group.prefix = ()
    return groups


def kv_bytes(kv: LayerKV) -> int:
    return sum(k.nbytes + v.nbytes for k, v in kv)


class PrefixStore:
    """Keys/values of prompt prefixes, least recently used first out, at most ``budget`` bytes.

    Entries of different adapters never serve each other: an adapter changes every layer's
    keys/values. ``clear`` must be called whenever weights change (the engine does it in
    ``load_weights``, ``add_adapter`` and ``remove_adapter``).
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.nbytes = 0
        self._entries: OrderedDict[tuple[str, tuple[int, ...]], LayerKV] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, adapter: str, ids: Sequence[int]) -> tuple[LayerKV | None, int]:
        """The stored keys/values sharing the most leading tokens with ``ids``, cut to them."""
        best_key, best = None, 0
        for key in self._entries:
            if key[0] == adapter:
                shared = common_prefix_length(key[1], ids)
                if shared > best:
                    best_key, best = key, shared
        if best_key is None:
            return None, 0
        self._entries.move_to_end(best_key)
        kv = self._entries[best_key]
        return [(k[:, :, :best], v[:, :, :best]) for k, v in kv], best

    def put(self, adapter: str, ids: Sequence[int], kv: LayerKV) -> None:
        size = kv_bytes(kv)
        key = (adapter, tuple(ids))
        if size > self.budget or key in self._entries:
            return
        self._entries[key] = kv
        self.nbytes += size
        while self.nbytes > self.budget:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= kv_bytes(evicted)

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0
