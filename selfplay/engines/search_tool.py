"""The search tool (docs/tools.md#search): the model searches a built corpus while it answers.

Search Self-Play's format (arXiv 2510.18821): the model writes ``<search>query</search>``;
generation stops on ``</search>``, the corpus's FAISS index returns the top-k chunks for the
query, they are appended as ``<information>…</information>`` and generation resumes. It is the
Python tool's protocol (``selfplay.engines.tools.multi_turn_rollout``): one Turn for the whole
exchange, the model's tokens trained on (``loss_mask`` 1), the retrieved text only conditioned
on (``loss_mask`` 0, engine log-prob 0.0), the exact token ids kept.

A search is a read-only lookup in an index this process loaded, so it runs in-process, not in
the sandbox: the model's query is embedded as text and never executed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from selfplay.config import Strict
from selfplay.core.errors import UserError
from selfplay.engines.tools import TRUNCATION_MARKER, ToolRollout, multi_turn_rollout
from selfplay.types import Request

OPEN, STOP = "<search>", "</search>"
INFO_OPEN, INFO_CLOSE = "<information>", "</information>\n"
NO_QUERY = "(no query: write <search>your query</search>)\n"
REPEATED = "(this query was already searched; try another one)\n"
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)


class SearchSettings(Strict):
    """The search tool of a loop's settings (``ssp.search``)."""

    corpus: str | None = None  # None: corpora.DEFAULT_CORPUS (built on first use)
    corpus_cache: str | None = None  # None: the corpora package's cache folder
    top_k: int = Field(3, ge=1)  # chunks per search (SSP's search_tool_config: 3)
    max_searches: int = Field(4, ge=1)  # per episode; another <search> ends the rollout
    max_observation_tokens: int = Field(512, ge=16)  # the <information> body is cut to this
    chunk_max_chars: int = Field(600, ge=20)  # each retrieved chunk is cut to this many chars


@dataclass
class SearchCall:
    """One search: the query, the chunks it returned, and what the model was shown."""

    query: str
    documents: list[str] = field(default_factory=list)  # chunk texts, best first
    chunk_ids: list[str] = field(default_factory=list)
    observation: str = ""
    truncated: bool = False
    repeated: bool = False  # the episode searched this query before (normalised)
    timed_out: bool = False  # never: kept so ToolRollout's counts read calls of either tool

    @property
    def error(self) -> bool:
        return not self.query or self.repeated


def extract_query(segment: str) -> str:
    """The query of the segment's last ``<search>``: the text after it, up to ``</search>``
    (which ends the segment), one line of spaces; "" when there is none."""
    end = segment.rfind(STOP)
    text = segment[:end] if end >= 0 else segment
    start = text.rfind(OPEN)
    if start < 0:
        return ""
    return " ".join(text[start + len(OPEN) :].split())


def queries(text: str) -> list[str]:
    """Every ``<search>`` query of a finished reply, in order (for validity checks)."""
    return [" ".join(q.split()) for q in _SEARCH.findall(text)]


def information(documents: list[tuple[str, str]]) -> str:
    """The observation's body: ``Doc k (source): text`` lines."""
    return "".join(f"Doc {k} ({src}): {text}\n" for k, (src, text) in enumerate(documents, 1))


def open_corpus(settings: SearchSettings):
    """The corpus the tool searches; an unbuilt corpus is a one-line UserError naming it and
    the ``selfplay corpus build`` command (raised when the loop is made, before any step)."""
    from corpora import DEFAULT_CORPUS, ensure_default_corpus, load_corpus
    from selfplay.engines.models import tokenizer_for

    cache = Path(settings.corpus_cache) if settings.corpus_cache else None
    name = settings.corpus or DEFAULT_CORPUS
    corpus = (
        ensure_default_corpus(cache, tokenizer_loader=tokenizer_for)  # built offline on first use
        if name == DEFAULT_CORPUS
        else load_corpus(name, cache)
    )
    if not corpus.chunks:
        raise UserError(f"search corpus {name!r} holds no chunks; rebuild it with more documents")
    return corpus


class SearchTool:
    """Top-k search over a built corpus, as a ``RolloutTool`` (one per episode: it remembers
    the episode's queries to mark repeats)."""

    stop = STOP

    def __init__(self, corpus, settings: SearchSettings) -> None:
        self.corpus = corpus
        self.settings = settings
        self.seen: set[str] = set()

    def search(self, query: str) -> list[tuple[Any, float]]:
        """The top-k (chunk, cosine) for ``query``, best first."""
        return self.corpus.search([query], self.settings.top_k)[0]

    async def call(
        self, segment: str, reply: str, policy, tokenizer
    ) -> tuple[SearchCall, list[int]]:
        # the query may begin in the prefill (a reply started with "<search>"): read the whole
        # reply's last search, which ends where this segment does
        query = extract_query(reply)
        key = query.lower()
        call = SearchCall(query=query, repeated=bool(query) and key in self.seen)
        if not query:
            body = NO_QUERY
        else:
            self.seen.add(key)
            # in the event loop, not a thread: one query's embedding and lookup take
            # milliseconds, and the engine's batches stay the same from run to run
            hits = self.search(query)
            limit = self.settings.chunk_max_chars
            call.documents = [chunk.text[:limit] for chunk, _ in hits]
            call.chunk_ids = [chunk.id for chunk, _ in hits]
            sources = [chunk.source for chunk, _ in hits]
            body = (REPEATED if call.repeated else "") + information(
                list(zip(sources, call.documents, strict=True))
            )
        ids, call.observation, call.truncated = observation(
            tokenizer, body, self.settings.max_observation_tokens, segment
        )
        return call, ids


def observation(tokenizer, body: str, max_tokens: int, segment: str) -> tuple[list[int], str, bool]:
    """Token ids of ``<information>body</information>``, the body cut to ``max_tokens``
    tokens: (ids, shown body, truncated). Pieces are tokenised separately so the cut is exact."""

    def ids_of(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False).input_ids if text else []

    lead = "" if segment.endswith("\n") else "\n"  # the information starts on its own line
    body_ids = ids_of(body)
    truncated = len(body_ids) > max_tokens
    body_ids = body_ids[:max_tokens]
    marker = ids_of(TRUNCATION_MARKER) if truncated else []
    ids = ids_of(lead + INFO_OPEN + "\n") + body_ids + marker + ids_of(INFO_CLOSE)
    return ids, tokenizer.decode(body_ids, skip_special_tokens=True), truncated


async def search_rollout(policy, request: Request, corpus, settings: SearchSettings) -> ToolRollout:
    """``request`` answered with the search tool; the rollout's calls are ``SearchCall``s."""
    tool = SearchTool(corpus, settings)
    return await multi_turn_rollout(policy, request, policy.tokenizer, tool, settings.max_searches)
