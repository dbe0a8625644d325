"""mla_decode against its float64 oracle, and the end-to-end reason the exact stride matters.

Outputs are poisoned with NaN inside guard rows before each run; the cache must come back
unchanged. Unread cache rows hold random bytes (NaN patterns included), so a kernel that reads
past a request's length, or a masked row, shows up as a mismatch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_tolerances import DEVICE, assert_close, examples, to_device

from kvproof.impl import faults
from kvproof.impl.packer import Binding
from kvproof.impl.recipe import plan_model
from kvproof.kernels import mla_decode as mla_decode_module
from kvproof.kernels.latent_format import PAGE_TOKENS, WIDTH, page_offsets
from kvproof.kernels.mla_decode import mla_decode
from kvproof.kernels.store_latent import store_latent
from kvproof.kernels.views import field_pages, latent_cache
from kvproof.oracles import mla_decode as oracle
from kvproof.spec.catalog import load_model

pytestmark = pytest.mark.kernels

K3 = load_model("kimi-k3")
K3_TP = (1, 2, 4, 8, 32)  # 96, 48, 24, 12 and 3 heads per rank
CACHE_TORCH = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16}


def cache_values(cache: torch.Tensor) -> np.ndarray:
    """What a uint8 (fp8) or bf16 cache holds, as float64: the values the oracle is fed."""
    return (cache.view(torch.float8_e4m3fn) if cache.dtype == torch.uint8 else cache).double().cpu().numpy()


def bits(cache: torch.Tensor) -> torch.Tensor:
    """Raw patterns, so that NaN garbage compares equal to itself."""
    return cache if cache.dtype == torch.uint8 else cache.view(torch.int16)


def page_table(rng: np.random.Generator, lens: list[int], pages: range) -> np.ndarray:
    """Distinct pages from `pages`, in random order, for each request; unused entries 0."""
    need = [-(-n // PAGE_TOKENS) for n in lens]
    table = np.zeros((len(lens), max(need, default=0) + 1), dtype=np.int32)
    free = rng.permutation(np.array(pages))
    for r, k in enumerate(need):
        table[r, :k], free = free[:k], free[k:]
    return table


def check_decode(cache: torch.Tensor, table: np.ndarray, lens: list[int], heads: int, seed: int, *,
                 q_dtype: torch.dtype = torch.float32, splits: int = 1, want_cache: np.ndarray | None = None,
                 what: str = "") -> None:
    """Decode through `cache` and compare with the oracle fed `want_cache` (default: what the
    cache holds)."""
    rng = np.random.default_rng(seed)
    batch = len(lens)
    q_lat = torch.from_numpy(rng.standard_normal((batch, heads, 512), dtype=np.float32)).to(q_dtype)
    q_rope = torch.from_numpy(rng.standard_normal((batch, heads, 64), dtype=np.float32)).to(q_dtype)
    scale = float(rng.uniform(0.03, 0.2))
    lens_t = torch.tensor(lens, dtype=torch.int32)
    want_o, want_lse = oracle.mla_decode(q_lat.double().numpy(), q_rope.double().numpy(),
                                         cache_values(cache) if want_cache is None else want_cache,
                                         table, lens_t.numpy(), scale, num_splits=splits)
    o_buf = to_device(rng.standard_normal((batch + 2, heads, 512), dtype=np.float32))
    lse_buf = to_device(rng.standard_normal((batch + 2, heads), dtype=np.float32))
    o_buf[1:-1], lse_buf[1:-1] = float("nan"), float("nan")
    guards = [o_buf[[0, -1]].clone(), lse_buf[[0, -1]].clone()]
    cache_before = cache.clone()

    o, lse = mla_decode(to_device(q_lat), to_device(q_rope), cache, to_device(table), to_device(lens_t), scale,
                        num_splits=splits, out=(o_buf[1:-1], lse_buf[1:-1]))

    what = f"{what} heads={heads} lens={lens} splits={splits} q={q_dtype}"
    assert o.data_ptr() == o_buf[1].data_ptr() and lse.data_ptr() == lse_buf[1].data_ptr()
    assert torch.equal(o_buf[[0, -1]], guards[0]) and torch.equal(lse_buf[[0, -1]], guards[1]), f"{what}: guard"
    assert torch.equal(bits(cache), bits(cache_before)), f"{what}: the cache changed"
    assert_close(o, want_o, "float32", f"{what}: o")
    assert_close(lse, want_lse, "float32", f"{what}: lse")


def dense_case(rng: np.random.Generator, lens: list[int], cache_dtype: str) -> tuple[torch.Tensor, np.ndarray]:
    """A dense cache of random bytes with each request's rows set to random values of the cache
    dtype (everything outside them stays garbage, NaN patterns included)."""
    pages = sum(-(-n // PAGE_TOKENS) for n in lens) + 2
    storage = torch.uint8 if cache_dtype == "fp8" else torch.bfloat16
    raw = torch.from_numpy(rng.integers(0, 256, (pages, PAGE_TOKENS, WIDTH * storage.itemsize), dtype=np.uint8))
    cache = raw.view(storage)
    table = page_table(rng, lens, range(1, pages))
    for r, n in enumerate(lens):
        t = np.arange(n)
        rows = torch.from_numpy(rng.standard_normal((n, WIDTH), dtype=np.float32))
        cache[table[r, t // PAGE_TOKENS], t % PAGE_TOKENS] = rows.to(CACHE_TORCH[cache_dtype]).view(storage)
    return to_device(cache), table


@settings(max_examples=examples(20))
@given(
    tp=st.sampled_from(K3_TP),
    lens=st.lists(st.integers(0, 3 * PAGE_TOKENS), min_size=1, max_size=3),
    cache_dtype=st.sampled_from(["fp8", "bf16"]),
    q_dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    splits=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_oracle(tp: int, lens: list[int], cache_dtype: str, q_dtype: torch.dtype, splits: int,
                        seed: int) -> None:
    cache, table = dense_case(np.random.default_rng(seed), lens, cache_dtype)
    check_decode(cache, table, lens, K3.mla_heads // tp, seed, q_dtype=q_dtype, splits=splits, what=cache_dtype)


@pytest.mark.parametrize("tp", K3_TP)
def test_k3_heads_per_rank(tp: int) -> None:
    """Every K3 head count per rank, ragged lengths with partial last pages, split KV."""
    lens = [200, 77, 129]
    cache, table = dense_case(np.random.default_rng(tp), lens, "fp8")
    check_decode(cache, table, lens, K3.mla_heads // tp, tp, splits=2, what="fp8")


def test_gpu_step_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU walks a page in 32-token steps (the interpreter takes a page per step): the
    online softmax across steps inside one page must agree too."""
    monkeypatch.setattr(mla_decode_module, "BLOCK_N", 32)
    lens = [150, 33]
    cache, table = dense_case(np.random.default_rng(6), lens, "bf16")
    check_decode(cache, table, lens, 24, 6, splits=2, what="bf16 32-token steps")


