"""merge_state against its float64 oracle: every head count an engine runs (96 per rank once
crashed a one-block-per-token kernel), D up to 512, in-place output, empty partitions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bites import fails_under
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_tolerances import DEVICE, assert_close, examples, to_device

from kvproof.impl import faults
from kvproof.kernels.merge_state import MAX_THREADS, launch_config, merge_state
from kvproof.oracles import merge_state as oracle

pytestmark = pytest.mark.kernels

HEADS = (1, 12, 64, 65, 96, 97, 128)
DIMS = (128, 256, 512)


def _guarded(
    rng: np.random.Generator, shape: tuple[int, ...], fill: np.ndarray | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A buffer with one random guard token before and after; returns (buffer, the middle).
    The middle is `fill`, or NaN (poison: every element must be written)."""
    buf = to_device(rng.standard_normal((shape[0] + 2, *shape[1:])).astype(np.float32))
    buf[1:-1] = to_device(fill) if fill is not None else float("nan")
    return buf, buf[1:-1]


def check_merge(tokens: int, heads: int, d: int, seed: int, alias: str = "", empty: float = 0.1) -> None:
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, 4.0, (2, tokens, heads)).astype(np.float32)
    s[rng.random(s.shape) < empty] = -np.inf
    v = rng.standard_normal((2, tokens, heads, d)).astype(np.float32)
    want_v, want_s = oracle.merge_state(v[0], s[0], v[1], s[1])

    bufs = [_guarded(rng, x.shape, x) for x in (v[0], s[0], v[1], s[1])]
    (va_buf, va), (sa_buf, sa), (vb_buf, vb), (sb_buf, sb) = bufs
    if alias:
        (vo_buf, vo), (so_buf, so) = (bufs[0], bufs[1]) if alias == "a" else (bufs[2], bufs[3])
    else:
        (vo_buf, vo), (so_buf, so) = _guarded(rng, v[0].shape, None), _guarded(rng, s[0].shape, None)
    before = [b.clone() for b in (va_buf, sa_buf, vb_buf, sb_buf, vo_buf, so_buf)]

    got_v, got_s = merge_state(va, sa, vb, sb, out=(vo, so))
    assert got_v.data_ptr() == vo.data_ptr() and got_s.data_ptr() == so.data_ptr()
    what = f"merge tokens={tokens} heads={heads} D={d} alias={alias or 'none'}"
    assert_close(got_v, want_v, "float32", f"{what}: v")
    assert_close(got_s, want_s, "float32", f"{what}: s")
    for name, buf, old in zip(("v_a", "s_a", "v_b", "s_b", "v_out", "s_out"),
                              (va_buf, sa_buf, vb_buf, sb_buf, vo_buf, so_buf), before, strict=True):
        assert torch.equal(buf[0], old[0]) and torch.equal(buf[-1], old[-1]), f"{what}: wrote a guard of {name}"
        if buf.data_ptr() not in (vo_buf.data_ptr(), so_buf.data_ptr()):
            assert torch.equal(buf, old), f"{what}: changed input {name}"


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("heads", HEADS)
def test_head_counts(heads: int, d: int) -> None:
    check_merge(2, heads, d, seed=heads * 1000 + d)


@settings(max_examples=examples(30))
@given(
    tokens=st.integers(1, 4),
    heads=st.one_of(st.sampled_from(HEADS), st.integers(1, 130)),
    d=st.sampled_from(DIMS),
    alias=st.sampled_from(["", "a", "b"]),
    empty=st.sampled_from([0.0, 0.2, 0.6]),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_oracle(tokens: int, heads: int, d: int, alias: str, empty: float, seed: int) -> None:
    check_merge(tokens, heads, d, seed, alias, empty)


def test_empty_partitions() -> None:
    """The convention: an empty side (s = -inf) is ignored even if its v is garbage (NaN), the
    other side passes through bit for bit, and two empty sides give v = 0, s = -inf."""
    heads, d = 3, 128
    inf, nan = float("-inf"), float("nan")
    s_a = torch.tensor([[inf, inf, 1.5]], device=DEVICE)
    s_b = torch.tensor([[inf, -2.25, inf]], device=DEVICE)
    v_a = torch.randn(1, heads, d, device=DEVICE)
    v_b = torch.randn(1, heads, d, device=DEVICE)
    v_a[0, :2] = nan  # heads 0 and 1: a is empty
    v_b[0, 0] = nan  # head 0: both empty
    v_b[0, 2] = nan  # head 2: b is empty
    v, s = merge_state(v_a, s_a, v_b, s_b, out=(torch.full_like(v_a, nan), torch.full_like(s_a, nan)))
    assert torch.equal(v[0, 0], torch.zeros(d, device=DEVICE)) and s[0, 0].item() == inf
    assert torch.equal(v[0, 1], v_b[0, 1]) and s[0, 1].item() == -2.25
    assert torch.equal(v[0, 2], v_a[0, 2]) and s[0, 2].item() == 1.5


def test_launch_fits_a_block_for_every_head_count() -> None:
    for heads in range(1, 257):
        launch = launch_config(heads)
        assert launch.threads <= MAX_THREADS, f"{heads} heads: {launch.threads} threads in one block"
        assert (launch.programs - 1) * launch.block_h < heads <= launch.programs * launch.block_h


def test_single_block_fault_is_caught() -> None:
    """Seeded fault merge_state_single_block: one block per token still merges right up to 64
    heads, and the launch check fails past that (96 heads x 16 threads > 1024)."""
    with faults.inject("merge_state_single_block"):
        for heads in (h for h in HEADS if h <= 64):
            check_merge(2, heads, 128, seed=heads)
        with pytest.raises(RuntimeError, match="too many resources"):
            check_merge(2, 96, 128, seed=96)
    fails_under("merge_state_single_block", test_launch_fits_a_block_for_every_head_count)


def test_empty_nan_fault_is_caught() -> None:
    with faults.inject("merge_state_empty_nan"), pytest.raises(AssertionError):
        test_empty_partitions()
