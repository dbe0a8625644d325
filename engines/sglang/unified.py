"""SGLang's unified memory pool (--enable-unified-memory) at a point: one byte buffer two allocators share.

For a hybrid Mamba model the server's configurator builds the pool with `init_unified_mamba_pools`
(mem_cache/kv_cache_configurator.py:865-949): a `UnifiedKVPool` (mem_cache/unified_memory_pool.py)
whose one uint8 buffer holds the Mamba state entries, growing up from byte 0, and the full-attention
KV entries, growing down from the top, each sub-pool's per-layer views spanning the whole buffer
with its entry as the slot stride (layout/token_major.py); a `MultiEndedAllocator` per end
(allocator/unified_sub_pool.py) keeps the two apart by its watermark. Here that call is made with
the configurator's arguments at the launch defaults, on the meta device, and what SGLang built is
read: each sub-pool's views (sizes, strides, storage offsets into the one buffer) and each end's
allocator (its page bytes, first page, page count and the sink both ends reserve).

Each sub-pool is one plan document: its parent is one slot's entry, page p is slot p, every view a
field at its storage offset within the entry, the arena the whole buffer. Its end (spec/plan.schema.json:
`groups[].end`) carries the allocators' numbers and what its allocations reach, for fronts_never_cross and
sink_page, and every field the alignments token_major.py:21-22 states, for entry_alignment. The sub-pools' slot
counts are floors of one byte count, not a line in one parent count, so the pool is checked as built at one
size (SLOTS).

What an end's allocations reach is measured on SGLang's own allocators, never modelled: with the other end put
at each watermark its allocations reach (every one from its empty watermark to the farthest they reach with this
end empty), this end asks its `available_size()`, the gate every alloc path checks first
(allocator/unified_sub_pool.py:1160, 1225, 1288, 2122), for the pages it may take from empty. Where that
would take its front past the other's, the allocation is made (`alloc`, so `_extend_watermark`'s backstop has
its say) and the largest allocation within the gate's count that SGLang makes is the one recorded. An end's
earlier pages only move its start: SGLang's gate counts whole pages of the gap between the fronts, so from any
start it reaches the same front as from empty; the walk holds SGLang to that at the first watermark of each run,
where it also allocates one page first and asks the gate again (NOT VERIFIED (adapter) where the two differ).
Frees and lazy compaction's holes are outside the walk. A crossing is replayed on the allocators, and
SGLang's `_chain_byte_accounting_violations` says what it sees there.
"""

from __future__ import annotations

import json
import math
import types
from contextlib import nullcontext
from typing import Any

from kvproof.engines.sglang import planner
from kvproof.engines.stubs import StubUsed
from kvproof.engines.verdict import AdapterGap, Finding, PointResult
from kvproof.spec import encoding
from kvproof.spec import properties as P
from kvproof.spec.catalog import ConfigError
from kvproof.spec.facts import OTHER, Facts
from kvproof.spec.plan_reader import concrete_facts
from kvproof.spec.smt import lift

POOL = "sglang.srt.mem_cache.unified_memory_pool"
ALLOCATOR = "sglang.srt.mem_cache.allocator.unified_sub_pool"
LAYOUT = "sglang.srt.mem_cache.layout.token_major"
# request slots (and pages of full-attention tokens) the pool is built for: the fewest SGLang's bs=1 floor, 3 state
# slots and the sink (unified_memory_pool.py:1692-1703), admits at every point, as the sink is the larger of a state
# slot and a page of full-attention entries (_reserved_floor_bytes, 388-409)
SLOTS = 4
SUB_POOLS = ("mamba", "full")  # init_unified_mamba_pools' names: Mamba state grows up, full-attention KV down


