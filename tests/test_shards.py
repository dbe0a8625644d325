"""`verify engine --shard K/N` (kvproof.engines.shards): every recipe dealt whole to exactly one shard, alike on
every run, the shards' loads within one recipe of each other, and the shards' runs together the unsharded run."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvproof.engines import shards
from kvproof.engines.verdict import EngineError

COSTS = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4), st.integers(1, 10_000), min_size=1, max_size=40)


@given(COSTS, st.integers(1, 8))
def test_every_recipe_is_dealt_to_exactly_one_shard_in_the_listed_order(costs: dict[str, int], count: int) -> None:
    dealt = shards.deal(costs, count)
    assert len(dealt) == count
    assert sorted(name for shard in dealt for name in shard) == sorted(costs)
    order = list(costs)
    assert all(shard == sorted(shard, key=order.index) for shard in dealt)


@given(COSTS, st.integers(1, 8))
def test_the_shards_loads_differ_by_at_most_one_recipe(costs: dict[str, int], count: int) -> None:
    """Dealt costliest first to the lightest shard, a shard's load passes another's only by its last recipe."""
    loads = [sum(costs[name] for name in shard) for shard in shards.deal(costs, count)]
    assert max(loads) - min(loads) <= max(costs.values())


@given(COSTS, st.integers(1, 8))
def test_the_deal_depends_on_the_recipes_and_costs_alone(costs: dict[str, int], count: int) -> None:
    """The same recipes and costs listed in another order are dealt to the same shards (a CI matrix's jobs each
    deal on their own machine)."""
    backwards = dict(reversed(list(costs.items())))
    assert [sorted(s) for s in shards.deal(costs, count)] == [sorted(s) for s in shards.deal(backwards, count)]


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "x", "1/2/3", "-1/2", " 1/2"])
def test_a_malformed_shard_is_refused(text: str) -> None:
    with pytest.raises(EngineError, match="give K/N"):
        shards.parse(text)


def test_a_shard_left_without_a_recipe_is_refused() -> None:
    assert shards.chosen({"a": 1, "b": 2}, (2, 2), "vllm") == ["a"]
    with pytest.raises(EngineError, match="shard 3 of 3 holds none; use at most 2 shards"):
        shards.chosen({"a": 1, "b": 2}, (3, 3), "vllm")


@pytest.mark.parametrize(("args", "says"), [
    (["vllm", "--shard", "5/4"], "--shard 5/4: give K/N"),
    (["tokenspeed", "--shard", "1/2"], "--shard does not apply to tokenspeed"),
    (["sglang", "--shard", "1/2"], "--shard does not apply to sglang"),
])
def test_bad_shards_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", *args], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_vllms_shards_together_are_the_unsharded_run() -> None:
    """Two small models in two shards: each shard plans one of them whole, says which in its source, and the
    two shards' verdicts are the unsharded run's."""
    pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")
    from kvproof.engines.vllm import engine

    models = ["zamba2-7b-family-0", "falcon-h1-0.5b-family-0"]
    whole = engine.run(models, workers=1)
    parts = [engine.run(models, workers=1, shard=(k, 2)) for k in (1, 2)]
    assert [len(part.recipes) for part in parts] == [1, 1]
    assert all(f"shard {k} of 2: 1 of 2 models ({part.recipes[0].recipe})" in part.source
               for k, part in enumerate(parts, 1))
    assert sorted((r for part in parts for r in part.recipes), key=lambda r: r.recipe) == sorted(
        whole.recipes, key=lambda r: r.recipe)


def test_vllms_whole_catalog_deals_every_model_once() -> None:
    pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")
    from kvproof.engines.vllm import catalog, engine

    costs = {name: engine._stages(model) for name, model in catalog.MODELS.items()}
    for count in (2, 3, 4):
        dealt = [shards.chosen(costs, (k, count), "vllm") for k in range(1, count + 1)]
        assert sorted(name for shard in dealt for name in shard) == sorted(catalog.MODELS)
