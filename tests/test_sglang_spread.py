"""A run's chunks spread over forked workers (engines/spread.py): every chunk's result in the chunks' order,
whoever planned it, and `verify engine sglang` spread over two processes says what one process says."""

from __future__ import annotations

import dataclasses
import os
import time
from importlib import metadata

import pytest

from kvproof.engines import spread


def _square(chunk: int) -> tuple[int, int]:
    time.sleep(0.02)  # long enough that the worker takes some chunks while this process takes others
    return chunk * chunk, os.getpid()


def test_chunks_come_back_in_order_and_a_workers_are_counted() -> None:
    counted: list[int] = []
    here: list[int] = []

    def mine(chunk: int) -> tuple[int, int]:
        here.append(chunk)
        return _square(chunk)

    out = spread.run(list(range(20)), _square, mine, 2, counted.append)
    assert [square for square, _ in out] == [i * i for i in range(20)]
    by = {i: pid for i, (_, pid) in enumerate(out)}
    assert {by[i] for i in here} == {os.getpid()} and os.getpid() not in {by[i] for i in counted}
    assert sorted(counted + here) == list(range(20))  # each chunk counted once, by whoever planned it
    assert here and counted and min(here) > max(counted)  # the worker from the start, this process from the end


def test_one_process_plans_every_chunk_itself() -> None:
    assert spread.run([1, 2, 3], _square, lambda c: (c, 0), 1, lambda i: None) == [(1, 0), (2, 0), (3, 0)]
    assert spread.processes(1) == 1
    assert 1 <= spread.processes(100) <= (os.cpu_count() or 1)


@pytest.mark.skipif(not any(d.metadata["Name"] == "sglang" for d in metadata.distributions()),
                    reason="make .venv/.sglang installs SGLang's pools (engines/sglang-requirements.txt)")
def test_sglang_spread_over_two_processes_says_what_one_says() -> None:
    from kvproof.engines.sglang import engine

    # Qwen3.5-122B at tp 16 and 32: the tp-32 pairs' pd_state_slice findings, and the unified pool's points
    def run(workers: int) -> object:
        done = engine.verify(["qwen3.5-122b-a10b"], [16, 32], ["bf16"], None,
                             assume=["page_size=64", "mamba_conv=bfloat16", "mamba_ssm=float32"], workers=workers)
        return dataclasses.replace(done, seconds=0.0)

    alone, spread_out = run(1), run(2)
    assert alone == spread_out
    (result,) = alone.recipes  # type: ignore[attr-defined]
    found = {f.property for p in result.points for f in p.findings}
    assert "pd_state_slice" in found and {p.point["unified"] for p in result.points} == {"off", "on"}, found
