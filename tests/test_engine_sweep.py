"""tokenspeed's own kimi_k3 recipe over families of geometries (engines/tokenspeed/sweep.py):
enumerated when small, searched and shrunk by hypothesis when large, failures grouped by cause
with the structure of each failing set."""

from __future__ import annotations

import pytest

from kvproof.engines.tokenspeed import loader, sweep
from kvproof.spec.catalog import load_model
from kvproof.spec.sweep_family import Family, parse_range


@pytest.fixture(scope="module")
def installed() -> loader.Source:
    return loader.installed_source()


def _family(**vary: str) -> Family:
    return Family.around(load_model("kimi-k3"), {k: parse_range(k, v) for k, v in vary.items()}, ("fp8", "bf16"))


def test_the_published_geometry_passes_where_verify_engine_says(installed) -> None:
    """The family of one member, K3 itself, at fp8: every tp boots and checks clean."""
    family = Family.around(load_model("kimi-k3"), {}, ("fp8",))
    result = sweep.sweep(installed, family)
    assert result.enumerated and result.tried == 12 and not result.causes
    assert result.verdict() == "no counterexample in 12 geometries (enumerated)"


def test_layer_counts_the_recipe_refuses_form_a_residue_class(installed) -> None:
    """With every 4th layer MLA (plus the last), the recipe's three state groups need the KDA
    count divisible by 3: it refuses num_layers = 2, 3 (mod 4) at every tp and dtype."""
    result = sweep.sweep(installed, _family(num_layers="80..95"))
    assert result.enumerated and result.tried == 16 * 12 * 2
    by_message = {c.message.split(",")[0]: c for c in result.causes}
    split = by_message["Kimi-K3 cache requires the KDA layer count to divide into 3 state groups"]
    assert split.property == "boots" and split.count == 8 * 12 * 2
    assert split.member.num_layers == 82 and split.patterns["num_layers"] == "8 of 16: ≡ 2, 3 (mod 4)"
    padding = next(c for c in result.causes if "padding fraction" in c.message)
    assert (padding.member.tp, padding.member.dtype) == (32, "bf16")
    assert padding.patterns["num_layers"] == "8 of 16: ≡ 0, 1 (mod 4)"


def test_a_large_family_is_searched_and_the_failure_shrunk(installed) -> None:
    """Too many members to enumerate: hypothesis finds a failing member and shrinks it, and the
    answer never claims more than the search covered."""
    family = _family(num_layers="24..128", kda_heads="16..128")
    assert family.size() > sweep.ENUMERATE_UP_TO
    result = sweep.sweep(installed, family, examples=60)
    assert not result.enumerated and result.causes
    (cause,) = result.causes
    assert cause.property == "boots"
    # Shrunk towards the smallest geometry: the fewest layers that still fail.
    assert cause.member.num_layers <= 30, cause.member
