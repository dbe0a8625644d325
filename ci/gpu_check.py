#!/usr/bin/env python3
"""gpu_check: on a CUDA machine, run the kernel tests natively and benchmark the kernels.

1. pytest -m "kernels or gpu" on the test modules that carry those marks, without Triton's
   interpreter (the tests put tensors on the GPU). Only those modules are collected: pytest
   imports every module it is given before it deselects, and the GPU image has no z3-solver
   (the prover's tests need it) and no fla-core (the kda_decode cross-check skips, saying so).
2. Median times via triton.testing.do_bench for mla_decode (Kimi-K3 heads per rank at tp 8 and
   tp 1, batch 64, 32K context, fp8 cache), merge_state and kda_decode, with achieved GB/s
   against a measured device-to-device copy and each row's physical limit (its bytes at that
   copy's bandwidth), printed as one table; FlashMLA's and FlashInfer's MLA decode beside ours at
   the same shapes where the image has them (a row that cannot run says why).

Needs nothing installed beyond the image's torch, triton, numpy, pytest and hypothesis: kvproof
is imported from this checkout (its kvproof/ folder). Everything stays within 5 minutes. Exits 2
with one line when there is no CUDA device, and non-zero when the tests or a benchmark fail.
Off the GPU: --collect-only collects the test set; --cpu runs it under Triton's interpreter (no
benchmarks). Arguments after -- go to pytest. From the checkout: python -m kvproof.ci.gpu_check [--cpu] [-- ARGS]
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_TIMEOUT_S = 200  # of the 5 minutes; the benchmarks take well under one
CPU_TIMEOUT_S = 900  # the interpreter is slower; --cpu is a check of the path, not of speed
MARKED = re.compile(r"pytest\.mark\.(kernels|gpu)\b")
sys.path.insert(0, str(ROOT))  # kvproof/ of this checkout, installed or not


@dataclass(frozen=True)
class Row:
    name: str
    ms: float
    bytes: int  # bytes the kernel must move at least

    def line(self, copy_gbps: float) -> str:
        """The row: its time, its GB/s, and its physical limit: the time its bytes take at the measured
        copy's bandwidth (a kernel that only moves its bytes once can do no better), with its time over it."""
        gbps = self.bytes / self.ms / 1e6
        limit_ms = self.bytes / copy_gbps / 1e6
        return (f"{self.name:<52} {self.ms:>9.3f} {gbps:>9.0f} {100 * gbps / copy_gbps:>7.0f}% "
                f"{limit_ms:>9.3f} {self.ms / limit_ms:>7.2f}x")


HEADER = f"{'kernel':<52} {'median ms':>9} {'GB/s':>9} {'of copy':>8} {'limit ms':>9} {'x limit':>8}"


def kernel_test_files() -> list[str]:
    """The test modules that mark a test `kernels` or `gpu`: all the check needs, none of the
    modules that import z3 (tests/test_gpu_check.py collects them with z3 hidden)."""
    files = sorted((ROOT / "tests").glob("test_*.py"))
    return [str(f.relative_to(ROOT)) for f in files if MARKED.search(f.read_text())]


def run_tests(interpret: bool, pytest_args: list[str]) -> int:
    """pytest on the kernel test set; interpret=True is the CPU path (Triton's interpreter)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TRITON_INTERPRET="1" if interpret else "0", PYTHONPATH=path,
               HYPOTHESIS_PROFILE=os.environ.get("HYPOTHESIS_PROFILE", "dev"))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "kernels or gpu",
           *kernel_test_files(), *pytest_args]
    print("+", " ".join(cmd), flush=True)
    timeout = CPU_TIMEOUT_S if interpret else TEST_TIMEOUT_S
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"gpu_check: kernel tests exceeded {timeout} s", file=sys.stderr)
        return 1


def bench(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def copy_row() -> Row:
    import torch

    n = 1 << 30
    src, dst = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    return Row("device-to-device copy (1 GiB, read + write)", bench(lambda: dst.copy_(src)), 2 * n)


def mla_rows() -> list[Row]:
    import torch
    import triton

    from kvproof.kernels.latent_format import PAGE_TOKENS, WIDTH
    from kvproof.kernels.mla_decode import BLOCK_H, mla_decode
    from kvproof.spec.catalog import load_model

    heads_total = load_model("kimi-k3").mla_heads
    batch, context = 64, 32 * 1024
    per_request = context // PAGE_TOKENS
    pages = 1 + batch * per_request
    cache = torch.randint(0, 0x7F, (pages, PAGE_TOKENS, WIDTH), dtype=torch.uint8, device="cuda")
    perm = torch.randperm(pages - 1, device="cuda") + 1
    table = perm.view(batch, per_request).to(torch.int32)
    lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for tp in (8, 1):
        heads = heads_total // tp
        q_lat = torch.randn(batch, heads, 512, device="cuda", dtype=torch.bfloat16)
        q_rope = torch.randn(batch, heads, 64, device="cuda", dtype=torch.bfloat16)
        splits = max(1, min(per_request, triton.cdiv(2 * sms, batch * triton.cdiv(heads, BLOCK_H))))
        moved = batch * context * WIDTH + q_lat.nbytes + q_rope.nbytes + batch * heads * (512 + 1) * 4
        ms = bench(functools.partial(mla_decode, q_lat, q_rope, cache, table, lens, 192**-0.5, num_splits=splits))
        label = f"mla_decode fp8 tp{tp} ({heads} heads, B{batch}, {context // 1024}K, {splits} splits)"
        rows.append(Row(label, ms, moved))
    return rows


def _mla_shapes() -> tuple[int, int, int]:
    """Batch, context and Kimi-K3's MLA heads per rank at tp 8, as mla_rows times ours."""
    from kvproof.spec.catalog import load_model

    return 64, 32 * 1024, load_model("kimi-k3").mla_heads // 8


