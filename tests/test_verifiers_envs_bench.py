"""``selfplay bench verifiers``' two sides do the same work: on the tiny model, greedy, both
play the same Kuhn Poker tasks with the same number of model calls and no failed episode."""

from __future__ import annotations

import asyncio

from selfplay.bench.verifiers import KEY_VAR, env_spec, run_here, run_vf_eval
from selfplay.engines.hf import HFEngine


def test_both_sides_play_the_same_games(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, "stub")
    engine = HFEngine(tiny_model_path, max_batch_size=8)
    spec = env_spec("kuhn", tmp_path)

    async def both():
        here = await run_here(engine, spec, episodes=3, new_tokens=8)
        engine.prefix_store.clear()
        served = await run_vf_eval(engine, spec, episodes=3, concurrency=3, new_tokens=8,
                                   out=tmp_path / "vf")
        return here, served

    here, served = asyncio.run(both())
    assert (here.episodes, here.failed) == (3, 0), here.error
    assert (served.episodes, served.failed) == (3, 0), served.error
    assert here.calls == served.calls >= 3  # greedy: the same replies, so the same moves
    assert here.batches >= 1 and served.batches >= 1
