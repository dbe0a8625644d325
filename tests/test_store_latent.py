"""store_latent against its float64 oracle, on a real Kimi-K3 arena.

Each run fills the arena with random canary bytes, poisons the addressed rows with NaN, stores,
and then checks (a) the layer's field, decoded, equals the oracle's update of the same field,
so every addressed element was written with the oracle's rounding, and (b) no byte outside the
addressed rows changed, located with the packer's own offsets (Binding.offset_bytes), not the view.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_tolerances import DEVICE, examples, to_device

from kvproof.impl import faults
from kvproof.impl.packer import Binding
from kvproof.impl.recipe import plan_model
from kvproof.kernels.latent_format import PAGE_TOKENS, WIDTH
from kvproof.kernels.store_latent import store_latent
from kvproof.kernels.views import field_pages, new_arena
from kvproof.oracles import store_latent as oracle
from kvproof.spec.catalog import load_model

pytestmark = pytest.mark.kernels

NAN_BYTES = {"fp8": 0x7F, "bf16": 0x7FC0}  # a NaN bit pattern of each cache dtype
LARGEST = {"fp8": 448.0, "bf16": float(torch.finfo(torch.bfloat16).max)}


@cache
def arena(cache_dtype: str) -> tuple[Binding, torch.Tensor]:
    """Kimi-K3 at tp 8 (policy search), one usable parent (12 or 6 latent pages), canary bytes."""
    binding = plan_model(load_model("kimi-k3"), 8, cache_dtype).plan.bind(1)
    canary = new_arena(binding, DEVICE)
    canary.copy_(torch.randint(0, 256, canary.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(7)))
    return binding, canary


def values(field: torch.Tensor, cache_dtype: str) -> np.ndarray:
    typed = field.view(torch.float8_e4m3fn) if cache_dtype == "fp8" else field
    return typed.double().cpu().numpy()


def run_store(
    cache_dtype: str, layer_index: int, latent: torch.Tensor, table: np.ndarray, seq: np.ndarray, pos: np.ndarray
) -> None:
    binding, canary = arena(cache_dtype)
    field_id = binding.plan.fields_of("full_attention")[layer_index].id
    size = binding.plan.field(field_id).itemsize
    row_bytes = WIDTH * size
    buf = canary.clone()
    field = field_pages(buf, binding, field_id)
    addressed: list[int] = []  # byte offsets of the addressed rows
    for s, p in zip(seq.tolist(), pos.tolist(), strict=True):
        page = int(table[s, p // PAGE_TOKENS]) if p >= 0 else 0
        if page:
            start = binding.offset_bytes(field_id, page) + (p % PAGE_TOKENS) * row_bytes
            addressed.append(start)
            field[page, p % PAGE_TOKENS].view(torch.int16 if size == 2 else torch.uint8).fill_(NAN_BYTES[cache_dtype])
    before = buf.clone()
    want = values(field, cache_dtype).copy()
    oracle.store_latent(want[:, :, 0], latent.double().numpy(), table, seq, pos, cache_dtype)

    store_latent(field, to_device(latent), to_device(table), to_device(seq), to_device(pos), cache_dtype)

    np.testing.assert_array_equal(values(field, cache_dtype), want, err_msg=f"{cache_dtype} {field_id}: stored rows")
    for start in addressed:  # put the addressed rows back: then nothing may differ
        buf[start:start + row_bytes] = before[start:start + row_bytes]
    changed = (buf != before).nonzero()
    assert changed.numel() == 0, f"{cache_dtype} {field_id}: {changed.numel()} bytes changed outside the addressed rows"


@st.composite
def batches(draw: st.DrawFn, cache_dtype: str):
    """Requests with distinct pages, some new tokens each, padding tokens and unallocated pages."""
    pages = plan_model(load_model("kimi-k3"), 8, cache_dtype).plan.packing["full_attention"]
    free = draw(st.permutations(range(1, pages + 1)))
    lengths = draw(st.lists(st.integers(1, 3 * PAGE_TOKENS), min_size=1, max_size=3))
    table = np.zeros((len(lengths), 4), dtype=np.int32)
    seq, pos = [], []
    for r, length in enumerate(lengths):
        n_pages = min(-(-length // PAGE_TOKENS), len(free))
        if n_pages == 0:
            break
        table[r, :n_pages], free = free[:n_pages], free[n_pages:]
        length = min(length, n_pages * PAGE_TOKENS)
        new = draw(st.lists(st.integers(0, length - 1), min_size=1, max_size=8, unique=True))
        seq += [r] * len(new)
        pos += new
    for entry in draw(st.sets(st.integers(0, table.size - 1), max_size=2)):  # pages not allocated
        table.flat[entry] = 0
    padding = draw(st.integers(0, 2))
    seq += [0] * padding
    pos += [-1] * padding
    order = draw(st.permutations(range(len(seq))))
    return table, np.array(seq, np.int32)[order], np.array(pos, np.int32)[order]


def latent_rows(rng: np.random.Generator, tokens: int, largest: float, special: float) -> np.ndarray:
    """Random rows over the whole range of the cache dtype, with NaN, +-inf, out-of-range
    values and signed zeros sprinkled in."""
    exponent = rng.uniform(-12, np.log10(largest) + 1, (tokens, WIDTH))
    x = rng.choice([-1.0, 1.0], (tokens, WIDTH)) * 10.0**exponent
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2 * largest, -2 * largest])
    hit = rng.random(x.shape) < special
    x[hit] = rng.choice(specials, int(hit.sum()))
    return np.clip(x, -3.4e38, 3.4e38).astype(np.float32)


@settings(max_examples=examples(25))
@given(
    data=st.data(),
    cache_dtype=st.sampled_from(["fp8", "bf16"]),
    latent_dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    layer_index=st.integers(0, 23),
    special=st.sampled_from([0.0, 0.01]),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_oracle(data, cache_dtype: str, latent_dtype: torch.dtype, layer_index: int, special: float,
                        seed: int) -> None:
    table, seq, pos = data.draw(batches(cache_dtype))
    rows = latent_rows(np.random.default_rng(seed), len(seq), LARGEST[cache_dtype], special)
    run_store(cache_dtype, layer_index, torch.from_numpy(rows).to(latent_dtype), table, seq, pos)


def grid_and_ties(cache_dtype: str) -> torch.Tensor:
    """Values of the cache dtype and the midpoints between neighbours (exact in fp32), both signs:
    every positive fp8 pattern, and a sample of bf16 patterns including the subnormals."""
    if cache_dtype == "fp8":
        bits, typed = torch.arange(0, 0x7E, dtype=torch.int16), torch.float8_e4m3fn
        low = (bits.to(torch.uint8).view(typed).float(), (bits + 1).to(torch.uint8).view(typed).float())
    else:
        sample = torch.randint(0, 0x7F7F, (1500,), generator=torch.Generator().manual_seed(5), dtype=torch.int16)
        bits = torch.cat([torch.arange(0, 40, dtype=torch.int16), sample])
        low = (bits.view(torch.bfloat16).float(), (bits + 1).view(torch.bfloat16).float())
    values = torch.cat([low[0], low[0] + (low[1] - low[0]) / 2])
    return torch.cat([values, -values])


@pytest.mark.parametrize("cache_dtype", ["fp8", "bf16"])
def test_rounding_ties_and_grid(cache_dtype: str) -> None:
    """Grid values stay, ties round to even: against the oracle and against torch's own cast as
    a second, independent reference."""
    x = grid_and_ties(cache_dtype)
    x = torch.cat([x, torch.ones(-x.numel() % WIDTH)]).reshape(-1, WIDTH)
    table = np.array([[1, 2, 3, 4]], dtype=np.int32)[:, : -(-x.shape[0] // PAGE_TOKENS)]
    seq = np.zeros(x.shape[0], np.int32)
    pos = np.arange(x.shape[0], dtype=np.int32)
    run_store(cache_dtype, 0, x, table, seq, pos)
    binding, _ = arena(cache_dtype)
    field = field_pages(new_arena(binding, DEVICE), binding, binding.plan.fields_of("full_attention")[0].id)
    store_latent(field, to_device(x), to_device(table), to_device(seq), to_device(pos), cache_dtype)
    torch_dtype = torch.float8_e4m3fn if cache_dtype == "fp8" else torch.bfloat16
    np.testing.assert_array_equal(values(field[1, : x.shape[0], 0], cache_dtype), x.to(torch_dtype).double().numpy())


def test_oracle_rounding_matches_torch() -> None:
    """The oracle's rounding formula agrees with torch's casts on in-range values of every
    magnitude (the oracle must be right independently of the kernel)."""
    rng = np.random.default_rng(3)
    for cache_dtype, torch_dtype, lo, hi in (("fp8", torch.float8_e4m3fn, -12, 2.6),
                                              ("bf16", torch.bfloat16, -40, 38)):
        x = (rng.choice([-1.0, 1.0], 20000) * 10.0 ** rng.uniform(lo, hi, 20000)).astype(np.float32)
        x = np.clip(x, -LARGEST[cache_dtype], LARGEST[cache_dtype])
        np.testing.assert_array_equal(oracle.round_to_cache(x, cache_dtype),
                                      torch.from_numpy(x).to(torch_dtype).double().numpy())


@pytest.mark.parametrize("cache_dtype", ["fp8", "bf16"])
def test_sanitize(cache_dtype: str) -> None:
    """NaN -> 0; +-inf and anything beyond the dtype's range -> +- its largest finite value."""
    big = LARGEST[cache_dtype]
    beyond = float(np.finfo(np.float32).max)  # past the largest value of fp8 and of bf16
    special = [np.nan, np.inf, -np.inf, beyond, -beyond, big, -big, 1.0]
    x = np.zeros((1, WIDTH), np.float32)
    x[0, : len(special)] = special
    binding, _ = arena(cache_dtype)
    buf = new_arena(binding, DEVICE)
    field = field_pages(buf, binding, binding.plan.fields_of("full_attention")[0].id)
    store_latent(field, to_device(x), to_device(np.array([[1]], np.int32)), to_device(np.array([0], np.int32)),
                 to_device(np.array([5], np.int32)), cache_dtype)
    got = values(field[1, 5, 0, : len(special)], cache_dtype)
    np.testing.assert_array_equal(got, [0.0, big, -big, big, -big, big, -big, 1.0])


@pytest.mark.parametrize("cache_dtype", ["fp8", "bf16"])
def test_null_page_and_padding_are_skipped(cache_dtype: str) -> None:
    """Tokens whose page table entry is 0 (the null page) and padding tokens (position -1)
    write nothing at all."""
    rng = np.random.default_rng(11)
    table = np.zeros((2, 3), dtype=np.int32)
    seq = np.array([0, 0, 1, 1, 0], np.int32)
    pos = np.array([0, 300, 129, -1, -1], np.int32)
    run_store(cache_dtype, 5, torch.from_numpy(latent_rows(rng, 5, LARGEST[cache_dtype], 0.0)), table, seq, pos)


def test_no_sanitize_fault_is_caught() -> None:
    with faults.inject("store_latent_no_sanitize"), pytest.raises(AssertionError):
        test_sanitize("fp8")
    with faults.inject("store_latent_no_sanitize"), pytest.raises(AssertionError):
        test_sanitize("bf16")
