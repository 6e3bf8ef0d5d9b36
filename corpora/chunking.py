"""Token-aware chunking with overlap: windows of at most ``chunk_tokens`` model tokens, each one
starting ``overlap_tokens`` before the previous one ended.

A window that would cut a document mid-sentence ends instead at the last paragraph, sentence or
line end in its final quarter, so chunks read as whole passages; the overlap stays exact in
tokens.
Chunk text is a verbatim slice of the cleaned document (found through the tokenizer's character
offsets), so a sentence copied from a document is found again word for word.
"""

from __future__ import annotations

from dataclasses import dataclass

SNAP_FRACTION = 0.25  # how far back from a window's end to look for a sentence or line end


@dataclass(frozen=True)
class Span:
    """One chunk of a document: tokens [token_start, token_end) and the text they cover."""

    token_start: int
    token_end: int
    text: str

    @property
    def n_tokens(self) -> int:
        return self.token_end - self.token_start


def chunk_text(text: str, tokenizer, chunk_tokens: int, overlap_tokens: int) -> list[Span]:
    """Split ``text`` into overlapping token windows (see the module docstring)."""
    if overlap_tokens >= chunk_tokens:
        raise ValueError("overlap_tokens must be below chunk_tokens")
    offsets = token_offsets(text, tokenizer)
    n = len(offsets)
    spans: list[Span] = []
    start = 0
    while start < n:
        end = min(start + chunk_tokens, n)
        if end < n:
            end = _snap_end(text, offsets, start, end, overlap_tokens)
        piece = text[offsets[start][0] : offsets[end - 1][1]].strip()
        spans.append(Span(start, end, piece))
        if end == n:
            break
        start = end - overlap_tokens
    return spans


def token_offsets(text: str, tokenizer) -> list[tuple[int, int]]:
    """Character offsets of each token of ``text`` (no special tokens)."""
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return [tuple(pair) for pair in encoding["offset_mapping"]]


def _snap_end(
    text: str, offsets: list[tuple[int, int]], start: int, end: int, overlap_tokens: int
) -> int:
    """The last token boundary in the window's final quarter that ends a paragraph; failing
    that, a sentence; failing that, a line; ``end`` itself when there is none. Never so early
    that the next window would not advance past this one's overlap."""
    earliest = max(start + overlap_tokens + 1, end - int((end - start) * SNAP_FRACTION))
    candidates = range(end, earliest - 1, -1)
    for ends_here in (_ends_paragraph, _ends_sentence, _ends_line):
        for boundary in candidates:
            if ends_here(text, offsets[boundary - 1][1]):
                return boundary
    return end


def _ends_paragraph(text: str, at: int) -> bool:
    return text[at : at + 2] == "\n\n"


def _ends_sentence(text: str, at: int) -> bool:
    return text[at - 1 : at] in (".", "!", "?") and text[at : at + 1] in (" ", "\n")


def _ends_line(text: str, at: int) -> bool:
    return text[at : at + 1] == "\n"
