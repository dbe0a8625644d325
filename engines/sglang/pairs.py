"""Prefill and decode instances of one model at different attention tp: what each rank sends and where it lands.

A disaggregated deployment pairs a prefill instance with a decode instance; SGLang lets their
attention tp differ. Each decode rank then pulls from the prefill ranks `_resolve_rank_mapping`
assigns it (disaggregation/common/conn.py:1452-1477: one rank when tp is equal, rank d // (D / P)
when decode has more ranks, ranks d·(P / D) .. (d + 1)·(P / D) - 1 when prefill has more; a hybrid
MLA pool sends its replicated KV from one of these but its state from every one, mooncake/conn.py:
1889-1900), and the transfer slices what it sends with SGLang's own arithmetic, called here on each
point's pools:
- KV heads (an MHA pool; an MLA pool's latent has no head axis): `compute_head_slice_params`
  (disaggregation/common/staging_buffer.py), with each rank's head count the pool's `head_num` and
  the model's total from `ModelConfig.get_total_num_kv_heads`, as prefill.py:336-340 hands them to the
  transfer. The heads sent must be at least one, lie within the sending rank's heads and the
  receiving rank's, and the heads a decode rank receives must cover all of its own; and on each
  side every rank's heads × ranks must cover the model's KV heads.
- Mamba state entries: `compute_mamba_state_slice_byte_blocks` (disaggregation/utils.py), as
  mooncake/conn.py:2378-2422 calls it with each entry's item length, sliceable dim, outer count and
  conv sub-blocks (the pools' get_state_buf_infos, get_state_dim_per_tensor,
  get_state_slice_outer_counts, get_state_conv_shard_groups). Every byte block must lie within
  the prefill slot and the decode slot, and the blocks a decode slot receives must cover it once.
Equal tp transfers whole items (mooncake/conn.py:2021-2023), which `consumer_stride` covers per point.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kvproof.engines.verdict import Finding, PointResult

HEAD_SPLIT = "pd_head_split"  # the cross-point findings: a KV head split across the pair that loses heads
STATE_SLICE = "pd_state_slice"  # a Mamba state slice out of a slot's bounds, or a decode slot left partly unwritten
CROSS_POINT = (HEAD_SPLIT, STATE_SLICE)


@dataclass(frozen=True)
class StateEntry:
    """One state entry as the transfer is told it (MambaPool's getters, one per layer of a tensor)."""

    layer: int
    item: int  # bytes of one slot
    dim: int  # the sliceable dim (0: replicated across attention tp)
    outer: int  # rows before the slice axis
    groups: tuple[int, ...] | None  # the conv state's full sub-block dims


@dataclass(frozen=True)
class Transfer:
    """What one point's pools tell the disaggregation transfer."""

    tp: int
    heads: int | None  # KV heads per rank (the MHA pool's head_num); None for an MLA pool
    total_heads: int
    state: tuple[StateEntry, ...]


def ranks(prefill: int, decode: int) -> list[tuple[int, int]]:
    """(prefill rank, decode rank) pairs that transfer (common/conn.py:1452-1477)."""
    if decode >= prefill:
        return [(d // (decode // prefill), d) for d in range(decode)]
    return [(s, s // (prefill // decode)) for s in range(prefill)]


def head_split(mods: dict[str, types.ModuleType], src: Transfer, dst: Transfer) -> list[str]:
    """What is wrong with the KV heads prefill at src.tp sends decode at dst.tp."""
    src_heads, dst_heads = src.heads, dst.heads
    if src_heads is None or dst_heads is None:
        return []
    out = [f"{side} holds {heads} KV heads per rank at tp {tp}: {heads * tp} of the model's {src.total_heads}"
           for side, heads, tp in (("prefill", src_heads, src.tp), ("decode", dst_heads, dst.tp))
           if heads * tp < src.total_heads]
    slice_params = mods["sglang.srt.disaggregation.common.staging_buffer"].compute_head_slice_params
    received: dict[int, set[int]] = {}
    for s, d in ranks(src.tp, dst.tp):
        src_start, count, dst_start, _ = slice_params(src.tp, dst.tp, s, d, src.total_heads)
        where = f"prefill rank {s} sends decode rank {d} heads {src_start}..{src_start + count - 1}"
        if count < 1:
            out.append(f"prefill rank {s} sends decode rank {d} {count} KV heads")
        elif src_start < 0 or src_start + count > src_heads:
            out.append(f"{where}, past its {src_heads} heads")
        elif dst_start < 0 or dst_start + count > dst_heads:
            out.append(f"{where} into heads {dst_start}..{dst_start + count - 1}, past the decode rank's {dst_heads}")
        received.setdefault(d, set()).update(range(dst_start, dst_start + max(count, 0)))
    own = set(range(dst_heads))
    out += [f"decode rank {d} receives {len(got & own)} of its {dst_heads} KV heads"
            for d, got in received.items() if not own <= got]
    return _first(out, "problems")


def state_slices(mods: dict[str, types.ModuleType], src: Transfer, dst: Transfer) -> list[str]:
    """What is wrong with the Mamba state slices prefill at src.tp writes into decode at dst.tp."""
    if len(src.state) != len(dst.state) or any(a.layer != b.layer for a, b in zip(src.state, dst.state, strict=True)):
        return [f"the prefill and decode pools list different state entries ({len(src.state)} and {len(dst.state)})"]
    blocks_of = mods["sglang.srt.disaggregation.utils"].compute_mamba_state_slice_byte_blocks
    seen: dict[tuple, str | None] = {}  # entries of identical shape slice identically
    out = []
    for i, (a, b) in enumerate(zip(src.state, dst.state, strict=True)):
        key = (a.item, b.item, a.dim, b.dim, a.outer, a.groups)
        if key not in seen:
            seen[key] = _slot_problem(blocks_of, src.tp, dst.tp, a, b)
        if seen[key] is not None:
            out.append(f"state entry {i} (layer {a.layer}): {seen[key]}")
    return _first(out, "entries")


def _first(problems: list[str], what: str) -> list[str]:
    """One finding per pair and kind: the first problem, and how many more there are."""
    if len(problems) <= 1:
        return problems
    return [f"{problems[0]} (and {len(problems) - 1} more {what})"]


def _slot_problem(blocks_of: Callable[..., list[tuple[int, int, int]]], src_tp: int, dst_tp: int,
                  a: StateEntry, b: StateEntry) -> str | None:
    written: dict[int, list[tuple[int, int]]] = {}
    for s, d in ranks(src_tp, dst_tp):
        try:
            blocks = blocks_of(
                src_item_len=a.item, dst_item_len=b.item, src_dim=a.dim, dst_dim=b.dim, outer_count=a.outer,
                src_attn_tp_size=src_tp, dst_attn_tp_size=dst_tp, dst_tp_rank_in_group=d,
                local_tp_rank_in_group=s, conv_shard_groups=list(a.groups) if a.groups else None)
        except ValueError as err:  # SGLang's own refusal of the pair (disaggregation/utils.py)
            return f"SGLang refuses to slice it from prefill rank {s} to decode rank {d}: {err}"
        for src_off, dst_off, size in blocks:
            if src_off < 0 or src_off + size > a.item:
                return f"prefill rank {s} reads bytes {src_off:,}..{src_off + size:,} of its {a.item:,} B slot"
            if dst_off < 0 or dst_off + size > b.item:
                return (f"prefill rank {s} writes bytes {dst_off:,}..{dst_off + size:,} of decode rank {d}'s "
                        f"{b.item:,} B slot")
            written.setdefault(d, []).append((dst_off, size))
    for d in range(dst_tp):
        covered = _covered(written.get(d, ()))
        if covered != b.item:
            return f"decode rank {d}'s {b.item:,} B slot receives {covered:,} B once (a gap or bytes written twice)"
    return None


def _covered(blocks: Iterable[tuple[int, int]]) -> int:
    """Bytes written exactly once, counting none where blocks overlap."""
    edges: dict[int, int] = {}
    for off, size in blocks:
        edges[off] = edges.get(off, 0) + 1
        edges[off + size] = edges.get(off + size, 0) - 1
    depth, last, once = 0, 0, 0
    for at in sorted(edges):
        if depth == 1:
            once += at - last
        depth += edges[at]
        last = at
    return once


def cross(mods: dict[str, types.ModuleType], planned: list[tuple[PointResult, Transfer | None]]) -> list[PointResult]:
    """Each point with the findings of every pair it is the decode side of: the prefill at each other
    tp of the same dtype and page size."""
    def key(p: PointResult) -> tuple:
        return tuple(sorted((a, str(v)) for a, v in p.point.items() if a != "tp"))

    out = []
    for p, dst in planned:
        found: list[Finding] = []
        tps = {p.point["tp"]}
        for q, src in planned:
            if dst is None or src is None or key(q) != key(p) or src.tp == dst.tp:
                continue
            pair = f"prefill at tp {src.tp}, decode at tp {dst.tp}: "
            these = [Finding(HEAD_SPLIT, pair + m) for m in head_split(mods, src, dst)]
            these += [Finding(STATE_SLICE, pair + m) for m in state_slices(mods, src, dst)]
            found += these
            tps |= {src.tp} if these else set()
        if not found:
            out.append(p)
            continue
        shown = " ".join(map(str, sorted(tps)))  # the pairs show it
        replay = p.replay.replace(f"--tp {p.point['tp']} ", f"--tp {shown} ")
        out.append(PointResult(p.recipe, p.point, "counterexample", (*p.findings, *found), p.packing,
                               p.parent_bytes, p.worst_padding, p.parents, replay))
    return out
