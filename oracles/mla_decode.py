"""Float64 oracle of kernels.mla_decode: gather each request's tokens, softmax, weighted sum.

The cache is given as float64 values [pages, 128, 576] (an fp8 or bf16 cache already decoded
to the values it holds). `num_splits` is accepted for the kernel's signature: the exact result
does not depend on how the keys are partitioned.
"""

from __future__ import annotations

import numpy as np

PAGE_TOKENS = 128
LATENT = 512


def mla_decode(
    q_lat: np.ndarray,
    q_rope: np.ndarray,
    cache: np.ndarray,
    page_table: np.ndarray,
    seq_lens: np.ndarray,
    scale: float,
    *,
    num_splits: int = 1,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    del num_splits  # the exact result does not depend on it
    q_lat, q_rope = np.asarray(q_lat, np.float64), np.asarray(q_rope, np.float64)
    batch, heads, _ = q_lat.shape
    o = np.zeros((batch, heads, LATENT))
    lse = np.full((batch, heads), -np.inf)
    for b in range(batch):
        t = np.arange(int(seq_lens[b]))
        if t.size == 0:
            continue
        c = cache[page_table[b, t // PAGE_TOKENS], t % PAGE_TOKENS]  # [tokens, 576]
        s = scale * (q_lat[b] @ c[:, :LATENT].T + q_rope[b] @ c[:, LATENT:].T)  # [heads, tokens]
        m = s.max(axis=1, keepdims=True)
        w = np.exp(s - m)
        lse[b] = m[:, 0] + np.log(w.sum(axis=1))
        o[b] = (w / w.sum(axis=1, keepdims=True)) @ c[:, :LATENT]
    if out is None:
        return o, lse
    out[0][...], out[1][...] = o, lse
    return out
