"""`verify report`'s picture: what each cell says (the figures are docs/commands/report.md's, by hand)."""

from __future__ import annotations

from kvproof.cli.cmd_report import cell_text
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import load_model


def test_cells_name_packing_padding_and_failing_properties() -> None:
    k3 = load_model("kimi-k3")
    assert cell_text(plan_model(k3, 32, "bf16", "search")) == "3/2\n0.134"
    assert cell_text(plan_model(k3, 32, "bf16", "ceil")) == "2/1\n0.512\npadding_bound"
    assert cell_text(plan_model(k3, 4, "fp8", "pinned12")) == "12/1\n0.805\nexact_stride\npadding_bound"
    assert cell_text(plan_model(k3, 1, "fp8", "pinned12")).startswith("12/1\n6.096\n")
