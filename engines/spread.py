"""A run's chunks spread over the cores: forked workers and this process plan them together, merged in order.

A worker is forked, so it starts with everything this process imported before the first chunk was
handed out (an engine's modules: importing them again would cost each worker seconds of CPU), and
with the seeded faults that are on here. It plans the chunks it takes from the start while this
process takes them from the end, each process with caches of its own. The result is every chunk's
result in the chunks' order, whoever planned it: what one process planning them in order gives, as
long as a chunk's result is a function of the chunk alone (a cache only reuses what identical
inputs gave). Where no worker can be forked (no fork start method, or this process is itself a
daemonic worker, which may not have children) this process plans every chunk.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import Any, TypeVar

from kvproof.engines.verdict import EngineError, one_line

C = TypeVar("C")
R = TypeVar("R")


def processes(chunks: int) -> int:
    """How many processes plan `chunks` chunks: one per core this process may run on, at most one per
    chunk; this one alone where it cannot fork a worker."""
    if "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.current_process().daemon:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, chunks))


def run(chunks: Sequence[C], work: Callable[[C], R], here: Callable[[C], R], processes: int,
        counted: Callable[[int], None], start: str = "fork", prepare: Callable[..., None] | None = None,
        prepared_with: tuple[Any, ...] = ()) -> list[R]:
    """Each chunk's result, in order. A worker runs `work` (a module-level function: it is handed over
    pickled, with the chunk); this process runs `here` (the same work, which may also show progress);
    `counted(i)` is called once a worker has finished chunk i. A worker starts by `start` (a
    multiprocessing start method) and first calls `prepare(*prepared_with)` where given (what a spawned
    worker must do to start as this process did)."""
    if processes <= 1:
        return [here(chunk) for chunk in chunks]
    done: dict[int, R] = {}
    with ProcessPoolExecutor(processes - 1, mp_context=multiprocessing.get_context(start),
                             initializer=_start_worker, initargs=(prepare, prepared_with)) as pool:
        futures = [pool.submit(work, chunk) for chunk in chunks]
        for i, future in enumerate(futures):
            future.add_done_callback(partial(_counted, counted, i))
        try:
            for i in reversed(range(len(chunks))):
                if not futures[i].cancel():  # a worker has it, and every chunk before it
                    break
                done[i] = here(chunks[i])
            done.update((i, f.result()) for i, f in enumerate(futures) if i not in done)
        except BrokenProcessPool as err:  # a worker was killed (out of memory, a signal)
            pool.shutdown(cancel_futures=True)
            raise EngineError(f"a worker process planning the run ended abruptly ({one_line(err)}); "
                              "nothing is known of the points it held: rerun") from None
        except BaseException:
            pool.shutdown(cancel_futures=True)  # not the rest of the run first
            raise
    return [done[i] for i in range(len(chunks))]


def _counted(counted: Callable[[int], None], i: int, future: Future[R]) -> None:
    if not future.cancelled():  # one this process took back is counted as it plans it
        counted(i)


def _start_worker(prepare: Callable[..., None] | None, prepared_with: tuple[Any, ...]) -> None:
    parent = multiprocessing.parent_process()
    if parent is not None:  # a worker ends with the run's process however that ends (a kill leaves it no shutdown)
        threading.Thread(target=_end_with, args=(parent.sentinel,), daemon=True).start()
    if prepare is not None:
        prepare(*prepared_with)


def _end_with(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(1)
