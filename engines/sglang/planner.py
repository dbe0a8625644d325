"""Build SGLang's hybrid KV pools for one point on torch's meta device, and read their views as plans.

What runs is SGLang's: the model's config class reads the published config.json
(`Qwen3NextConfig`, `Qwen3_5MoeConfig`, `KimiLinearConfig`, `KimiK3Config`, `NemotronHConfig`: CONFIGS),
`mambaish_config` picks the config the hybrid layers are read from, its `mamba2_cache_params`
gives the state shapes and dtypes (`Mamba2StateShape.create`, `KimiLinearStateShape.create` in
`configs/mamba_utils.py`) under `get_parallel().override(...)` (`runtime_context.py`),
`ModelConfig._derive_model_shapes` gives the attention shapes and `get_num_kv_heads` splits the
KV heads, `configure_kv_cache_dtype` resolves --kv-cache-dtype, and the pools are SGLang's own
classes constructed with the arguments `KVCacheConfigurator._build_hybrid_req_pool` and
`_build_hybrid_linear_kv_pool` pass them (`mem_cache/kv_cache_configurator.py`), on the meta
device: every tensor has its real sizes, strides and storage offsets and no memory. The adapter
only reads those views into plan documents, one per allocation (`document`).

The non-unified path allocates each pool's tensors separately: one conv tensor and one temporal
tensor for all Mamba layers (`MambaPool.__init__`, `memory_pool.py`), and per full-attention layer
one buffer holding K and V as two halves (`MHATokenToKVPool._create_buffers_normal`), or one
latent buffer for an MLA layer (`MLATokenToKVPool`: the latent and rope parts of a token); with
--kv-cache-dtype mxfp8, `MHATokenToKVPoolMXFP8` allocates each layer's K, V, K scales and V scales
apart, four allocations. A plan
document has one arena and one parent count for all its groups, and the Mamba pool's slots and the
KV pool's pages are counted separately (their numbers come from a memory split, not from a packing
ratio), so each allocation is its own plan: its arena is the tensor's storage, its planes are the
views into it (one per layer, the K and V halves, or the latent buffer), its parent 0 is the pool's dummy (Mamba slot 0,
`allocator/mamba.py:84-88`; KV page 0, the padding rows the pool adds: `size + page_size` rows).

Each view also has a reader: the disaggregation transfer, which SGLang tells each buffer's item
length (`HybridLinearKVPool.get_state_buf_infos` and `get_contiguous_buf_infos`, called on the
built pools as the prefill and decode workers call them) and which addresses entry p at the
buffer's pointer + p x item length; `consumer_stride` holds when that length is the view's stride.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from kvproof.engines.sglang.pairs import StateEntry, Transfer
from kvproof.engines.stubs import StubUsed
from kvproof.engines.verdict import AdapterGap

BIND_AT = (1, 2, 3, 1000)  # parent counts: the plan must be affine in N (checked, not assumed)
TRANSFER = "disaggregation transfer"  # the reader every buffer's item length is given to
# Replaces SGLang functions for one planning call (the seeded bugs): a context manager over the modules.
Patches = Callable[[dict[str, types.ModuleType]], AbstractContextManager[None]]


@dataclass(frozen=True)
class Point:
    tp: int  # attention tp (get_parallel().attn_tp_size)
    dtype: str  # --kv-cache-dtype
    page_size: int  # --page-size, as the server resolves it
    # the Mamba state dtypes (configs/mamba_utils.py:47-107): the conv states' from SGLANG_MAMBA_CONV_DTYPE
    # (environ.py:1628, bfloat16 unset), the SSM states' from --mamba-ssm-dtype, which the launch writes to
    # SGLANG_MAMBA_SSM_DTYPE (arg_groups/serving_hook.py:439-440)
    mamba_conv: str = "bfloat16"
    mamba_ssm: str = "float32"


@dataclass(frozen=True)
class Allocation:
    """One tensor allocation of a pool and the views SGLang reads it through."""

    name: str
    group: str
    parents: int  # what the pool's allocator hands out: ids 1..parents (0 is the dummy)
    tokens: int | None  # tokens per page for a KV allocation; None for per-request state
    views: tuple[tuple[str, Any], ...]  # (field id, tensor view)
    # per view: the item length the disaggregation transfer is given for it, None where SGLang registers
    # no transfer for the buffer
    items: tuple[int | None, ...]
    page_major: bool = False  # the views' first axis counts pages, not tokens


class _MetaDevice(types.ModuleType):
    """What torch.get_device_module('meta') stands for: the pools ask it for their device module
    (memory_pool.py: MHATokenToKVPool.__init__, `self.device_module = torch.get_device_module(self.device)`),
    which torch has none of for meta; any use of it raises StubUsed."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise StubUsed(f"planning used torch.get_device_module('meta').{name}: the pools are built on the meta "
                       "device, which has no streams or device calls (engines/sglang/planner.py)")


