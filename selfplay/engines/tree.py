"""Token sequences packed into one prefix tree, run as one row (docs/speed.md#prefix-trees).

Many rows a model scores share their beginnings: every turn of every game repeats the system
prompt and the rules, a later turn repeats the game's history, a GRPO group repeats its prompt,
and the candidate replies of a scored move share the whole prompt. A trie over the rows' token
ids holds each shared beginning once. Its nodes, laid out in depth-first order, form one packed
row; a node attends to itself and its ancestors only (the ``ancestor mask``), and its position
id is its depth. A causal transformer's hidden state at a token depends only on the tokens
before it and their positions, so every node's hidden state is the one each row through it
would have computed alone (up to floating-point reduction order), and in a backward pass the
gradient of a shared node is the sum of what every row under it sends back — exactly what the
rows computed apart would accumulate (the loss is on completion tokens only; prompt tokens
carry none).

Attention over the packed row is dense (T² for T nodes, masked), so a tree is only worth it
while T stays moderate; ``pack_rows`` is given a node budget and callers cut micro-batches to
it. Measured on 2 CPU cores with SmolLM2-135M (docs/speed.md): the masked attention adds < 10%
over causal attention up to 1,024 nodes, where the per-token work dominates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PrefixTree:
    """Rows packed into one depth-first row of unique nodes.

    ``ids[n]`` is node n's token, ``depth[n]`` its position id, ``end[n]`` one past the last
    node of its subtree (node m is in n's subtree iff n <= m < end[n]); ``nodes[r][j]`` is the
    node of row r's token j."""

    ids: list[int]
    depth: list[int]
    end: list[int]
    nodes: list[list[int]]

    @property
    def size(self) -> int:
        return len(self.ids)

    def mask(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """[1, 1, T, T] boolean: query node q sees key node k iff k is q or an ancestor of q."""
        index = torch.arange(self.size, device=device)
        end = torch.tensor(self.end, device=device)
        seen = (index[None, :] <= index[:, None]) & (index[:, None] < end[None, :])
        return seen[None, None]

    def tensors(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """(input ids [1, T], position ids [1, T])."""
        ids = torch.tensor([self.ids], dtype=torch.long, device=device)
        positions = torch.tensor([self.depth], dtype=torch.long, device=device)
        return ids, positions


def pack_rows(rows: Sequence[Sequence[int]]) -> PrefixTree:
    """The prefix tree of ``rows`` (a row may repeat another or be a prefix of it: its tokens
    are then all shared). Rows are inserted in sorted order, so each row's new nodes follow the
    nodes it shares with the row before it, which makes the layout depth-first."""
    order = sorted(range(len(rows)), key=lambda r: tuple(rows[r]))
    ids: list[int] = []
    depth: list[int] = []
    end: list[int] = []
    nodes: list[list[int]] = [[] for _ in rows]
    path: list[int] = []  # nodes of the previous row's tokens, by depth
    previous: Sequence[int] = ()
    for r in order:
        row = rows[r]
        shared = _common_length(previous, row)
        for node in path[shared:]:  # subtrees left behind are complete
            end[node] = len(ids)
        del path[shared:]
        for position in range(shared, len(row)):
            path.append(len(ids))
            ids.append(int(row[position]))
            depth.append(position)
            end.append(-1)
        nodes[r] = path[: len(row)]
        previous = row
    for node in path:
        end[node] = len(ids)
    return PrefixTree(ids, depth, end, nodes)


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def tree_tokens(rows: Sequence[Sequence[int]]) -> int:
    """How many nodes ``pack_rows(rows)`` would have (without building it)."""
    ordered = sorted(tuple(row) for row in rows)
    total, previous = 0, ()
    for row in ordered:
        total += len(row) - _common_length(previous, row)
        previous = row
    return total


def tree_batches(rows: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
    """Indices of ``rows`` cut into groups, in the order of their tokens, whose trees hold at
    most ``budget`` nodes (a row longer than that is a group of its own)."""
    order = sorted(range(len(rows)), key=lambda r: tuple(rows[r]))
    groups: list[list[int]] = []
    nodes, previous = 0, ()
    for r in order:
        added = len(rows[r]) - _common_length(previous, rows[r])
        if groups and nodes + added <= budget:
            groups[-1].append(r)
            nodes += added
        else:
            groups.append([r])
            nodes = len(rows[r])
        previous = rows[r]
    return groups


def tree_hidden(decoder: torch.nn.Module, tree: PrefixTree, device) -> torch.Tensor:
    """The decoder's last hidden state at every node: [T, H]."""
    ids, positions = tree.tensors(device)
    out = decoder(input_ids=ids, position_ids=positions, attention_mask=tree.mask(device))
    return out.last_hidden_state[0]
