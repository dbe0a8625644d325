"""Draw packing and padding over tp x dtype for each policy (PNG, SVG and a Markdown table)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kvproof.ci.cli import UsageError
from kvproof.ci.cmd_plan import add_model_arguments
from kvproof.impl.recipe import POLICIES, RecipePlan, plan_model
from kvproof.spec.catalog import CACHE_DTYPES, ModelGeometry, load_model

SHORT = {
    "exact_stride": "stride", "padding_bound": "pad", "partition": "part", "page_id_limit": "ids", "in_bounds": "oob",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for report.png, report.svg, report.md")


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
    bound = next(iter(cells.values())).plan.max_padding
    lines += ["", f"Padding bound {float(bound):.2f}. A cell in bold names the properties that reject it."]
    return "\n".join(lines) + "\n"


def draw(model: ModelGeometry, cells: dict[tuple[str, str, int], RecipePlan], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(POLICIES), figsize=(6 * len(POLICIES), 4.8))
    xs = list(range(len(model.tp_domain)))
    bound = float(next(iter(cells.values())).plan.max_padding)
    for ax, policy in zip(axes, POLICIES, strict=True):
        for dtype, color in zip(CACHE_DTYPES, ("tab:blue", "tab:orange"), strict=True):
            points = [cells[(policy, dtype, tp)] for tp in model.tp_domain]
            ys = [worst_padding(rp) for rp in points]
            ax.plot(xs, ys, marker="o", color=color, label=dtype)
            for x, y, rp in zip(xs, ys, points, strict=True):
                ax.annotate(packing_label(rp), (x, y), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=7, color=color)
                if not rp.plan.accepted:
                    ax.plot([x], [y], marker="x", color="red", markersize=11, mew=2)
                    props = ",".join(sorted({SHORT.get(v.property, v.property) for v in rp.plan.violations}))
                    ax.annotate(props, (x, y), textcoords="offset points", xytext=(0, -14),
                                ha="center", fontsize=7, color="red")
        ax.axhline(bound, color="red", linestyle="--", linewidth=1, label=f"bound {bound:.2f}")
        ax.set_xticks(xs, [str(tp) for tp in model.tp_domain])
        ax.set_xlabel("attention tp")
        ax.set_title(f"policy {policy}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("worst padding over groups")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{model.name}: packing K_mla/K_lin above each point; red x = rejected (property below)")
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out / f"report.{ext}", dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
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