def test_empty_requests_and_partitions() -> None:
    """A request with no tokens gets o = 0 and lse = -inf; more splits than pages leave empty
    partitions that merge_state must pass over."""
    lens = [0, 5, 130]
    cache, table = dense_case(np.random.default_rng(1), lens, "bf16")
    check_decode(cache, table, lens, 12, 1, splits=3, what="bf16")


@dataclasses.dataclass(frozen=True)
class ArenaCase:
    arena: torch.Tensor
    binding: Binding
    field_id: str
    table: np.ndarray
    lens: list[int]
    want_cache: np.ndarray  # float64 values the oracle reads; NaN where nothing was stored


def write_arena(policy: str) -> ArenaCase:
    """K3 fp8 at tp 4, one layer's tokens written through the plan's real field offsets
    (store_latent into the field view with the plan's stride).

    The plan is bound with the exact-stride check switched off: what an engine without the
    check would run (Plan.bind refuses the rejected pinned12 plan, so its violations are
    dropped here on purpose)."""
    plan = plan_model(K3, 4, "fp8", policy).plan
    binding = dataclasses.replace(plan, violations=()).bind(1)
    rng = np.random.default_rng(4)
    arena = to_device(rng.integers(0, 256, binding.arena_bytes, dtype=np.uint8))
    field_id = binding.plan.fields_of("full_attention")[7].id
    lens = [140, 129, 3]
    table = page_table(rng, lens, range(1, binding.page_count("full_attention")))
    seq = np.repeat(np.arange(len(lens), dtype=np.int32), lens)
    pos = np.concatenate([np.arange(n, dtype=np.int32) for n in lens])
    latent = torch.from_numpy(rng.standard_normal((seq.size, WIDTH), dtype=np.float32))
    store_latent(field_pages(arena, binding, field_id), to_device(latent), to_device(table), to_device(seq),
                 to_device(pos), "fp8")
    want_cache = np.full((binding.page_count("full_attention"), PAGE_TOKENS, WIDTH), np.nan)
    want_cache[table[seq, pos // PAGE_TOKENS], pos % PAGE_TOKENS] = latent.to(torch.float8_e4m3fn).double().numpy()
    return ArenaCase(arena, binding, field_id, table, lens, want_cache)


def decode_arena(case: ArenaCase, view: str) -> None:
    """Decode through `view`: 'dense' (latent_cache: the implicit payload stride production MLA
    kernels assume) or 'field' (the plan's own stride)."""
    make = latent_cache if view == "dense" else field_pages
    check_decode(make(case.arena, case.binding, case.field_id), case.table, case.lens, K3.mla_heads // 4, 4,
                 splits=2, want_cache=case.want_cache, what=f"K3 fp8 tp4 via the {view} view")


def test_search_layout_decodes_through_the_dense_view() -> None:
    decode_arena(write_arena("search"), "dense")


def test_pinned12_layout_breaks_the_dense_view() -> None:
    """pinned12 at tp 4 gives the latent field a 135,680 B stride for a 73,728 B payload: a
    kernel that walks pages by the payload reads the wrong bytes, and the output differs from
    the oracle. Through the plan's own stride the same arena decodes correctly."""
    assert not plan_model(K3, 4, "fp8", "pinned12").plan.accepted
    case = write_arena("pinned12")
    assert case.binding.plan.field(case.field_id).page_stride_bytes != 128 * WIDTH
    with pytest.raises(AssertionError, match="via the dense view"):
        decode_arena(case, "dense")
    decode_arena(case, "field")


def test_lse_log2_fault_is_caught() -> None:
    lens = [150, 40]
    cache, table = dense_case(np.random.default_rng(2), lens, "fp8")
    with faults.inject("mla_decode_lse_log2"), pytest.raises(AssertionError, match="lse"):
        check_decode(cache, table, lens, 12, 2, what="fp8")


def check_page_offsets() -> None:
    """The kernels' page address helper at page ids an H200 arena reaches: K3 fp8 tp 8 packs
    12 latent pages in a 21,233,664 B parent, so 141 GB holds ~6,600 parents, ~80,000 pages;
    past page 29,127 the offset page x 73,728 no longer fits in int32."""
    stride = 128 * WIDTH
    pages = torch.tensor([0, 1, 29_127, 29_128, 80_000, 2**31 - 1], dtype=torch.int32)
    got = page_offsets(pages.to(DEVICE), stride).tolist()
    assert got == [p * stride for p in pages.tolist()]


def test_page_offsets_are_int64() -> None:
    check_page_offsets()


def test_page_stride_int32_fault_is_caught() -> None:
    with faults.inject("mla_page_stride_int32"), pytest.raises(AssertionError):
        check_page_offsets()


@pytest.mark.gpu
def test_large_page_ids_on_gpu() -> None:
    """End to end past int32: a 2.15 GB fp8 cache whose pages beyond 29,127 start past 2^31
    bytes, written by store_latent and read by mla_decode there."""
    if DEVICE != "cuda" or not torch.cuda.is_available():
        pytest.skip(reason="needs a CUDA device: the cache spans more than 2^31 bytes")
    pages = 29_200
    cache = torch.zeros((pages, PAGE_TOKENS, WIDTH), dtype=torch.uint8, device=DEVICE)
    used = np.array([29_150, 1, 29_199, 29_128], dtype=np.int32)
    lens = [3 * PAGE_TOKENS + 17]
    table = used[None, :]
    rng = np.random.default_rng(9)
    latent = torch.from_numpy(rng.standard_normal((lens[0], WIDTH), dtype=np.float32))
    pos = np.arange(lens[0], dtype=np.int32)
    store_latent(cache, to_device(latent), to_device(table), to_device(np.zeros_like(pos)), to_device(pos), "fp8")
    compact = np.zeros((len(used), PAGE_TOKENS, WIDTH))
    compact.reshape(-1, WIDTH)[: lens[0]] = latent.to(torch.float8_e4m3fn).double().numpy()
    q_lat = torch.from_numpy(rng.standard_normal((1, 12, 512), dtype=np.float32))
    q_rope = torch.from_numpy(rng.standard_normal((1, 12, 64), dtype=np.float32))
    want_o, want_lse = oracle.mla_decode(q_lat.double().numpy(), q_rope.double().numpy(), compact,
                                         np.arange(len(used), dtype=np.int32)[None, :], np.array(lens), 0.1)
    o, lse = mla_decode(to_device(q_lat), to_device(q_rope), cache, to_device(table),
                        to_device(np.array(lens, np.int32)), 0.1, num_splits=2)
    assert_close(o, want_o, "float32", "large page ids: o")
    assert_close(lse, want_lse, "float32", "large page ids: lse")