def build(mods: dict[str, types.ModuleType], shell: Any, point: planner.Point, slots: int = SLOTS,
          patches: planner.Patches | None = None) -> Any:
    """SGLang's unified pool bundle for the point (`shell`: the model's ModelConfig, planner.model) at `slots`
    request slots, as _init_unified_mamba_pools builds it (kv_cache_configurator.py:876-949), without a
    profiled budget: its token-count sizing (kv_cache_configurator.py:3223), max_total_num_tokens = slots
    pages."""
    import torch

    model_config = mods["sglang.srt.configs.model_config"]
    config = mods["sglang.srt.configs.hybrid_arch"].mambaish_config(shell)  # as planner.allocations
    use_mla = shell.attention_arch == model_config.AttentionArch.MLA
    _, kv_dtype = mods["sglang.srt.mem_cache.kv_cache_dtype"].configure_kv_cache_dtype(
        server_args_kv_cache_dtype=point.dtype, model=None,
        model_dtype=planner._model_dtype(torch, shell.hf_text_config), is_draft_worker=False, is_dflash=False,
        speculative_draft_attention_backend=None)
    parallel = mods["sglang.srt.runtime_context"].get_parallel()
    envs = mods["sglang.srt.environ"].envs
    with parallel.override(attn_tp_size=point.tp, attn_dcp_size=1, enable_cp_tp_group_sharing=False), \
            envs.SGLANG_MAMBA_CONV_DTYPE.override(point.mamba_conv), \
            envs.SGLANG_MAMBA_SSM_DTYPE.override(point.mamba_ssm), \
            planner._meta_device_module(torch), (patches(mods) if patches else nullcontext()):
        params = config.mamba2_cache_params
        # one pipeline stage: layer_info spans every layer, so no layer id is filtered out (876-897); no
        # speculative decoding: no fused draft (_fused_draft_for_mamba_factory, 1385-1404) and
        # extra_max_context_len 4 (882-884); the extra_buffer radix-cache strategy, as planner.allocations
        # (its lazy variant only for extra_buffer_lazy, arg_groups/fields/exec_.py:479-482); no disaggregation
        # (need_sort False, no decode pre-allocation); no CUDA stream on the meta device; lazy compaction, the
        # default unless SGLANG_DISABLE_LAZY_COMPACTION is set (kv_cache_configurator.py:194-199)
        return mods[POOL].init_unified_mamba_pools(
            device="meta", kv_cache_dtype=kv_dtype,
            head_num=model_config.ModelConfig.get_num_kv_heads(shell, parallel.attn_tp_size, parallel.attn_dcp_size),
            head_dim=shell.head_dim, v_head_dim=shell.v_head_dim, fused_draft=None, page_size=point.page_size,
            start_layer=0, end_layer=shell.hf_text_config.num_hidden_layers, is_draft_worker=False,
            use_mla_backend=use_mla, kv_lora_rank=shell.kv_lora_rank if use_mla else None,
            qk_rope_head_dim=shell.qk_rope_head_dim if use_mla else None,
            mamba_layer_ids=list(params.layers), full_attention_layer_ids=list(config.full_attention_layer_ids),
            mamba2_cache_params=params, model_context_len=model_config.get_context_length(shell.hf_text_config),
            extra_max_context_len=4, max_total_num_tokens=slots * point.page_size, max_mamba_cache_size=slots,
            max_num_reqs=slots, enable_memory_saver=False, enable_mamba_extra_buffer=True,
            enable_mamba_extra_buffer_lazy=False, speculative_num_draft_tokens=None, disable_overlap_schedule=False,
            need_sort=False, decode_pre_alloc_size=0, forward_stream=None, lazy_compaction=True,
            unified_total_bytes=None)


def _allocators(bundle: Any) -> dict[str, Any]:
    """Each sub-pool's MultiEndedAllocator (UnifiedMambaTokenToKVPoolAllocator's two ends)."""
    composite = bundle.token_to_kv_pool_allocator
    return {"mamba": composite.mamba_allocator, "full": composite.full_attn_allocator}


