"""Float64 oracle of kernels.store_latent: the cache as float64 values, rounding done by formula.

Never imports the implementation. A value x is rounded to the cache dtype's grid after
sanitizing (NaN -> 0, clamp to +- the largest finite value): its quantum is 2^(e - mantissa
bits) with e = max(floor(log2 |x|), the smallest normal exponent), and ties go to even.
"""

from __future__ import annotations

import numpy as np

PAGE_TOKENS = 128
# cache dtype -> (mantissa bits, smallest normal exponent, largest finite value)
GRIDS: dict[str, tuple[int, int, float]] = {
    "fp8": (3, -6, 448.0),
    "bf16": (7, -126, (2 - 2**-7) * 2.0**127),
}


def round_to_cache(x: np.ndarray, cache_dtype: str) -> np.ndarray:
    mantissa, min_exp, largest = GRIDS[cache_dtype]
    x = np.clip(np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=largest, neginf=-largest),
                -largest, largest)
    _, e = np.frexp(x)  # |x| = m * 2^e with m in [0.5, 1), so floor(log2 |x|) = e - 1
    quantum = np.ldexp(1.0, np.maximum(e - 1, min_exp) - mantissa)
    return np.round(x / quantum) * quantum


def store_latent(
    cache: np.ndarray,
    latent: np.ndarray,
    page_table: np.ndarray,
    seq_ids: np.ndarray,
    positions: np.ndarray,
    cache_dtype: str,
) -> None:
    """cache: float64 [pages, 128, 576] values, updated in place; the rest as the kernel's."""
    rows = round_to_cache(latent, cache_dtype)
    for t, (seq, pos) in enumerate(zip(seq_ids.tolist(), positions.tolist(), strict=True)):
        if pos < 0:
            continue
        page = int(page_table[seq, pos // PAGE_TOKENS])
        if page != 0:
            cache[page, pos % PAGE_TOKENS] = rows[t]