@contextmanager
def _meta_device_module(torch: Any) -> Iterator[None]:
    real = torch.get_device_module
    meta = _MetaDevice("kvproof.meta_device")

    def device_module(device: Any = None) -> Any:
        return meta if str(device) == "meta" else real(device)

    torch.get_device_module = device_module
    try:
        yield
    finally:
        torch.get_device_module = real


# model_type -> SGLang's config class for it (each class's own `model_type`), the ones kvproof plans
CONFIGS = {
    "qwen3_next": ("sglang.srt.configs.qwen3_next", "Qwen3NextConfig"),
    "qwen3_5_moe": ("sglang.srt.configs.qwen3_5", "Qwen3_5MoeConfig"),
    "kimi_linear": ("sglang.srt.configs.kimi_linear", "KimiLinearConfig"),
    "kimi_k3": ("sglang.srt.configs.kimi_k3", "KimiK3Config"),
    "nemotron_h": ("sglang.srt.configs.nemotron_h", "NemotronHConfig"),
}


def hf_config(mods: dict[str, types.ModuleType], text: dict[str, Any]) -> Any:
    """The published config.json read by SGLang's own config class for its model_type."""
    found = CONFIGS.get(text.get("model_type", ""))
    if found is None:
        raise StubUsed(f"kvproof reads model_type {', '.join(CONFIGS)} with SGLang, not {text.get('model_type')!r}")
    module, cls = found
    return getattr(mods[module], cls).from_dict(dict(text))


# (the ModelConfig module, the config.json's text) -> its ModelConfig: read once, as the pools only read it
_MODELS: dict[tuple[int, str], Any] = {}


def model(mods: dict[str, types.ModuleType], text: dict[str, Any]) -> Any:
    """SGLang's ModelConfig for the published config.json, its shapes derived (once for each text)."""
    model_config = mods["sglang.srt.configs.model_config"]
    key = (id(model_config), json.dumps(text, sort_keys=True))
    if key in _MODELS:
        return _MODELS[key]
    # ModelConfig's own shapes and head split, on an instance whose constructor never ran (it would
    # read the checkpoint folder and the launch flags): its text config as the constructor takes it
    # (model_config.py:636), _derive_model_shapes (model_config.py:1331) sets head_dim, attention_arch
    # and, for MLA, kv_lora_rank and qk_rope_head_dim from hf_config and hf_text_config; get_num_kv_heads
    # reads those and is_draft_model (model_config.py:1700-1711).
    shell = object.__new__(model_config.ModelConfig)
    shell.hf_config = hf_config(mods, text)
    shell.hf_text_config = mods["sglang.srt.utils.hf_transformers.common"].get_hf_text_config(shell.hf_config)
    shell.is_draft_model = False
    shell._derive_model_shapes()
    _MODELS[key] = shell
    return shell


def allocations(mods: dict[str, types.ModuleType], shell: Any, point: Point, parents: int,
                patches: Patches | None = None) -> tuple[list[Allocation], Transfer]:
    """Every allocation of the point's pools (`shell`: the model's ModelConfig), built for `parents` Mamba
    slots and KV pages, and what the pools tell the disaggregation transfer."""
    (built,) = at_counts(mods, shell, point, (parents,), patches)
    return built