def _views(module: types.ModuleType, pool: Any, name: str) -> list[tuple[str, Any, int, int]]:
    """(field id, a view, the rows one field of it holds, its slot axis) of a sub-pool: a dense layer's K, V
    or latent view (slots first), one field each; a Mamba state tensor (layers, slots, ...), whose layers
    lie back to back in the entry (build_mamba_entry_views: layer stride = row), one field of every layer."""
    spec = pool.spec(name)
    if isinstance(spec, module.MambaSubPoolSpec):
        conv, temporal = pool.mamba_views_for(name)
        out = []
        for i, view in enumerate([*conv, temporal]):
            tag = f"conv{i}" if i < len(conv) else "temporal"
            if view.stride(0) != math.prod(view.shape[2:]):
                raise StubUsed(f"{name}.{tag}: layers {view.stride(0)} elements apart, not back to back, which "
                               "kvproof does not translate")
            out.append((f"{name}.{tag}", view, int(view.shape[0]), 1))
        return out
    if isinstance(spec, module.MLASubPoolSpec):
        return [(f"{name}.layer{i}.latent", view, 1, 0) for i, view in enumerate(pool.mla_views_for(name))]
    k, v = pool.mha_views_for(name)
    return [(f"{name}.layer{i}.{part}", view, 1, 0) for i in range(len(k)) for part, view in (("k", k[i]), ("v", v[i]))]


def document(module: types.ModuleType, bundle: Any, name: str, alignments: tuple[int, int],
             seeded: bool = False) -> dict:
    """One sub-pool of the bundle's buffer as a plan document (module docstring); `module`: SGLang's
    unified_memory_pool; `seeded`: under a seeded bug."""
    pool = bundle.unified_memory_pool
    own, peer = _ends(bundle, name)
    raw = pool._raw
    fields, slots, entry, alignment = [], None, None, 1
    for fid, view, rows, slot_axis in _views(module, pool, name):
        item = view.element_size()
        alignment = math.lcm(alignment, item)
        if view.untyped_storage().nbytes() != raw.untyped_storage().nbytes():
            raise StubUsed(f"{fid}: a view outside the pool's one buffer")
        stride, count = view.stride(slot_axis) * item, int(view.shape[slot_axis])
        if (entry, slots) not in ((None, None), (stride, count)):
            raise StubUsed(f"{fid}: {count} slots {stride} B apart, where the sub-pool's other views have {slots} "
                           f"of {entry} B")
        entry, slots = stride, count
        inner = [int(d) for d in view.shape[slot_axis + 1:]]
        shape = [rows, *inner] if rows > 1 else inner
        fields.append({"id": fid, "group": name, "plane": f"{name}.entry", "shape": shape,
                       "dtype": planner._dtype(view), "offset": view.storage_offset() * item, "stride": stride,
                       "exact_stride": False, "aligned": {"entry": alignments[0], "row": alignments[1], "rows": rows}})
    assert entry is not None and slots is not None
    end = {"grows": own.grow_direction, "page_bytes": own.entry_bytes_per_page, "min_page": own.min_page_index,
           "pages": own.num_pages, "sink_bytes": pool._reserved_floor,
           "peer": {"page_bytes": peer.entry_bytes_per_page, "min_page": peer.min_page_index,
                    "pages": peer.num_pages}, "reach": reach(bundle, name, seeded)}
    return {
        "num_parents": slots - 1, "parent_bytes": entry, "alignment": alignment, "max_padding": None,
        "arena_bytes": raw.untyped_storage().nbytes(),
        "planes": [{"id": f"{name}.entry", "bytes": entry, "arena_offset": pool.anchor_bytes(name)}],
        "groups": [{"id": name, "packing": 1, "page_count": slots, "end": end}], "fields": fields,
    }


def _ends(bundle: Any, name: str) -> tuple[Any, Any]:
    """(the sub-pool's allocator, the other end's)."""
    allocators = _allocators(bundle)
    return allocators[name], allocators[next(n for n in SUB_POOLS if n != name)]


def _put(allocator: Any, watermark: int) -> None:
    """An end at `watermark`, as its allocations from empty leave it (lazy compaction: live pages = its span)."""
    allocator.watermark_physical = watermark
    allocator.live_page_count = allocator._allocated_pages()


def _step(allocator: Any) -> int:
    return 1 if allocator.grow_direction == "up" else -1


def _apart(own: Any, peer: Any, own_watermark: int) -> bool:
    """The ends' byte ranges disjoint with this end at `own_watermark` and the other where it is."""
    return bool(P.fronts_apart(*P.fronts(own.grow_direction, own_watermark, own.entry_bytes_per_page,
                                         peer.watermark_physical, peer.entry_bytes_per_page)))


