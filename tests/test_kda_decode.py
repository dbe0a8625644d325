"""Differential tests of the kda_decode kernel against its float64 NumPy oracle, and of the oracle
against fla's reference recurrence.

Every run starts from an arena filled with 0xFF bytes (NaN in bf16 and fp32), writes random
states only into the addressed state pages, and poisons the output with NaN. Afterwards every
output element must match the oracle, the addressed states must hold the oracle's new states,
and every other byte of the arena, page 0 included, must still be 0xFF. The states are read and
written here through Binding.offset_bytes, independently of the kernel's typed views.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import torch
from bites import fails_under
from hypothesis import given
from hypothesis import strategies as st
from kernel_tolerances import assert_close

from kvproof.impl.packer import Binding
from kvproof.impl.recipe import plan_model
from kvproof.kernels.kda_decode import kda_decode
from kvproof.oracles import kda_decode as oracle
from kvproof.spec.catalog import ModelGeometry, load_model

pytestmark = pytest.mark.kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CANARY = 0xFF  # every bf16 / fp32 made of these bytes is NaN


def tiny_model(head_dim: int) -> ModelGeometry:
    """K3's head counts and conv kernel on 8 layers (2 MLA, 6 KDA in 3 state groups of 2), so
    that two KDA layers share a state page and the arena stays small."""
    return replace(
        load_model("kimi-k3"), name=f"k3-tiny-d{head_dim}", num_layers=8,
        mla_layers=(4, 8), kda_layers=(1, 2, 3, 5, 6, 7), kda_head_dim=head_dim,
    )


@cache
def binding(model: ModelGeometry, tp: int, dtype: str, parents: int) -> Binding:
    recipe = plan_model(model, tp, dtype, "search")
    assert recipe.plan.accepted, recipe.plan.violations
    return recipe.plan.bind(parents)


@dataclass(frozen=True)
class Case:
    binding: Binding
    layer: int
    pages: tuple[int, ...]
    seed: int
    table_dtype: torch.dtype = torch.int32

    def __repr__(self) -> str:
        heads, dim, _ = self.binding.plan.field(f"layer.{self.layer}.recurrent_state").shape
        return (f"Case(heads={heads}, head_dim={dim}, packing={self.binding.plan.packing}, "
                f"parents={self.binding.num_parents}, layer={self.layer}, pages={self.pages}, "
                f"seed={self.seed}, table_dtype={self.table_dtype})")


def field_bytes(b: Binding, field_id: str, page: int) -> slice:
    start = b.offset_bytes(field_id, page)
    return slice(start, start + b.plan.field(field_id).payload_bytes)


def read_state(arena: np.ndarray, b: Binding, field_id: str, page: int) -> np.ndarray:
    f = b.plan.field(field_id)
    raw = arena[field_bytes(b, field_id, page)]
    if f.dtype == "bfloat16":
        values = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        values = raw.view(np.float32)
    return values.astype(np.float64).reshape(f.shape)


def write_state(arena: np.ndarray, b: Binding, field_id: str, page: int, values: np.ndarray) -> None:
    f = b.plan.field(field_id)
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    if f.dtype == "bfloat16":
        assert np.array_equal(oracle.round_bf16(values), values), "test bug: conv state not bf16-exact"
        bits = (bits >> 16).astype(np.uint16)
    arena[field_bytes(b, field_id, page)] = bits.reshape(-1).view(np.uint8)


def run_case(case: Case) -> None:
    """Run the kernel and the oracle on one case and assert everything the module docstring says."""
    b, layer = case.binding, case.layer
    conv_id, rec_id = f"layer.{layer}.conv_state", f"layer.{layer}.recurrent_state"
    channels, width = b.plan.field(conv_id).shape
    heads, dim, _ = b.plan.field(rec_id).shape
    requests = len(case.pages)
    rng = np.random.default_rng(case.seed)

    def normal(*shape: int, sd: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * sd).astype(np.float32)

    conv0 = oracle.round_bf16(normal(requests, channels, width))
    rec0 = normal(requests, heads, dim, dim, sd=0.3)
    inputs = {
        "x": normal(requests, channels),
        "conv_weight": normal(channels, width + 1, sd=0.5),
        "f": normal(requests, heads, dim, sd=2.0),
        "b": normal(requests, heads, sd=2.0),
        "A_log": normal(heads, sd=0.5),
        "dt_bias": normal(heads, dim),
    }

    arena = np.full(b.arena_bytes, CANARY, dtype=np.uint8)
    for i, page in enumerate(case.pages):
        write_state(arena, b, conv_id, page, conv0[i])
        write_state(arena, b, rec_id, page, rec0[i])
    before = arena.copy()

    out = torch.full((requests, heads, dim), float("nan"), device=DEVICE)
    dev_arena = torch.from_numpy(arena).to(DEVICE)
    kda_decode(
        dev_arena, b, layer, torch.tensor(case.pages, dtype=case.table_dtype, device=DEVICE),
        *(torch.from_numpy(v).to(DEVICE) for v in inputs.values()), out=out,
    )
    after = dev_arena.cpu().numpy()
    want = oracle.kda_decode(conv0, rec0, *inputs.values())

    assert_close(out, want.o, "float32", "o")
    touched = np.zeros(b.arena_bytes, dtype=bool)
    for i, page in enumerate(case.pages):
        conv = read_state(after, b, conv_id, page)
        bad = conv != want.conv_state[i]
        assert not bad.any(), (
            f"conv state of page {page}: {int(bad.sum())} bf16 values differ, first at "
            f"{np.argwhere(bad)[0].tolist()}"
        )
        assert_close(read_state(after, b, rec_id, page), want.recurrent_state[i], "float32", f"state of page {page}")
        touched[field_bytes(b, conv_id, page)] = touched[field_bytes(b, rec_id, page)] = True
    changed = (after != before) & ~touched
    assert not changed.any(), (
        f"{int(changed.sum())} bytes outside the addressed state fields changed, first at byte "
        f"{int(np.argmax(changed))}"
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    model = tiny_model(draw(st.sampled_from([16, 24, 32])))
    b = binding(model, draw(st.sampled_from([32, 48, 96])), draw(st.sampled_from(["fp8", "bf16"])),
                draw(st.integers(1, 2)))
    layer = draw(st.sampled_from(model.kda_layers))
    pages = b.page_count(b.plan.field(f"layer.{layer}.conv_state").group)
    table = draw(st.lists(st.integers(1, pages - 1), min_size=1, max_size=4, unique=True))
    return Case(b, layer, tuple(table), draw(st.integers(0, 2**32 - 1)),
                draw(st.sampled_from([torch.int32, torch.int64])))


@given(cases())
def test_matches_oracle(case: Case) -> None:
    run_case(case)


K3 = load_model("kimi-k3")


@pytest.mark.parametrize(
    ("dtype", "tp", "parents", "layer", "pages"),
    [("bf16", 32, 2, K3.kda_layers[-1], (4, 1)), ("fp8", 96, 3, K3.kda_layers[0], (2, 3, 1))],
)
def test_matches_oracle_k3(dtype: str, tp: int, parents: int, layer: int, pages: tuple[int, ...]) -> None:
    """The true K3 state (head_dim 128) through the real recipe: bf16 tp 32 packs 2 states per
    parent (3/2), fp8 tp 96 one; the first and last state pages are both exercised."""
    run_case(Case(binding(K3, tp, dtype, parents), layer, pages, seed=tp))


SMALL = Case(binding(tiny_model(16), 48, "bf16", 2), 6, (5, 1, 3), seed=7)


# Broken kernels compute with canary NaNs and overflowing decays; NumPy's warnings about it are noise.
quiet_numpy = pytest.mark.filterwarnings(
    "ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning"
)


@quiet_numpy
@pytest.mark.parametrize(
    "fault", ["kda_conv_shift_wrong_way", "kda_gate_sign", "kda_beta_no_sigmoid", "kda_dense_state_stride"]
)
def test_differential_check_bites(fault: str) -> None:
    run_case(SMALL)  # the case passes without the fault...
    fails_under(fault, run_case, SMALL)  # ...and fails with it


def test_rejects_bad_page_tables() -> None:
    b, layer = SMALL.binding, SMALL.layer
    pages = b.page_count(b.plan.field(f"layer.{layer}.conv_state").group)
    heads, dim, _ = b.plan.field(f"layer.{layer}.recurrent_state").shape
    arena = torch.full((b.arena_bytes,), CANARY, dtype=torch.uint8, device=DEVICE)
    ones = torch.ones(2, 3 * heads * dim, device=DEVICE)
    args = (ones, torch.ones(3 * heads * dim, 4, device=DEVICE), torch.ones(2, heads, dim, device=DEVICE),
            torch.ones(2, heads, device=DEVICE), torch.ones(heads, device=DEVICE),
            torch.ones(heads, dim, device=DEVICE))
    for table, message in [([0, 1], "must lie in"), ([1, pages], "must lie in"), ([2, 2], "share")]:
        with pytest.raises(ValueError, match=message):
            kda_decode(arena, b, layer, torch.tensor(table, device=DEVICE), *args)
    assert bool((arena == CANARY).all())


def test_unchecked_bad_page_leaves_arena_alone() -> None:
    """With validate=False (the benchmark path) a page id of 0 or past the end must not be
    dereferenced: the arena keeps its bytes and those requests' outputs are NaN."""
    b, layer = SMALL.binding, SMALL.layer
    pages = b.page_count(b.plan.field(f"layer.{layer}.conv_state").group)
    table = [0, pages]
    heads, dim, _ = b.plan.field(f"layer.{layer}.recurrent_state").shape
    rng = np.random.default_rng(3)
    # A plane's worth of guard bytes past the arena: where an unguarded page past the end lands.
    guard = max(p.plane_bytes for p in b.plan.planes)
    arena = torch.from_numpy(rng.integers(0, 256, b.arena_bytes + guard, dtype=np.uint8)).to(DEVICE)
    before = arena.clone()

    def normal(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(DEVICE)

    out = torch.zeros(2, heads, dim, device=DEVICE)
    kda_decode(
        arena, b, layer, torch.tensor(table, device=DEVICE), normal(2, 3 * heads * dim),
        normal(3 * heads * dim, 4), normal(2, heads, dim), normal(2, heads), normal(heads), normal(heads, dim),
        out=out, validate=False,
    )
    assert bool(torch.equal(arena, before)), "the kernel wrote through an invalid page id"
    assert bool(out.isnan().all()), "requests with an invalid page id must get NaN outputs"


@quiet_numpy
def test_unchecked_bad_page_bites() -> None:
    fails_under("kda_no_page_guard", test_unchecked_bad_page_leaves_arena_alone)


# --- the oracle against fla's reference recurrence and gate -------------------------------------

@cache
def fla(module: str, name: str) -> Callable[..., object]:
    """One pure-torch reference function from fla-core's ops/kda/{module}.py (fla-core 0.6.0, a
    test-only dependency; without it these tests skip, saying so).

    Importing any fla.ops module imports all of fla.ops, hundreds of Triton kernels: 17 s here.
    The references need only torch, F and einops, so the function is compiled from the
    installed file's own source; a name it needs beyond those fails loudly with a NameError.
    """
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(reason="fla-core (test extra) is not installed")
    source = Path(spec.submodule_search_locations[0], "ops", "kda", f"{module}.py").read_text()
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    einops = pytest.importorskip("einops", reason="einops (test extra, fla-core's dependency) is not installed")
    namespace = {"torch": torch, "F": torch.nn.functional, "rearrange": einops.rearrange}
    exec(compile(ast.Module([node], type_ignores=[]), f"fla/ops/kda/{module}.py", "exec"), namespace)
    return namespace[name]


Arrays = tuple[np.ndarray, np.ndarray]


def fla_recurrence(*inputs: np.ndarray, scale: float) -> Arrays:
    """fla's naive_recurrent_kda over T tokens ([R, T, H, D] inputs), in its own fp32."""
    t = [torch.from_numpy(a) for a in inputs]
    out = fla("naive", "naive_recurrent_kda")(*t[:5], scale=scale, initial_state=t[5], output_final_state=True)
    o, s = cast(tuple[torch.Tensor, torch.Tensor], out)
    return o.double().numpy(), s.double().numpy()


def oracle_recurrence(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, state: np.ndarray, scale: float
) -> Arrays:
    outs = []
    for i in range(q.shape[1]):
        o, state = oracle.recurrent_step(q[:, i] * scale, k[:, i], v[:, i], g[:, i], beta[:, i], state)
        outs.append(o)
    return np.stack(outs, axis=1), state


def cross_check(seed: int, requests: int, tokens: int, heads: int, dim: int) -> None:
    """Prepared inputs (what the oracle feeds its recurrence: L2-normalised q and k, σ(b), the
    gate), T decode steps of the oracle against fla's T-token recurrence."""
    rng = np.random.default_rng(seed)
    shape = (requests, tokens, heads, dim)
    q, k = (oracle.l2_normalize(rng.standard_normal(shape)) for _ in range(2))
    v = rng.standard_normal(shape)
    g = oracle.gate(rng.standard_normal(shape) * 2, rng.standard_normal(heads) * 0.5, rng.standard_normal((heads, dim)))
    beta = oracle.sigmoid(rng.standard_normal(shape[:3]) * 2)
    state = rng.standard_normal((requests, heads, dim, dim)) * 0.3
    # fla computes in fp32: give both sides the same fp32-exact inputs.
    q, k, v, g, beta, state = (a.astype(np.float32).astype(np.float64) for a in (q, k, v, g, beta, state))
    args = (q, k, v, g, beta, state)
    want_o, want_s = fla_recurrence(*args, scale=dim**-0.5)
    got_o, got_s = oracle_recurrence(*args, scale=dim**-0.5)
    assert_close(got_o, want_o, "float32", "o against fla")
    assert_close(got_s, want_s, "float32", "state against fla")


@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 4), st.integers(1, 3),
       st.sampled_from([16, 32, 128]))