def flashmla_rows() -> list[Row]:
    """FlashMLA's dense decode (deepseek-ai/FlashMLA, `flash_mla_with_kvcache`, README usage: bf16 cache in
    pages of 64 tokens, 576 values, one latent head) at the shapes of ours, where the image has it."""
    import torch
    from flash_mla import flash_mla_with_kvcache, get_mla_metadata

    batch, context, heads = _mla_shapes()
    page = 64
    per_request = context // page
    cache = torch.randn(1 + batch * per_request, page, 1, 576, dtype=torch.bfloat16, device="cuda")
    table = (torch.randperm(batch * per_request, device="cuda") + 1).view(batch, per_request).to(torch.int32)
    lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    q = torch.randn(batch, 1, heads, 576, dtype=torch.bfloat16, device="cuda")
    metadata, splits = get_mla_metadata(lens, heads, 1)
    ms = bench(lambda: flash_mla_with_kvcache(q, cache, table, lens, 512, metadata, splits, causal=True))
    moved = batch * context * 576 * 2 + q.nbytes + batch * heads * 512 * 2
    return [Row(f"FlashMLA decode bf16 tp8 ({heads} heads, B{batch}, {context // 1024}K)", ms, moved)]


def flashinfer_rows() -> list[Row]:
    """FlashInfer's MLA decode (`flashinfer.mla.BatchMLAPagedAttentionWrapper`, plan then run, as its docs
    show it) over pages of 128 tokens, bf16, at the shapes of ours, where the image has it."""
    import flashinfer
    import torch

    batch, context, heads = _mla_shapes()
    page = 128
    per_request = context // page
    pages = 1 + batch * per_request
    ckv = torch.randn(pages, page, 512, dtype=torch.bfloat16, device="cuda")
    kpe = torch.randn(pages, page, 64, dtype=torch.bfloat16, device="cuda")
    q_nope = torch.randn(batch, heads, 512, dtype=torch.bfloat16, device="cuda")
    q_pe = torch.randn(batch, heads, 64, dtype=torch.bfloat16, device="cuda")
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"))
    qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    kv_indptr = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * per_request
    kv_indices = torch.randperm(batch * per_request, device="cuda").to(torch.int32) + 1
    kv_lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_lens, heads, 512, 64, page, False, 192**-0.5,
                 torch.bfloat16, torch.bfloat16)
    ms = bench(lambda: wrapper.run(q_nope, q_pe, ckv, kpe))
    moved = batch * context * 576 * 2 + q_nope.nbytes + q_pe.nbytes + batch * heads * 512 * 2
    return [Row(f"FlashInfer MLA decode bf16 tp8 ({heads} heads, B{batch}, {context // 1024}K)", ms, moved)]


REFERENCES = {"FlashMLA": flashmla_rows, "FlashInfer MLA": flashinfer_rows}
REFERENCE_TIMEOUT_S = 60  # each; the whole check stays within its 5 minutes