# (SGLang's allocator class, both ends' numbers) -> the end's reach runs: ends built alike walk alike (the other
# dtypes of a point, its Mamba dtypes where the entries come out the same size); never under a seeded bug. The
# class itself is the key, not its id, so another source's allocators loaded later never meet this one's walks
_WALKED: dict[tuple[Any, ...], list[dict[str, int]]] = {}


def _numbers(allocator: Any) -> tuple[Any, ...]:
    """What an allocator's walk depends on: how it was built (MultiEndedAllocator.__init__'s arguments)."""
    return (allocator.grow_direction, allocator.entry_bytes_per_page, allocator.min_page_index, allocator.num_pages,
            allocator.page_size, allocator.lazy_compaction, allocator.unified_buffer.total_bytes)


def reach(bundle: Any, name: str, seeded: bool = False) -> list[dict[str, int]]:
    """The end's `reach` runs (module docstring), ascending in the other end's watermark; both ends cleared after;
    `seeded`: under a seeded bug, walked afresh."""
    own, peer = _ends(bundle, name)
    key = (type(own), _numbers(own), _numbers(peer))
    if not seeded and key in _WALKED:
        return [dict(r) for r in _WALKED[key]]
    runs = _walk(own, peer)
    if not seeded:
        _WALKED[key] = [dict(r) for r in runs]
    return runs


def _farthest(own: Any, peer: Any, first: int = 0) -> int | None:
    """The watermark the empty end's allocations reach, with the other end where it is, after an allocation of
    `first` pages (None where SGLang refuses that): what its gate then admits, or, where that would cross the
    other's front, what the largest allocation within it that SGLang makes leaves (the backstop may refuse the
    whole and take less). The end is left empty."""
    def entered() -> bool:
        return not first or own.alloc(first * own.page_size) is not None

    start = own.watermark_physical
    if not entered():
        own.clear()
        return None
    pages = own.available_size() // own.page_size
    farthest = own.watermark_physical + _step(own) * pages
    if _apart(own, peer, farthest):
        if first:
            own.clear()
        return farthest
    low, high = 0, pages  # the most pages an allocation takes lies in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        own.clear()
        taken = entered() and own.alloc(middle * own.page_size) is not None
        low, high = (middle, high) if taken else (low, middle - 1)
    own.clear()
    return start + _step(own) * (first + low)


def _same_from_a_page_in(own: Any, peer: Any, farthest: int) -> None:
    """The end, one page in, reaches where it reached from empty."""
    if farthest == own.watermark_physical:
        return
    again = _farthest(own, peer, 1)
    if again is not None and again != farthest:
        raise AdapterGap(f"{ALLOCATOR}.MultiEndedAllocator.available_size",
                         f"with the other end at watermark {peer.watermark_physical}, the end reaches {farthest} from "
                         f"empty but {again} one page in: its reach depends on where it starts, which the walk from "
                         "empty does not cover")


def _walk(own: Any, peer: Any) -> list[dict[str, int]]:
    """Every watermark the other end's allocations reach with this end empty, and this end's farthest at each."""
    own.clear()
    peer.clear()
    rows: dict[int, int] = {}
    try:
        last = _farthest(peer, own)
        assert last is not None
        for q in range(peer.watermark_physical, last + _step(peer), _step(peer)):
            _put(peer, q)
            farthest = _farthest(own, peer)
            assert farthest is not None
            rows[q] = farthest
            if rows.get(q - _step(peer)) != rows[q]:
                _same_from_a_page_in(own, peer, rows[q])
    finally:
        own.clear()
        peer.clear()
    runs: list[dict[str, int]] = []
    for q in sorted(rows):
        if runs and runs[-1]["own"] == rows[q] and runs[-1]["peer_to"] == q - 1:
            runs[-1]["peer_to"] = q
        else:
            runs.append({"peer_from": q, "peer_to": q, "own": rows[q]})
    return runs


