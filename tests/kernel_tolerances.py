"""Tolerances of the kernel differential tests, stated once per dtype.

The key is the dtype the compared values were computed or stored in, not the inputs':
kernels that read a bf16 or fp8 cache compute in fp32 and are compared with an oracle fed the
same rounded cache values, so they use the fp32 tolerance. fp8 (e4m3) is for stored cache
contents, which must match the oracle's rounding exactly.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

# Where kernel tests put their tensors: the CPU under Triton's interpreter, else the GPU.
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

# Relative error bound, scaled by the largest expected magnitude so that entries near zero are
# judged against the size of the output rather than against themselves.
RTOL: dict[str, float] = {
    "float32": 1e-5,
    "bfloat16": 1e-2,
    "float8_e4m3fn": 0.0,
}


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor; this module must not need torch
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def assert_close(actual: Any, expected: Any, dtype: str, what: str) -> None:
    """Fail unless `actual` matches `expected` within the tolerance of `dtype`.

    NaN anywhere fails (a NaN-poisoned output element the kernel never wrote shows up here);
    infinities must match exactly (an empty partition's LSE is -inf).
    """
    a, e = _numpy(actual), _numpy(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    assert not np.isnan(e).any(), f"{what}: the oracle produced NaN (test bug)"
    nan = np.isnan(a)
    if nan.any():
        first = np.argwhere(nan)[0].tolist()
        raise AssertionError(f"{what}: {int(nan.sum())} NaN element(s), first at {first}")
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    bad_inf = (inf_a | inf_e) & (a != e)
    if bad_inf.any():
        first = np.argwhere(bad_inf)[0].tolist()
        raise AssertionError(f"{what}: infinities differ, first at {first}")
    finite = ~inf_e
    if not finite.any():
        return
    rtol = RTOL[dtype]
    scale = np.abs(e[finite]).max()
    err = np.where(finite, np.abs(a - np.where(finite, e, 0.0)), 0.0)
    bad = err > rtol * (np.abs(e) + scale)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{what} ({dtype}, rtol {rtol:g}): {int(bad.sum())} of {a.size} elements off; "
            f"max abs error {err[finite].max():.3g} vs scale {scale:.3g}; first at {list(i)}: "
            f"got {a[i]!r}, expected {e[i]!r}"
        )


def examples(ci: int) -> int:
    """Hypothesis examples for a kernel test: `ci` under the ci profile (60 examples), scaled
    with the active profile so nightly goes deeper. The interpreter runs kernels slowly, so
    kernel tests take a fraction of the profile's count."""
    from hypothesis import settings

    profile = settings.default
    assert profile is not None  # None only before a profile is loaded; conftest loads one
    return max(1, ci * profile.max_examples // 60)


def to_device(x: Any) -> Any:
    """A NumPy array or CPU tensor as a tensor on DEVICE."""
    import torch

    return (torch.from_numpy(x) if isinstance(x, np.ndarray) else x).to(DEVICE)
