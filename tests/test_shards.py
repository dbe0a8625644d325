"""`verify engine --shard K/N` (kvproof.engines.shards): every recipe dealt whole to exactly one shard, alike on
every run, the shards' loads within one recipe of each other, and the shards' runs together the unsharded run."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvproof.engines import baseline, shards
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


@given(COSTS, st.integers(1, 8))
def test_no_more_shards_than_recipes_leaves_none_without_one(costs: dict[str, int], count: int) -> None:
    assert all(shards.deal(costs, count)) == (count <= len(costs))


def test_more_shards_than_recipes_are_refused_before_any_is_dealt() -> None:
    assert shards.chosen({"a": 1, "b": 2}, (2, 2), "vllm") == ["a"]
    with pytest.raises(EngineError, match="has 2 recipes to deal here, so at most 2 shards"):
        shards.chosen({"a": 1, "b": 2}, (3, 3), "vllm")
    with pytest.raises(EngineError, match="at most 2 shards"):  # refused, not dealt into 10^12 empty shards
        shards.chosen({"a": 1, "b": 2}, (1, 10**12), "vllm")


@pytest.mark.parametrize(("args", "says"), [
    (["vllm", "--shard", "5/4"], "--shard 5/4: give K/N"),
    (["vllm", "--shard", ""], "--shard : give K/N"),
    (["vllm", "--recipe", "zamba2-7b-family-0", "--shard", "2/2"], "vllm has 1 recipes to deal here, so at most 1"),
    (["vllm", "--shard", "1/2", "--tp", "1"], "--shard deals whole models: choose them with --recipe"),
    (["tokenspeed", "--shard", "1/2"], "--shard does not apply to tokenspeed"),
    (["sglang", "--shard", "1/2"], "--shard does not apply to sglang"),
])
def test_bad_shards_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", *args], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_vllms_shards_together_are_the_unsharded_run() -> None:
    """Two small models in two shards: each shard plans one of them whole and says which in its source; the two
    shards' verdicts are the unsharded run's, and so is their comparison with a baseline (a finding of each model
    known, one entry of each stale)."""
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

    def compared(run: engine.EngineRun) -> baseline.Comparison:
        return baseline.compare(baseline.findings("vllm", run.version, run.recipes), known, "vllm", run.version,
                                baseline.ran(run.recipes))

    found = baseline.findings("vllm", whole.version, whole.recipes)
    firsts = [next(k for k in found if k[2] == model) for model in models]
    known = {*firsts, *((*k[:4], "no_overlap") for k in firsts)}
    one = compared(whole)
    assert len(one.stale) == 2 and len(one.known) == 2
    both = [compared(part) for part in parts]
    for field in ("new", "known", "stale"):
        assert sorted(k for c in both for k in getattr(c, field)) == sorted(getattr(one, field))


def test_vllms_whole_catalog_deals_every_model_once() -> None:
    """The stage plannings a model is dealt by come from its catalog entry alone (no vLLM import)."""
    from kvproof.engines.vllm import catalog, engine

    costs = {name: engine._stages(model) for name, model in catalog.MODELS.items()}
    for count in (2, 3, 4):
        dealt = [shards.chosen(costs, (k, count), "vllm") for k in range(1, count + 1)]
        assert sorted(name for shard in dealt for name in shard) == sorted(catalog.MODELS)