def test_oracle_recurrence_matches_fla(seed: int, requests: int, tokens: int, heads: int, dim: int) -> None:
    cross_check(seed, requests, tokens, heads, dim)


def test_fla_cross_check_bites(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recurrence that decays after the delta update instead of before must fail the check."""
    def decay_last(
        q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, state: np.ndarray
    ) -> Arrays:
        u = v - np.einsum("rhkv,rhk->rhv", state, k)
        s = (state + beta[..., None, None] * k[..., :, None] * u[..., None, :]) * np.exp(g)[..., :, None]
        return np.einsum("rhkv,rhk->rhv", s, q), s

    cross_check(1, 2, 3, 2, 16)
    monkeypatch.setattr(oracle, "recurrent_step", decay_last)
    with pytest.raises(AssertionError):
        cross_check(1, 2, 3, 2, 16)


def gate_check(seed: int, heads: int, dim: int) -> None:
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((3, heads, dim)).astype(np.float32) * 2
    a_log = rng.standard_normal(heads).astype(np.float32) * 0.5
    dt_bias = rng.standard_normal((heads, dim)).astype(np.float32)
    want = fla("gate", "naive_kda_lowerbound_gate")(
        torch.from_numpy(f), torch.from_numpy(a_log), torch.from_numpy(dt_bias.reshape(-1)), lower_bound=-5.0
    )
    assert_close(oracle.gate(f.astype(np.float64), a_log.astype(np.float64), dt_bias.astype(np.float64)),
                 want, "float32", "gate against fla")


@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.sampled_from([16, 128]))
def test_oracle_gate_matches_fla(seed: int, heads: int, dim: int) -> None:
    """g = −5 · σ(exp(A_log) · (f + dt_bias)) is fla's lower-bound KDA gate with lower_bound −5."""
    gate_check(seed, heads, dim)


def test_fla_gate_check_bites(monkeypatch: pytest.MonkeyPatch) -> None:
    gate_check(2, 2, 16)
    monkeypatch.setattr(oracle, "LOWER_BOUND", 5.0)
    with pytest.raises(AssertionError):
        gate_check(2, 2, 16)


def conv_check(seed: int, channels: int, tokens: int) -> None:
    """T steps of the oracle's short conv, each feeding the next its new conv state, equal one
    causal depthwise torch conv1d over [initial state, x_1..x_T] (the standard causal-conv1d
    convention: tap W multiplies the current input). Inputs are bf16-exact, so the state's
    rounding is the identity and any difference is a wrong tap order or shift direction."""
    rng = np.random.default_rng(seed)
    width = 3
    seq = oracle.round_bf16(rng.standard_normal((1, channels, width + tokens)).astype(np.float32))
    weight = rng.standard_normal((channels, width + 1))
    state, outs = seq[:, :, :width], []
    for t in range(tokens):
        y, state = oracle.short_conv(state, seq[:, :, width + t], weight)
        outs.append(y)
    want = torch.nn.functional.conv1d(torch.from_numpy(seq), torch.from_numpy(weight)[:, None, :], groups=channels)
    assert_close(np.stack(outs, axis=2), torch.nn.functional.silu(want), "float32", "conv against torch conv1d")


@given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.integers(1, 6))
def test_oracle_conv_matches_torch(seed: int, channels: int, tokens: int) -> None:
    conv_check(seed, channels, tokens)


