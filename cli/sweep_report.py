"""`verify report --sweep`: a family's verdicts over two of its parameters, as a picture.

Each cell is a sub-family: the two parameters pinned, every other one over its range. The cell
is PROVED when no member of it fails (one z3 query over the whole sub-family), else it shows the
properties that fail at a member the pointwise prover confirms. Kept apart from cmd_report so
the report's own layout can change without touching this.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvproof.cli.args import UsageError, parse_vary
from kvproof.spec.catalog import load_model
from kvproof.spec.policy import POLICIES, policy_named
from kvproof.spec.sweep import Query, confirmed_failure, derive_shape
from kvproof.spec.sweep_family import PARAMETERS, Family, Member

MAX_CELLS = 4096
SHORT = {"exact_stride": "stride", "padding_bound": "pad", "partition": "part", "page_id_limit": "ids",
         "in_bounds": "oob", "no_overlap": "overlap", "null_page": "null", "kernel_page": "kpage",
         "boots": "refused"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sweep", nargs="+", action="extend", metavar="NAME=RANGE",
                        help="draw a family's verdicts instead (ranges as for verify sweep --vary)")
    parser.add_argument("--axes", nargs=2, choices=PARAMETERS, default=["num_layers", "mla_every"],
                        metavar=("X", "Y"), help="the two parameters of a --sweep picture")
    parser.add_argument("--sweep-policy", choices=list(POLICIES), default="search", help="policy of --sweep")


def cells(family: Family, policy: str, x: str, y: str) -> dict[tuple[int, int], tuple[Member, str] | None]:
    """(x value, y value) -> a confirmed failing member and its properties, or None (PROVED)."""
    chosen = policy_named(policy)
    query = Query(family, chosen, derive_shape(family), 8 if chosen.smallest_accepted else 1)
    vx, vy = query.enc.vars[x], query.enc.vars[y]
    return {(a, b): confirmed_failure(query, family, chosen, vx == a, vy == b)
            for a in family.ranges[x].all() for b in family.ranges[y].all()}


def markdown(family: Family, policy: str, x: str, y: str, grid: dict) -> str:
    xs, ys = family.ranges[x].all(), family.ranges[y].all()
    lines = [f"# {family.base.name} family, policy {policy}: verdict per ({x}, {y})", "",
             f"Every other parameter over its range: {family.describe()}.", "",
             f"| {y} \\ {x} | " + " | ".join(map(str, xs)) + " |", "| ---: |" + " :---: |" * len(xs)]
    for b in ys:
        row = [("ok" if grid[a, b] is None else " ".join(SHORT.get(p, p) for p in grid[a, b][1].split(", ")))
               for a in xs]
        lines.append(f"| {b} | " + " | ".join(row) + " |")
    lines += ["", "ok: PROVED for every member of the cell; otherwise the properties failing at a member the "
              "pointwise prover confirms."]
    return "\n".join(lines) + "\n"


def draw(family: Family, policy: str, x: str, y: str, grid: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    xs, ys = family.ranges[x].all(), family.ranges[y].all()
    data = [[0 if grid[a, b] is None else 1 for a in xs] for b in ys]
    fig, ax = plt.subplots(figsize=(min(18, 2 + 0.22 * len(xs)), min(12, 1.5 + 0.4 * len(ys))))
    ax.imshow(data, cmap=ListedColormap(["#4caf50", "#e53935"]), vmin=0, vmax=1, aspect="auto", origin="lower")
    ax.set_xticks(range(len(xs)), [str(v) if i % max(1, len(xs) // 24) == 0 else "" for i, v in enumerate(xs)])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    failing = sum(v is not None for v in grid.values())
    ax.set_title(f"{family.base.name} family, {policy}: green PROVED, red fails ({failing} of {len(grid)} cells)\n"
                 f"{family.describe()}", fontsize=9)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out / f"sweep.{ext}")
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    x, y = args.axes
    if x == y:
        raise UsageError("--axes needs two different parameters")
    family = Family.around(load_model(args.model, args.config), parse_vary(args.sweep))
    count = len(family.ranges[x]) * len(family.ranges[y])
    if count > MAX_CELLS:
        raise UsageError(f"--axes {x} {y} make {count} cells; at most {MAX_CELLS}: narrow their ranges")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create --out {out}: {err.strerror}") from None
    grid = cells(family, args.sweep_policy, x, y)
    (out / "sweep.md").write_text(markdown(family, args.sweep_policy, x, y, grid))
    draw(family, args.sweep_policy, x, y, grid, out)
    written = [str(out / f"sweep.{e}") for e in ("png", "svg", "md")]
    print(json.dumps({"files": written}) if args.json else "\n".join(written))
    return 0 if all(v is None for v in grid.values()) else 1