def reference(name: str, copy_gbps: float) -> str:
    """A reference's table line, run by `--reference NAME` in a child process within REFERENCE_TIMEOUT_S."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--reference", name, "--copy-gbps", repr(copy_gbps)]
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True,
                              timeout=REFERENCE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"{name:<52} not run: no answer within {REFERENCE_TIMEOUT_S} s"
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip()
    why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return f"{name:<52} not run: {' '.join(why.split())[:160]}"


def merge_rows() -> list[Row]:
    import torch

    from kvproof.kernels.merge_state import merge_state

    tokens, heads, d = 4096, 96, 512
    v_a, v_b = (torch.randn(tokens, heads, d, device="cuda") for _ in range(2))
    s_a, s_b = (torch.randn(tokens, heads, device="cuda") for _ in range(2))
    ms = bench(lambda: merge_state(v_a, s_a, v_b, s_b, out=(v_a, s_a)))
    return [Row(f"merge_state ({tokens} tokens, {heads} heads, D {d})", ms, 3 * v_a.nbytes + 3 * s_a.nbytes)]


def kda_rows() -> list[Row]:
    import torch

    from kvproof.impl.recipe import plan_model
    from kvproof.kernels.kda_decode import kda_decode
    from kvproof.spec.catalog import load_model

    model = load_model("kimi-k3")
    batch = 64
    rows = []
    for tp in (8, 1):
        plan = plan_model(model, tp, "fp8").plan
        layer = model.kda_layers[0]
        group = plan.field(f"layer.{layer}.recurrent_state").group
        binding = plan.bind(-(-batch // plan.group(group).packing))
        arena = torch.zeros(binding.arena_bytes, dtype=torch.uint8, device="cuda")
        heads, dim, width = model.kda_heads // tp, model.kda_head_dim, model.conv_kernel - 1
        table = torch.arange(1, batch + 1, dtype=torch.int32, device="cuda")
        args = dict(
            x=torch.randn(batch, 3 * heads * dim, device="cuda"),
            conv_weight=torch.randn(3 * heads * dim, width + 1, device="cuda"),
            f=torch.randn(batch, heads, dim, device="cuda"),
            b=torch.randn(batch, heads, device="cuda"),
            A_log=torch.randn(heads, device="cuda"),
            dt_bias=torch.randn(heads, dim, device="cuda"),
        )
        state = sum(plan.field(f"layer.{layer}.{name}").payload_bytes for name in ("conv_state", "recurrent_state"))
        moved = batch * 2 * state + sum(t.nbytes for t in args.values()) + batch * heads * dim * 4
        ms = bench(functools.partial(kda_decode, arena, binding, layer, table, validate=False, **args))
        rows.append(Row(f"kda_decode tp{tp} ({heads} heads, B{batch})", ms, moved))
    return rows


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m kvproof.ci.gpu_check", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--collect-only", action="store_true", help="collect the kernel test set, run nothing")
    mode.add_argument("--cpu", action="store_true", help="run the kernel test set under Triton's interpreter")
    mode.add_argument("--reference", choices=sorted(REFERENCES), help=argparse.SUPPRESS)  # one reference's line
    parser.add_argument("--copy-gbps", type=float, help=argparse.SUPPRESS)
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if not (ROOT / "kvproof" / "spec").is_dir():
        print(f"gpu_check: {ROOT / 'kvproof'} lacks its symlinks to spec/, impl/, ...; use a git checkout",
              file=sys.stderr)
        return 2
    if args.collect_only:
        return run_tests(interpret=True, pytest_args=["--collect-only", *args.pytest_args])
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    if args.cpu:
        return run_tests(interpret=True, pytest_args=args.pytest_args)
    if args.reference:  # the child of reference(): its rows, or the error that stopped them on stderr
        os.environ["TRITON_INTERPRET"] = "0"
        print("\n".join(row.line(args.copy_gbps) for row in REFERENCES[args.reference]()))
        return 0
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a machine with a GPU (or --cpu)", file=sys.stderr)
        return 2
    os.environ["TRITON_INTERPRET"] = "0"  # before the benchmarks import triton's kernels
    status = run_tests(interpret=False, pytest_args=args.pytest_args)
    copy = copy_row()
    copy_gbps = copy.bytes / copy.ms / 1e6
    lines = [copy.line(copy_gbps)]
    for name, rows in (("mla_decode", mla_rows), ("merge_state", merge_rows), ("kda_decode", kda_rows)):
        try:
            lines += [row.line(copy_gbps) for row in rows()]
        except Exception as err:  # one broken benchmark must not hide the others' numbers
            lines.append(f"{name:<52} failed: {type(err).__name__}: {err}")
            status = status or 1
    # Others' decode kernels beside ours, where the image has them, each in a process of its own with a time
    # limit (a first call may compile for minutes): a row that cannot run says why and fails nothing (they are
    # references, not kvproof's kernels).
    lines += [reference(name, copy_gbps) for name in REFERENCES]
    device = torch.cuda.get_device_name(0)
    import triton

    print(f"\n{time.strftime('%Y-%m-%d')} {device}, torch {torch.__version__}, triton {triton.__version__}")
    print(HEADER)
    print("\n".join(lines))
    print(f"tests {'passed' if status == 0 else 'FAILED'}; {time.monotonic() - started:.0f} s in all")
    return status


if __name__ == "__main__":
    sys.exit(main())
