"""An engine whose replies a test writes: it records every batch (one engine wave), the adapter,
prompt and stop strings of every request, and answers each with the subclass's ``reply``."""

from __future__ import annotations

import torch

from selfplay.engines.base import Engine
from selfplay.types import Completion, Request


class ScriptedEngine(Engine):
    def __init__(self, tokenizer=None) -> None:
        self.tokenizer = tokenizer
        self.batches: list[int] = []
        self.adapters: list[str] = []
        self.prompts: list[tuple[str, str]] = []
        self.stops: list[tuple[str, tuple]] = []

    def prompt_of(self, request: Request) -> str:
        """What the role is asked, then the start of its reply (or the decoded prompt ids)."""
        if request.prompt_ids is not None:
            return self.tokenizer.decode(request.prompt_ids)
        return request.messages[-1]["content"] + request.prefill

    def reply(self, request: Request, prompt: str) -> str:
        raise NotImplementedError

    def add_adapter(self, adapter: str) -> None:
        """Every adapter answers alike: nothing to add."""

    def load_weights(self, adapter: str | None, weights: dict[str, torch.Tensor]) -> None:
        """Replies are scripted: weights change nothing."""

    def generate(self, requests: list[Request]) -> list[Completion]:
        self.batches.append(len(requests))
        out = []
        for request in requests:
            prompt = self.prompt_of(request)
            self.adapters.append(request.adapter)
            self.prompts.append((request.role, prompt))
            self.stops.append((request.role, request.sampling.stop))
            out.append(
                Completion(
                    text=self.reply(request, prompt),
                    prompt_ids=[1, 2],
                    token_ids=[3, 4, 5],
                    logprobs=[-0.5] * 3,
                    finish_reason="stop",
                )
            )
        return out
