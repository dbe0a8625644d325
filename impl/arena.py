"""The production arena in NumPy: one byte buffer and typed per-field page views.

Mirrors kernels/views.py (`field_pages`) without torch, for the host side and for differential
tests: a field's pages are a strided view of the byte buffer, one page every `stride` bytes from
page 0 (the null parent's last slot). NumPy has no bfloat16 or float8, so fp8 latent rows are
stored as uint8 (as the recipe already does) and bf16 values as their uint16 bit patterns; the
readers and writers move bit patterns and never convert.
"""

from __future__ import annotations

import numpy as np

from kvproof.impl import faults
from kvproof.impl.packer import Binding, PlanError

faults.declare({
    "arena_dense_page_stride": "the arena's field views walk pages by payload bytes instead of the plan's stride",
})

# Storage types per plan dtype: bit patterns where NumPy lacks the float type.
NUMPY_DTYPES: dict[str, np.dtype] = {
    "uint8": np.dtype(np.uint8),
    "float8_e4m3fn": np.dtype(np.uint8),
    "bfloat16": np.dtype(np.uint16),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "int8": np.dtype(np.int8),
    "float8_e5m2": np.dtype(np.uint8),
    "float8_e8m0fnu": np.dtype(np.uint8),
    "float64": np.dtype(np.float64),
}


class ArenaError(PlanError):
    """A plan whose field views would not fit the arena's buffer."""


class Arena:
    """A bound plan's byte buffer with readers and writers per layer and page.

    Every byte starts as `fill`; 0xFF makes every float view NaN, so a test can tell bytes
    nobody wrote from bytes someone did.
    """

    def __init__(self, binding: Binding, fill: int = 0xFF) -> None:
        self.binding = binding
        self.buffer = np.full(binding.arena_bytes, fill, dtype=np.uint8)
        self._views: dict[str, np.ndarray] = {}

    def pages(self, field_id: str) -> np.ndarray:
        """[page_count, *shape] view of one field, page 0 included, `stride` bytes apart.

        np.ndarray checks that the whole view lies inside the buffer, so a plan whose stride or
        offset runs past the arena raises instead of touching foreign memory.
        """
        view = self._views.get(field_id)
        if view is None:
            f = self.binding.plan.field(field_id)
            dtype = NUMPY_DTYPES[f.dtype]
            inner = [dtype.itemsize]
            for d in reversed(f.shape[1:]):
                inner.insert(0, inner[0] * d)
            page_stride_bytes = f.page_stride_bytes
            if faults.active("arena_dense_page_stride"):
                page_stride_bytes = f.payload_bytes
            try:
                view = np.ndarray(
                    (self.binding.page_count(f.group), *f.shape),
                    dtype=dtype,
                    buffer=self.buffer,
                    offset=self.binding.offset_bytes(field_id, 0),
                    strides=(page_stride_bytes, *inner),
                )
            except ValueError:
                raise ArenaError(
                    f"pages of {field_id} (stride {page_stride_bytes:,} B from byte "
                    f"{self.binding.offset_bytes(field_id, 0):,}) run past the arena of {len(self.buffer):,} B"
                ) from None
            self._views[field_id] = view
        return view

    def _page(self, field_id: str, page: int) -> np.ndarray:
        count = self.binding.page_count(self.binding.plan.field(field_id).group)
        if not 0 <= page < count:
            raise IndexError(f"page {page} outside 0..{count - 1} of {field_id}")
        return self.pages(field_id)[page]

    def write_latent(self, layer: int, page: int, start: int, rows: np.ndarray) -> None:
        """Write latent rows [start, start + len(rows)) of an MLA layer's page; rows is [n, latent_dim]."""
        view = self._page(f"layer.{layer}.latent_kv", page)
        view[start : start + len(rows), 0, :] = rows

    def read_latent(self, layer: int, page: int) -> np.ndarray:
        """All rows of an MLA layer's page as [rows, latent_dim] (a copy)."""
        return self._page(f"layer.{layer}.latent_kv", page)[:, 0, :].copy()

    def write_conv(self, layer: int, page: int, state: np.ndarray) -> None:
        self._page(f"layer.{layer}.conv_state", page)[...] = state

    def read_conv(self, layer: int, page: int) -> np.ndarray:
        return self._page(f"layer.{layer}.conv_state", page).copy()

    def write_recurrent(self, layer: int, page: int, state: np.ndarray) -> None:
        self._page(f"layer.{layer}.recurrent_state", page)[...] = state

    def read_recurrent(self, layer: int, page: int) -> np.ndarray:
        return self._page(f"layer.{layer}.recurrent_state", page).copy()