@dataclass(frozen=True)
class _Launch:
    """What the pools' constructors are handed at a point but their sizes, read once for every size."""

    shell: Any  # the model's ModelConfig
    point: Point
    params: Any  # the Mamba state shapes and dtypes (mamba2_cache_params)
    context_len: int
    attention: tuple[int, ...]  # the full-attention layer ids
    head_num: int
    kv_dtype: Any
    full_class: type
    use_mla: bool
    latent: dict[str, int]


def at_counts(mods: dict[str, types.ModuleType], shell: Any, point: Point, counts: Sequence[int],
              patches: Patches | None = None) -> list[tuple[list[Allocation], Transfer]]:
    """`allocations` at each of `counts` parents, every pool built within one context of the point's launch
    (its tp, Mamba dtypes, the meta device, the seeded bug): what SGLang derives there from the model and the
    point alone (the state shapes, the layer ids, the KV heads per rank, the pool class) is read once for all
    sizes, as the configurator reads it once for its one pool; only the pools are built at each size."""
    import torch

    model_config = mods["sglang.srt.configs.model_config"]
    # the config the configurator reads the hybrid layers from (kv_cache_configurator.py:380): the text
    # config of a multimodal checkpoint (Qwen3.5, Kimi-K3), the config itself otherwise
    config = mods["sglang.srt.configs.hybrid_arch"].mambaish_config(shell)
    # the configurator's use_mla_backend (model_runner.py:406) picks the MLA pool and its latent sizes
    # (kv_cache_configurator.py:2624-2628)
    use_mla = shell.attention_arch == model_config.AttentionArch.MLA
    latent = {"kv_lora_rank": shell.kv_lora_rank, "qk_rope_head_dim": shell.qk_rope_head_dim} if use_mla else {}
    resolved, kv_dtype = mods["sglang.srt.mem_cache.kv_cache_dtype"].configure_kv_cache_dtype(
        server_args_kv_cache_dtype=point.dtype, model=None, model_dtype=_model_dtype(torch, shell.hf_text_config),
        is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None)
    parallel = mods["sglang.srt.runtime_context"].get_parallel()
    envs = mods["sglang.srt.environ"].envs
    # attn_dcp_size 1 and enable_cp_tp_group_sharing False: decode-context and context parallelism off,
    # the launch defaults (arg_groups/fields/parallel.py)
    with parallel.override(attn_tp_size=point.tp, attn_dcp_size=1, enable_cp_tp_group_sharing=False), \
            envs.SGLANG_MAMBA_CONV_DTYPE.override(point.mamba_conv), \
            envs.SGLANG_MAMBA_SSM_DTYPE.override(point.mamba_ssm), \
            _meta_device_module(torch), (patches(mods) if patches else nullcontext()):
        launch = _Launch(
            shell, point, config.mamba2_cache_params,
            model_config.get_context_length(shell.hf_text_config),  # model_config.py:1293
            tuple(config.full_attention_layer_ids),
            model_config.ModelConfig.get_num_kv_heads(shell, parallel.attn_tp_size, parallel.attn_dcp_size),
            kv_dtype, _full_pool_class(mods, shell, use_mla, resolved or point.dtype), use_mla, latent)
        built = [_pools(mods, launch, parents) for parents in counts]
    return [_read(mods, launch, *pools) for pools in built]


