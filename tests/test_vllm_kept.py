"""What one vLLM planning call keeps of its own answers: each spec object's layer block stride
(engines/vllm/kept.py), and each layer's translated fields across the parent counts (planner.document).
A kept answer is vLLM's for the same object, never another's, and a point plans alike with or
without them."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

from kvproof.engines.vllm import catalog, kept, mutants, planner
from kvproof.impl import faults


@dataclass(frozen=True)
class Spec:
    page: int


def _planning() -> tuple[types.ModuleType, list[Spec]]:
    asked: list[Spec] = []
    module = types.ModuleType("planning")

    def stride(spec: Spec) -> int:
        asked.append(spec)
        return 2 * spec.page

    module._get_layer_block_stride = stride  # type: ignore[attr-defined]
    return module, asked


def test_each_spec_object_is_asked_once_within_the_block_and_the_function_is_restored() -> None:
    module, asked = _planning()
    original = module._get_layer_block_stride
    a, same_value = Spec(3), Spec(3)
    with kept.layer_block_strides(module):
        answers = [module._get_layer_block_stride(s) for s in (a, a, same_value, Spec(5), a)]
    assert answers == [6, 6, 6, 10, 6]
    # kept by the object, not by equality: an equal spec is asked itself
    assert [id(s) for s in asked[:2]] == [id(a), id(same_value)] and len(asked) == 3
    assert module._get_layer_block_stride is original
    assert module._get_layer_block_stride(a) == 6 and len(asked) == 4  # outside the block vLLM answers each time


def test_nothing_is_kept_after_the_block_and_a_planning_module_without_the_function_is_left_as_it_is() -> None:
    module, asked = _planning()
    a = Spec(1)
    for _ in range(2):
        with kept.layer_block_strides(module):
            module._get_layer_block_stride(a)
    assert len(asked) == 2  # a new block asks again
    bare = types.ModuleType("planning")
    with kept.layer_block_strides(bare):
        assert not hasattr(bare, kept.NAME)


@contextlib.contextmanager
def _nothing_kept(planning: types.ModuleType) -> Iterator[None]:
    yield


K3 = catalog.MODELS["kimi-k3"]
QWEN = catalog.MODELS["qwen3-next-80b-a3b"]


@pytest.mark.parametrize(("model", "backend", "prefix"), [(K3, 1, True), (QWEN, 2, False)])
def test_a_point_plans_alike_with_vllms_answers_kept_and_without(model: catalog.Model, backend: int, prefix: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    point = planner.Point(model, 2, "fp8", "float32", prefix, model.backends[backend])
    with_kept = planner.plan(point)
    monkeypatch.setattr(kept, "layer_block_strides", _nothing_kept)
    without = planner.plan(point)
    assert with_kept.documents == without.documents and with_kept.block_size == without.block_size
    # each parent count's document translated alone is the one translated beside the others
    alone = {n: planner.document(cfg, with_kept.layout, n, planner.kernel_fields(point, with_kept.kernels),
                                 planner.reader_fields(point))
             for n, cfg in with_kept.configs.items()}
    assert alone == with_kept.documents


def test_the_seeded_doubled_page_still_applies_with_the_strides_kept() -> None:
    point = planner.Point(K3, 1, "auto", "auto", False, next(b for b in K3.backends if b.name == "FLASHMLA"))
    clean = planner.plan(point)
    with faults.inject("vllm_split_page_padded"):
        broken = planner.plan(point, mutants.applied)
    strides = {p["bytes"] for p in clean.documents[1]["planes"]}
    assert {p["bytes"] for p in broken.documents[1]["planes"]} == {2 * s for s in strides}
