"""Torch views of a bound arena, the way kernels see it.

The arena is one uint8 tensor. A field of a group is a strided view with the plan's page stride
(`field_pages`). Production MLA kernels, however, take a layer's latent cache as a dense
[pages, 128, 576] tensor and walk pages by the payload size: `latent_cache` builds exactly that
view, so a plan whose stride is not the payload makes the kernel read the wrong bytes.
"""

from __future__ import annotations

import torch

from kvproof.impl.packer import Binding

TORCH_DTYPES: dict[str, torch.dtype] = {
    "uint8": torch.uint8,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e8m0fnu": torch.float8_e8m0fnu,
    "float64": torch.float64,
}


def new_arena(binding: Binding, device: str | torch.device = "cpu") -> torch.Tensor:
    return torch.empty(binding.arena_bytes, dtype=torch.uint8, device=device)


def _typed(arena: torch.Tensor, dtype: str) -> tuple[torch.Tensor, int]:
    t = TORCH_DTYPES[dtype]
    return arena.view(t), t.itemsize


def field_pages(arena: torch.Tensor, binding: Binding, field_id: str) -> torch.Tensor:
    """[page_count, *shape] view of one field, pages `stride` bytes apart, page 0 included."""
    f = binding.plan.field(field_id)
    typed, size = _typed(arena, f.dtype)
    inner = [1]
    for d in reversed(f.shape[1:]):
        inner.insert(0, inner[0] * d)
    return typed.as_strided(
        (binding.page_count(f.group), *f.shape),
        (f.page_stride_bytes // size, *inner),
        binding.offset_bytes(field_id, 0) // size,
    )


def latent_cache(arena: torch.Tensor, binding: Binding, field_id: str) -> torch.Tensor:
    """[page_count, 128, latent_dim] dense view from page 0 with the implicit payload stride.

    This is the production MLA kernels' assumption, deliberately not the plan's stride.
    """
    f = binding.plan.field(field_id)
    typed, size = _typed(arena, f.dtype)
    rows, _, width = f.shape
    pages = binding.page_count(f.group)
    start = binding.offset_bytes(field_id, 0) // size
    # A wrong stride can push the dense view past the arena: clamp so the view stays legal and
    # the kernel reads whatever bytes the engine would have read.
    pages = min(pages, (typed.numel() - start) // (rows * width))
    return typed.as_strided((pages, rows, width), (rows * width, width, 1), start)