def test_torch_conv_check_bites(monkeypatch: pytest.MonkeyPatch) -> None:
    """An oracle whose state keeps the oldest inputs (shifted the wrong way) must fail it."""
    right = oracle.short_conv

    def wrong_way(state: np.ndarray, x: np.ndarray, weight: np.ndarray) -> Arrays:
        y, _ = right(state, x, weight)
        return y, np.concatenate([x[:, :, None], state[:, :, :-1]], axis=2)

    conv_check(4, 3, 3)
    monkeypatch.setattr(oracle, "short_conv", wrong_way)
    with pytest.raises(AssertionError):
        conv_check(4, 3, 3)


def rounding_check(seed: int) -> None:
    """The oracle's bf16 rounding equals torch's fp32 → bf16 cast (round to nearest, ties to
    even) on random finite floats, half of them exact ties."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    bits[::2] = (bits[::2] & 0xFFFF0000) | 0x8000
    values = bits.view(np.float32)
    values = values[np.isfinite(values)]
    want = torch.from_numpy(values).to(torch.bfloat16).double().numpy()
    got = oracle.round_bf16(values)
    bad = got != want
    assert not bad.any(), f"{int(bad.sum())} values round differently, first {values[bad][0]!r}"


@given(st.integers(0, 2**32 - 1))
def test_oracle_bf16_rounding_matches_torch(seed: int) -> None:
    rounding_check(seed)


def test_rounding_check_bites(monkeypatch: pytest.MonkeyPatch) -> None:
    def truncate(x: np.ndarray) -> np.ndarray:
        bits = np.asarray(x, dtype=np.float32).view(np.uint32) & 0xFFFF0000
        return bits.view(np.float32).astype(np.float64)

    rounding_check(5)
    monkeypatch.setattr(oracle, "round_bf16", truncate)
    with pytest.raises(AssertionError):
        rounding_check(5)