def replayed(mods: dict[str, types.ModuleType], bundle: Any, name: str, own_watermark: int, peer_watermark: int) -> str:
    """What SGLang's own allocators say of a crossing kvproof found: the other end at `peer_watermark`, this end
    allocates from empty to `own_watermark`, and _chain_byte_accounting_violations reads the chain; both ends are
    cleared after."""
    own, peer = _ends(bundle, name)
    module = mods[ALLOCATOR]
    own.clear()
    peer.clear()
    try:
        _put(peer, peer_watermark)
        start = own.watermark_physical
        if own.alloc(abs(own_watermark - start) * own.page_size) is None or own.watermark_physical != own_watermark:
            raise AdapterGap(f"{ALLOCATOR}.MultiEndedAllocator.alloc",
                             f"the {name} end's allocation from watermark {start} to {own_watermark}, with the other "
                             f"end at {peer_watermark}, no longer does what the walk it was measured by did")
        said = [m for m in module._chain_byte_accounting_violations(module._end_pair_chain(own, peer))
                if m.startswith("[chain]")]
    finally:
        own.clear()
        peer.clear()
    return "; ".join(said) or "SGLang's _chain_byte_accounting_violations reports nothing"


def _least(facts: Facts) -> dict[str, int]:
    """The crossing with the other end at its lowest watermark: one witness per sub-pool whatever the solver
    picks (a bisection on the other end's watermark over the runs)."""
    group = facts.groups[0]
    crossing = encoding.front_crossing(group)
    witness = facts.witness(crossing)
    assert witness is not None and group.end is not None
    low, high = group.end.reach[0].peer_from, witness["q"]
    while low < high:
        middle = (low + high) // 2
        found = facts.witness(crossing, lift(middle) >= OTHER)
        if found is None:
            low = middle + 1
        else:
            witness, high = found, found["q"]
    return dict(witness)


# (SGLang's unified_memory_pool module, a sub-pool's document) -> its findings, parent bytes and padding: points
# whose pools are byte for byte the same (--kv-cache-dtype auto and bf16 of a bf16 checkpoint, fp8_e4m3 and
# fp8_e5m2, both stored as uint8) are checked once; never under a seeded bug, which may change what a replay says
Checked = tuple[tuple[Finding, ...], int, float]
_SEEN: dict[tuple[types.ModuleType, str], Checked] = {}


def checked(mods: dict[str, types.ModuleType], text: dict[str, Any], recipe: str, point: dict[str, Any],
            planned: planner.Point, replay: str, patches: planner.Patches | None = None) -> dict[str, PointResult]:
    """Each sub-pool's result, every crossing of the fronts replayed on SGLang's allocators."""
    layout = mods[LAYOUT]
    alignments = (layout.ENTRY_ALIGN_BYTES, layout.ROW_ALIGN_BYTES)
    bundle = build(mods, planner.model(mods, text), planned, SLOTS, patches)
    out = {}
    for name in SUB_POOLS:
        with patches(mods) if patches else nullcontext():  # the allocators' walk and replay under the seeded bug too
            doc = document(mods[POOL], bundle, name, alignments, patches is not None)
            key = (mods[POOL], json.dumps(doc, sort_keys=True))
            done = _SEEN.get(key) if patches is None else None
            if done is None:
                done = _check(mods, bundle, name, doc)
                if patches is None:
                    _SEEN[key] = done
        found, parent_bytes, padding = done
        out[f"unified.{name}"] = PointResult(recipe, point, "counterexample" if found else "ok", found, {name: 1},
                                             parent_bytes, padding, None, replay)
    return out


def _check(mods: dict[str, types.ModuleType], bundle: Any, name: str, doc: dict) -> Checked:
    try:
        facts = concrete_facts(doc)
    except ConfigError as err:
        raise AdapterGap("unified.document", f"SGLang's {name} sub-pool read into a plan kvproof refuses: "
                         f"{err}") from None
    found = []
    for v in encoding.violations(facts, tuple(P.PROPERTIES)):
        message = v.message
        if v.property == "fronts_never_cross":  # said of the witness SGLang's allocators replay
            witness = _least(facts)
            message = (f"{encoding.front_message(facts.groups[0], witness)}; "
                       f"{replayed(mods, bundle, name, witness['p'], witness['q'])}")
        found.append(Finding(v.property, message))
    return tuple(found), facts.parent_bytes, float(P.padding(facts.parent_bytes, 1, facts.raw(name)))