def _pools(mods: dict[str, types.ModuleType], launch: _Launch, parents: int) -> tuple[Any, Any, tuple[Any, ...]]:
    """The point's two pools at `parents` Mamba slots and KV pages (within the launch's context, at_counts), and
    what they tell the transfer: the state and KV item lengths and layer ids, and the state slicing."""
    memory_pool = mods["sglang.srt.mem_cache.memory_pool"]
    point, params = launch.point, launch.params
    # as _build_hybrid_req_pool passes them at the launch defaults: no speculative decoding, no
    # memory saver, no ReplaySSM, no page-major envelope, and the extra_buffer Mamba radix-cache
    # strategy, which --mamba-radix-cache-strategy auto resolves to for each model of CONFIGS (all in
    # _MAMBA_EXTRA_BUFFER_ARCHS) with the overlap schedule on (the default) or a page over 1 token
    # (arg_groups/overrides.py:477-483; no_buffer
    # refuses a page over 1, arg_groups/mamba_hook.py:157); its ping-pong slots are tracking
    # indices, not state tensors (memory_pool.py:1523-1531)
    req = memory_pool.HybridReqToTokenPool(
        size=parents, mamba_size=parents, mamba_spec_state_size=parents, max_context_len=launch.context_len,
        device="meta", enable_memory_saver=False, cache_params=params, mamba_layer_ids=params.layers,
        enable_mamba_extra_buffer=True)
    # as _build_hybrid_linear_kv_pool passes them: the MHA or MLA pool for the full-attention layers
    kv = memory_pool.HybridLinearKVPool(
        page_size=point.page_size, size=parents * point.page_size, dtype=launch.kv_dtype, head_num=launch.head_num,
        head_dim=launch.shell.head_dim, full_attention_layer_ids=list(launch.attention), device="meta",
        mamba_pool=req.mamba_pool, enable_memory_saver=False, enable_kv_cache_copy=False, start_layer=0,
        full_kv_pool_class=launch.full_class, quant_method=None, use_mla=launch.use_mla, **launch.latent)
    # what the pools tell the disaggregation transfer of their buffers, as the prefill and decode
    # workers register them (disaggregation/prefill.py, decode.py: kv_args.state_item_lens and
    # kv_item_lens from get_state_buf_infos and get_contiguous_buf_infos)
    _, _, state_items = kv.get_state_buf_infos()
    _, _, kv_items = kv.get_contiguous_buf_infos()
    # and what the heterogeneous-tp transfer slices each state entry by (mooncake/conn.py:2378-2422)
    slicing = (kv.get_state_dim_per_tensor(), kv.get_state_slice_outer_counts(), kv.get_state_conv_shard_groups())
    return req, kv, (state_items, kv_items, kv.get_state_layer_ids(), kv.get_kv_layer_ids(), slicing)


