"""The kernels compile for an H100/H200 (sm_90) even where there is no GPU.

The CPU interpreter runs kernel bodies as Python, so it accepts code the GPU compiler rejects
(a plain-float global inside a kernel, a constexpr branch returning another integer width).
Triton compiles for a named target without a device; this runs that compile in a subprocess,
because under TRITON_INTERPRET=1 the kernels here are interpreter objects, not compilable ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.kernels

SCRIPT = textwrap.dedent('''
    import triton
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kvproof.kernels import latent_format as L, merge_state as MS, mla_decode as M, store_latent as S

    if "nvidia" not in backends:
        raise SystemExit(77)
    target = GPUTarget("cuda", 90, 32)
    I32 = "i32"
    C = "constexpr"

    def build(fn, sig, consts, num_warps=4):
        sig = dict(sig, **{k: C for k in consts})
        triton.compile(ASTSource(fn, sig, consts), target=target, options={"num_warps": num_warps})

    mla = dict(q_lat_ptr="*bf16", q_rope_ptr="*bf16", cache_ptr="*fp8e4nv", table_ptr="*i32", lens_ptr="*i32",
               o_ptr="*fp32", lse_ptr="*fp32", scale="fp32", H=I32, q_lat_sb=I32, q_lat_sh=I32, q_rope_sb=I32,
               q_rope_sh=I32, table_sb=I32, page_stride=I32, row_stride=I32, o_ss=I32, o_sb=I32, o_sh=I32,
               lse_ss=I32, lse_sb=I32)
    for cache, q, flags in (("*fp8e4nv", "*bf16", False), ("*bf16", "*fp32", True)):
        build(M._mla_decode_kernel, dict(mla, cache_ptr=cache, q_lat_ptr=q, q_rope_ptr=q),
              dict(NUM_SPLITS=4, LSE_LOG2=flags, PAGE_INT32=flags, PAGE=128, D_LAT=512, D_ROPE=64,
                   BLOCK_H=M.BLOCK_H, BLOCK_N=32), num_warps=8)
    store = dict(cache_ptr="*u8", latent_ptr="*bf16", table_ptr="*i32", seq_ptr="*i32", pos_ptr="*i32",
                 latent_stride=I32, table_stride=I32, page_stride="i64", row_stride=I32)
    for cache, fp8, flags in (("*u8", True, False), ("*i16", False, True)):
        build(S._store_latent_kernel, dict(store, cache_ptr=cache),
              dict(FP8=fp8, SANITIZE=not flags, PAGE_INT32=flags, MAX_VALUE=448.0 if fp8 else L.BF16_MAX,
                   PAGE=128, WIDTH=576, BLOCK=1024))
    merge = dict(va_ptr="*fp32", sa_ptr="*fp32", vb_ptr="*fp32", sb_ptr="*fp32", vo_ptr="*fp32", so_ptr="*fp32",
                 H=I32)
    for guard in (True, False):
        build(MS._merge_state_kernel, merge, dict(D=512, BLOCK_H=MS.BLOCK_H, BLOCK_D=MS.BLOCK_D, EMPTY_GUARD=guard))
    for flag in (False, True):
        build(L._page_offsets_kernel, dict(pages_ptr="*i32", out_ptr="*i64", n=I32, page_stride=I32),
              dict(INT32=flag, BLOCK=128))
''')


def test_kernels_compile_for_sm90() -> None:
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode == 77:
        pytest.skip(reason="this triton has no NVIDIA backend to compile for sm_90")
    assert done.returncode == 0, done.stderr[-4000:]
