"""Decode-step pieces for the hf engine that plug into transformers (imported lazily by
``selfplay.engines.hf``, which stays cheap to import): a preallocated KV cache whose finished
rows can be dropped, and an sdpa variant for one-token grouped-query attention steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

DECODE_ATTENTION = "selfplay_sdpa"  # sdpa, with GQA decode steps that never copy the KV cache


def grouped_decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa, except for one-token steps of grouped-query attention.

    Stock sdpa gets a padding mask at every decode step, and with a mask it expands the cached
    keys and values to one copy per query head (``repeat_kv``): a copy of the whole cache per
    layer per step. Query head ``h`` reads KV head ``h // groups`` (repeat_kv's layout), so for
    a single query position the ``groups`` heads sharing a KV head can instead be stacked as
    ``groups`` query positions of that KV head: the same softmax per (row, head), no copy.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, head_dim = query.shape
    mask_ok = attention_mask is None or (attention_mask.dim() == 4 and attention_mask.shape[1] == 1)
    extras = kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
    if q_len != 1 or groups == 1 or dropout > 0.0 or not mask_ok or extras:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    stacked = query.view(batch, heads // groups, groups, head_dim)
    # the (batch, 1, 1, kv) padding mask broadcasts over the stacked positions; a single query
    # position needs no causal mask
    out = F.scaled_dot_product_attention(
        stacked, key, value, attn_mask=attention_mask, scale=scaling, is_causal=False
    )
    # reshape, not view: CUDA kernels may return the heads in another memory layout
    return out.reshape(batch, 1, heads, head_dim), None  # (batch, q_len, heads, head_dim)


AttentionInterface.register(DECODE_ATTENTION, grouped_decode_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(DECODE_ATTENTION, sdpa_mask)


class PreallocatedLayer(DynamicLayer):
    """One layer's KV cache in buffers sized for the whole batch when it is first written.

    ``DynamicLayer`` appends each token with ``torch.cat``, copying the whole cache every step
    (~13% of decode time); here a step writes one slice and hands attention a view. Dropping
    finished rows compacts the live rows into the front of the same buffers.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity  # tokens per row: prompt width + the longest completion
        self.length = 0
        self._keys = self._values = torch.empty(0)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        batch, heads, _, head_dim = key_states.shape
        self._keys = key_states.new_empty((batch, heads, self.capacity, head_dim))
        self._values = value_states.new_empty(
            (batch, value_states.shape[1], self.capacity, value_states.shape[-1])
        )
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache holds {self.capacity} tokens per row, {end} needed")
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def preload(
        self, batch: int, width: int, rows: list[tuple[int, torch.Tensor, torch.Tensor]]
    ) -> None:
        """Start holding ``width`` tokens per row: row ``i``'s past keys/values right-aligned
        in slots ``[width - len, width)``. Every other slot is zero, not garbage: the caller masks
        it, but a masked score is added to -inf, and NaN + -inf stays NaN."""
        keys, values = rows[0][1], rows[0][2]
        self.dtype, self.device = keys.dtype, keys.device
        self._keys = keys.new_zeros((batch, keys.shape[1], self.capacity, keys.shape[-1]))
        self._values = values.new_zeros((batch, values.shape[1], self.capacity, values.shape[-1]))
        for i, row_keys, row_values in rows:
            self._keys[i, :, width - row_keys.shape[-2] : width] = row_keys[0]
            self._values[i, :, width - row_values.shape[-2] : width] = row_values[0]
        self.length = width
        self.keys, self.values = self._keys[:, :, :width], self._values[:, :, :width]
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return self.length

    def truncate(self, length: int) -> None:
        """Forget every slot from ``length`` on (they are written over by the next update)."""
        self.length = min(self.length, length)
        self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]

    def reset(self) -> None:
        super().reset()  # drops the views and marks the layer uninitialized
        self.length = 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep rows ``indices`` (in that order): gather them into the buffers' first rows."""
        rows, end = len(indices), self.length
        self._keys[:rows, :, :end] = self._keys[indices, :, :end]  # the gather copies first
        self._values[:rows, :, :end] = self._values[indices, :, :end]
        self._keys, self._values = self._keys[:rows], self._values[:rows]
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]


def preallocated_cache(num_layers: int, capacity: int) -> Cache:
    """A cache for ``num_layers`` layers holding ``capacity`` tokens per row."""
    return Cache(layers=[PreallocatedLayer(capacity) for _ in range(num_layers)])
