"""vLLM's layer block stride, each spec object's answer kept for one planning call.

vLLM's planning module asks `_get_layer_block_stride(spec)` for every layer of every group each
time it sizes a block (`_get_kv_cache_bytes_per_block`, vllm/v1/core/kv_cache_planning.py:574-583)
and again as it lays out each tensor (:709); one planning call places the groups at every parent
count, so a Kimi-K3 planning asked it about 840 times of a few dozen spec objects, each answer
rebuilding a spec for the kernel block (`get_block_stride_alignment`, v1/kv_cache_interface.py:224,
through `dataclasses.replace`): the largest piece of the planning's own time. The answer reads the
spec alone (its page size padded to its alignment, :569-571), and a spec is a frozen dataclass whose
fields vLLM sets only while building it (its `__post_init__`), so one object asked twice within a
call is one input asked twice: the first call runs vLLM's function, the later ones take its answer.
Kept by the object's identity, the object held for the call so that no other takes its id, never by
equality (a spec's `is_draft` is left out of it, :215). A seeded bug that replaces the function
(`vllm_split_page_padded`) is what is kept, so it applies as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

NAME = "_get_layer_block_stride"  # the planning module's (0.32.0 on; 0.30.0 and 0.31.0 have none: nothing kept)


@contextmanager
def layer_block_strides(planning: ModuleType) -> Iterator[None]:
    """The planning module's `_get_layer_block_stride` answering each spec object once within the block."""
    original: Callable[[Any], int] | None = getattr(planning, NAME, None)
    if original is None:
        yield
        return
    answers: dict[int, tuple[Any, int]] = {}

    def kept(spec: Any) -> int:
        found = answers.get(id(spec))
        if found is None:
            found = answers[id(spec)] = (spec, original(spec))
        return found[1]

    setattr(planning, NAME, kept)
    try:
        yield
    finally:
        setattr(planning, NAME, original)