def _read(mods: dict[str, types.ModuleType], launch: _Launch, req: Any, kv: Any,
          told: tuple[Any, ...]) -> tuple[list[Allocation], Transfer]:
    """The pools' allocations and what they tell the transfer (_pools)."""
    model_config = mods["sglang.srt.configs.model_config"]
    state_items, kv_items, state_layers, kv_layers, slicing = told
    use_mla, attention = launch.use_mla, launch.attention
    mamba, full = req.mamba_pool, kv.full_kv_pool
    state = mamba.mamba_cache
    layers = mamba.mamba_layer_ids
    # MambaPool._iter_transfer_state_entries' order: each conv tensor's layers, then the temporal
    # tensor's (vars(mamba_cache) order), one entry per layer of each
    state_views = [[(f"mamba.conv{i}.layer{layer}", conv[j]) for j, layer in enumerate(layers)]
                   for i, conv in enumerate(state.conv)]
    state_views.append([(f"mamba.temporal.layer{layer}", state.temporal[j]) for j, layer in enumerate(layers)])
    state_item = iter(_aligned("MambaPool.get_contiguous_buf_infos", state_items, state_layers,
                               [layer for views in state_views for layer in layers[:len(views)]]))
    out = [Allocation(f"mamba.conv{i}", "mamba", mamba.size, None, tuple(views),
                      tuple(next(state_item) for _ in views)) for i, views in enumerate(state_views[:-1])]
    out.append(Allocation("mamba.temporal", "mamba", mamba.size, None, tuple(state_views[-1]),
                          tuple(next(state_item) for _ in state_views[-1])))
    # an MHA pool's entries are every layer's K buffer, then every layer's V buffer (_pd_registerable_tensors:
    # k_buffer + v_buffer); an MLA pool's, each layer's one latent buffer
    kv_item = _aligned(f"{type(full).__name__}.get_contiguous_buf_infos", kv_items, kv_layers,
                       list(attention) * (1 if use_mla else 2))
    # MHATokenToKVPoolMXFP8's UE8M0 scales, one tensor per layer of K and of V (memory_pool.py:3940-3951);
    # a hybrid pool registers none of them for the transfer: setup_state_kv_args adds them only for a pool
    # that is itself an MHATokenToKVPoolMXFP8 (disaggregation/utils.py:1513-1518), which HybridLinearKVPool
    # is not (its branch, 1598-1631, registers the Mamba state)
    scales = None if use_mla else full._mha_scale_buffers()
    layout = mods["sglang.srt.mem_cache.device_pool_info"].KVScaleLayout
    for j, layer in enumerate(attention):
        # an MLA layer's one latent buffer (MLATokenToKVPool.kv_buffer), an MHA layer's K and V buffers
        views = (((f"kv.layer{layer}.latent", full.kv_buffer[j], kv_item[j]),) if use_mla else
                 ((f"kv.layer{layer}.k", full.k_buffer[j], kv_item[j]),
                  (f"kv.layer{layer}.v", full.v_buffer[j], kv_item[len(attention) + j])))
        for name, tensors in _by_storage(f"kv.layer{layer}", views):
            out.append(Allocation(name, "full_attention", full.size // full.page_size, full.page_size,
                                  tuple((fid, t) for fid, t, _ in tensors), tuple(i for _, _, i in tensors)))
        if scales is not None:
            # the interleaved layout leads with pages (memory_pool.py:3918-3936), the token layout with rows
            out += [Allocation(f"kv.layer{layer}.{part}_scale", "full_attention", full.size // full.page_size,
                               full.page_size, ((f"kv.layer{layer}.{part}_scale", buffers[j]),), (None,),
                               page_major=scales.layout == layout.MXFP8_INTERLEAVED)
                    for part, buffers in (("k", scales.k), ("v", scales.v))]
    # prefill.py:336-340: an MHA pool's head_num and the model's total KV heads (an MLA pool gives neither)
    entries = tuple(StateEntry(layer, item, dim, outer, tuple(groups) if groups else None)
                    for layer, item, dim, outer, groups in zip(state_layers, state_items, *slicing, strict=True))
    return out, Transfer(launch.point.tp, None if use_mla else full.head_num,
                         model_config.ModelConfig.get_total_num_kv_heads(launch.shell), entries)


def _full_pool_class(mods: dict[str, types.ModuleType], shell: Any, use_mla: bool, dtype: str) -> type:
    """The full-attention pool class SGLang's configurator picks for a hybrid model
    (`_hybrid_full_attention_pool_class`, kv_cache_configurator.py:2716-2740: the MLA pool, or for
    --kv-cache-dtype mxfp8 the block-scaled MHA pool), called on a configurator whose constructor never
    ran, given what it reads: use_mla_backend, the model config, the runner's resolved dtype string
    (model_runner.py:1572-1576)."""
    memory_pool = mods["sglang.srt.mem_cache.memory_pool"]
    configurator = object.__new__(mods["sglang.srt.mem_cache.kv_cache_configurator"].KVCacheConfigurator)
    configurator.use_mla_backend, configurator.model_config, configurator.kv_cache_dtype_str = use_mla, shell, dtype
    chosen: type = configurator._hybrid_full_attention_pool_class(
        mha_pool_class=memory_pool.MHATokenToKVPool, mla_pool_class=memory_pool.MLATokenToKVPool,
        dsa_pool_class=memory_pool.DSATokenToKVPool)
    return chosen


def _by_storage(name: str, views: tuple[tuple[str, Any, int | None], ...]
                ) -> list[tuple[str, list[tuple[str, Any, int | None]]]]:
    """A layer's views grouped by the tensor allocation they lie in: one allocation named `name` when they
    share one (the plain MHA pool's fused K/V buffer), else one per view, named by its field."""
    groups: dict[int, list[tuple[str, Any, int | None]]] = {}
    for fid, view, item in views:
        groups.setdefault(id(view._base if view._base is not None else view), []).append((fid, view, item))
    return [(name, group) for group in groups.values()] if len(groups) == 1 else \
        [(group[0][0], group) for group in groups.values()]


