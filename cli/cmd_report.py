"""Draw packing and padding over tp x dtype for each policy (PNG, SVG and a Markdown table)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kvproof.cli import sweep_report
from kvproof.cli.args import UsageError, add_model_arguments
from kvproof.impl.recipe import MAX_PADDING, POLICIES, RecipePlan, plan_model
from kvproof.spec.catalog import CACHE_DTYPES, ModelGeometry, load_model

SHORT = {
    "exact_stride": "stride", "padding_bound": "pad", "partition": "part", "page_id_limit": "ids", "in_bounds": "oob",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for report.png, report.svg, report.md")
    sweep_report.add_arguments(parser)


def sweep(model: ModelGeometry) -> dict[tuple[str, str, int], RecipePlan]:
    return {
        (policy, dtype, tp): plan_model(model, tp, dtype, policy)
        for policy in POLICIES
        for dtype in CACHE_DTYPES
        for tp in model.tp_domain
    }


def packing_label(rp: RecipePlan) -> str:
    k = rp.plan.packing
    lin = sorted({v for g, v in k.items() if g != "full_attention"})
    return f"{k['full_attention']}" + (f"/{lin[0]}" if lin else "")


def worst_padding(rp: RecipePlan) -> float:
    return max(float(g.padding) for g in rp.plan.groups)


def cell_text(rp: RecipePlan) -> str:
    """What a cell of the picture says: the packing, the worst padding and, when the point is
    rejected, the properties that reject it (one per line)."""
    lines = [packing_label(rp), f"{worst_padding(rp):.3f}"]
    return "\n".join(lines + sorted({v.property for v in rp.plan.violations}))


def markdown(model: ModelGeometry, cells: dict[tuple[str, str, int], RecipePlan]) -> str:
    cols = [(p, d) for p in POLICIES for d in CACHE_DTYPES]
    lines = [
        f"# {model.name}: packing K_mla/K_lin and worst padding per point",
        "",
        "| tp | " + " | ".join(f"{p} {d}" for p, d in cols) + " |",
        "| ---: | " + " | ".join("---" for _ in cols) + " |",
    ]
    for tp in model.tp_domain:
        row = []
        for p, d in cols:
            rp = cells[(p, d, tp)]
            failing = ", ".join(sorted({v.property for v in rp.plan.violations}))
            verdict = "ok" if rp.plan.accepted else f"**{failing}**"
            row.append(f"{packing_label(rp)} {worst_padding(rp):.3f} {verdict}")
        lines.append(f"| {tp} | " + " | ".join(row) + " |")
    lines += ["", f"Padding bound {float(MAX_PADDING):.2f}. A cell in bold names the properties that reject it."]
    return "\n".join(lines) + "\n"


def draw(model: ModelGeometry, cells: dict[tuple[str, str, int], RecipePlan], out: Path) -> None:
    """One grid per policy (tp across, dtype down), every cell coloured by its worst padding on
    one shared scale. The scale stops at twice the bound, so pinned12's padding of 6 does not
    flatten the differences near the bound; the colour bar says where it clips and marks the
    bound. Each cell gives the packing K_mla/K_lin and the padding; rejected cells are crossed
    and name the properties that reject them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LinearSegmentedColormap, TwoSlopeNorm

    bound = float(MAX_PADDING)  # the report plans without drafts: the recipe's bound holds
    tps, dtypes = model.tp_domain, CACHE_DTYPES
    top = 2 * bound
    # Greens up to the bound, then a jump to orange and reds: pass and fail never share a hue.
    norm = TwoSlopeNorm(vmin=0.0, vcenter=bound, vmax=top)
    cmap = LinearSegmentedColormap.from_list("padding", [
        (0.0, "#1a7f3c"), (0.4999, "#d4f0c0"), (0.5, "#fdae61"), (1.0, "#b2182b")]).with_extremes(over="#67001f")
    size = (max(9.0, 1.0 * len(tps) + 2.5), 1.25 * len(dtypes) * len(POLICIES) + 1.6)
    fig, axes = plt.subplots(len(POLICIES), 1, figsize=size, squeeze=False)
    for ax, policy in zip(axes[:, 0], POLICIES, strict=True):
        grid = np.array([[worst_padding(cells[(policy, d, tp)]) for tp in tps] for d in dtypes])
        ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
        rejected = 0
        for row, dtype in enumerate(dtypes):
            for col, tp in enumerate(tps):
                rp = cells[(policy, dtype, tp)]
                pad = grid[row, col]
                ink = "white" if pad > 1.5 * bound or pad < 0.3 * bound else "black"
                if not rp.plan.accepted:
                    rejected += 1
                    ax.plot([col - 0.5, col + 0.5], [row - 0.5, row + 0.5], color=ink, lw=0.8, alpha=0.6)
                    ax.plot([col - 0.5, col + 0.5], [row + 0.5, row - 0.5], color=ink, lw=0.8, alpha=0.6)
                ax.text(col, row, cell_text(rp), ha="center", va="center", fontsize=7, color=ink,
                        fontweight="bold" if rp.plan.accepted else "normal")
        ax.set_xticks(range(len(tps)), [str(tp) for tp in tps])
        ax.set_yticks(range(len(dtypes)), list(dtypes))
        ax.set_xticks(np.arange(len(tps) + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(len(dtypes) + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", lw=1.5)
        ax.tick_params(which="minor", length=0)
        ax.set_xlim(-0.5, len(tps) - 0.5)
        ax.set_ylim(len(dtypes) - 0.5, -0.5)
        verdict = f"rejected at {rejected} of {grid.size} points" if rejected else f"accepted at all {grid.size} points"
        ax.set_title(f"policy {policy}: {verdict}", fontsize=10, loc="left")
    axes[-1, 0].set_xlabel("attention tp")
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes[:, 0].tolist(), extend="max",
                       fraction=0.03, pad=0.02, aspect=35)
    bar.set_label(f"worst padding over groups (colour clipped at {top:.2f})")
    bar.ax.axhline(bound, color="black", lw=2)
    bar.set_ticks([0, bound / 2, bound, 1.5 * bound, top], labels=[
        "0", f"{bound / 2:.3f}", f"bound {bound:.2f}", f"{1.5 * bound:.3f}", f">= {top:.2f}"])
    fig.suptitle(f"{model.name}: packing K_mla/K_lin and worst padding per point\n"
                 "crossed: rejected, with the properties that fail", fontsize=11)
    for ext in ("png", "svg"):
        fig.savefig(out / f"report.{ext}", dpi=130)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.sweep:
        return sweep_report.run(args)
    model = load_model(args.model, args.config)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create --out {out}: {err.strerror}") from None
    cells = sweep(model)
    (out / "report.md").write_text(markdown(model, cells))
    draw(model, cells, out)
    written = [str(out / f"report.{e}") for e in ("png", "svg", "md")]
    print("\n".join(written) if not args.json else __import__("json").dumps({"files": written}))
    return 0