def _aligned(call: str, items: list[int], layers: list[int], expected: list[int]) -> list[int]:
    """SGLang's item lengths, one per view the adapter reads in its order (the layer ids SGLang
    gives its entries are the views' layers), or the adapter no longer follows it."""
    if len(items) != len(expected) or list(layers) != expected:
        raise AdapterGap(call, f"{len(items)} transfer entries of layers {list(layers)[:8]}... for the "
                         f"{len(expected)} views kvproof reads, of layers {expected[:8]}...")
    return [int(i) for i in items]


def _model_dtype(torch: Any, config: Any) -> Any:
    """The model's dtype as the checkpoint states it (ModelConfig's dtype "auto": the config's)."""
    stated = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if stated is None:
        raise StubUsed("the config states no dtype; kvproof takes none in its place")
    return stated if isinstance(stated, torch.dtype) else getattr(torch, str(stated))


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def document(allocation: Allocation) -> dict:
    """One allocation as kvproof's plan document: its arena is the tensor's storage (arena_bytes),
    each view a plane whose slab starts at the view's storage offset, one page of it per slot (a
    state view's first axis) or per `tokens` rows (a KV view), the page stride the view's own
    stride. Every group has packing 1: a page per parent on each plane. The alignment is the
    element size every typed view's offsets are multiples of. Each field's reader walks it by the
    transfer item length SGLang gives for it."""
    planes, fields = [], []
    alignment = 1
    arena = None
    for (fid, view), transfer in zip(allocation.views, allocation.items, strict=True):
        if not view.is_contiguous():
            raise StubUsed(f"{fid}: a view with strides {view.stride()} is not translated by kvproof yet")
        item = view.element_size()
        alignment = math.lcm(alignment, item)
        base = view._base if view._base is not None else view
        size = base.untyped_storage().nbytes()
        if arena is not None and size != arena:
            raise StubUsed(f"{allocation.name}: its views lie in storages of {arena} and {size} bytes")
        arena = size
        rows = 1 if allocation.page_major else allocation.tokens or 1
        stride = view.stride(0) * item * rows
        shape = [rows, *view.shape[1:]] if allocation.tokens and not allocation.page_major else list(view.shape[1:])
        planes.append({"id": fid, "bytes": stride, "arena_offset": view.storage_offset() * item})
        field: dict[str, Any] = {"id": fid, "group": allocation.group, "plane": fid, "shape": [int(d) for d in shape],
                                 "dtype": _dtype(view), "offset": 0, "stride": stride, "exact_stride": False}
        if allocation.tokens:
            field["tokens"] = allocation.tokens
        # mooncake addresses entry p of a buffer at its pointer + p * item length (disaggregation/mooncake/
        # conn.py:1188-1190, 1248-1250): a KV page or a state slot
        if transfer is not None:
            field["readers"] = [{"name": TRANSFER, "walks": "item", "item_bytes": transfer}]
        fields.append(field)
    return {
        "num_parents": allocation.parents, "parent_bytes": sum(p["bytes"] for p in planes), "alignment": alignment,
        "max_padding": None, "arena_bytes": arena, "planes": planes,
        "groups": [{"id": allocation.group, "packing": 1, "page_count": 1 + allocation.parents}],
        "fields": fields,
    }


def plan(mods: dict[str, types.ModuleType], text: dict[str, Any], point: Point,
         patches: Patches | None = None) -> tuple[dict[str, dict[int, dict]], Transfer]:
    """Each allocation's documents at every parent count of BIND_AT, and what the pools tell the
    transfer (the same at every parent count but for the buffers' lengths)."""
    out: dict[str, dict[int, dict]] = {}
    transfers = []
    shell = model(mods, text)
    for n, (built, transfer) in zip(BIND_AT, at_counts(mods, shell, point, BIND_AT, patches), strict=True):
        transfers.append(transfer)
        for allocation in built:
            out.setdefault(allocation.name, {})[n] = document(allocation)
    if any(t != transfers[0] for t in transfers):
        raise AdapterGap("HybridLinearKVPool.get_state_buf_infos", "the transfer's item lengths or slicing change "
                         "with the pool's size, which kvproof does not read")
    return out, transfers[0]
