"""The reference cache: what every (field, page) should hold, with no byte arithmetic at all.

The oracle knows which pages of each group are live and, for each live page, the logical
contents of each of its group's fields as a NumPy array plus which rows were written. It
knows nothing of parents, planes, strides or offsets (and imports nothing from impl), so a
differential test can compare the production arena against it after any sequence of
operations: if the two disagree, the arena put a byte in the wrong place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np


class OracleViolation(AssertionError):
    """The implementation asked for something the logical cache forbids (a live page handed
    out again, a write to a page that is not live)."""


@dataclass(frozen=True)
class FieldShape:
    """A field's logical page contents: shape and the NumPy storage dtype of its values."""

    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass
class _Page:
    values: dict[str, np.ndarray]
    written: dict[str, np.ndarray]  # per field: a bool per row (first axis)


class CacheOracle:
    def __init__(self, groups: Mapping[str, Mapping[str, FieldShape]]) -> None:
        self.fields = {g: dict(fs) for g, fs in groups.items()}
        self._group_of = {f: g for g, fs in self.fields.items() for f in fs}
        self._pages: dict[str, dict[int, _Page]] = {g: {} for g in self.fields}

    def live(self, group: str) -> frozenset[int]:
        return frozenset(self._pages[group])

    def allocate(self, group: str, pages: Iterable[int]) -> None:
        """New pages of `group` hold nothing known yet."""
        for page in pages:
            if page in self._pages[group]:
                raise OracleViolation(f"page {page} of {group} handed out while live")
            self._pages[group][page] = _Page(
                {f: np.zeros(s.shape, s.dtype) for f, s in self.fields[group].items()},
                {f: np.zeros(s.shape[0], bool) for f, s in self.fields[group].items()},
            )

    def free(self, group: str, pages: Iterable[int]) -> None:
        for page in pages:
            if self._pages[group].pop(page, None) is None:
                raise OracleViolation(f"page {page} of {group} freed while not live")

    def write(self, field_id: str, page: int, start: int, values: np.ndarray) -> None:
        """Rows [start, start + len(values)) of a field's page now hold `values`."""
        p = self._live_page(field_id, page)
        p.values[field_id][start : start + len(values)] = values
        p.written[field_id][start : start + len(values)] = True

    def expected(self, field_id: str, page: int) -> tuple[np.ndarray, np.ndarray]:
        """(contents, written rows) of a live page's field; unwritten rows are don't-care."""
        p = self._live_page(field_id, page)
        return p.values[field_id], p.written[field_id]

    def _live_page(self, field_id: str, page: int) -> _Page:
        group = self._group_of[field_id]
        if page not in self._pages[group]:
            raise OracleViolation(f"page {page} of {group} used while not live ({field_id})")
        return self._pages[group][page]

    def live_fields(self) -> Iterable[tuple[str, int]]:
        """Every (field, page) with at least one written row."""
        for pages in self._pages.values():
            for page, p in pages.items():
                for field_id, written in p.written.items():
                    if written.any():
                        yield field_id, page


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality, so NaN payloads and -0.0 compare as the bytes they are."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(
        (a.view(np.uint8) == b.view(np.uint8)).all()
    )


def check_pages(live: Mapping[str, Iterable[int]], oracle: CacheOracle) -> None:
    """The allocator's live pages per group are exactly the oracle's."""
    for group in oracle.fields:
        got = frozenset(live.get(group, ()))
        if got != oracle.live(group):
            extra, missing = sorted(got - oracle.live(group)), sorted(oracle.live(group) - got)
            raise OracleViolation(f"{group}: live pages differ, extra {extra[:5]}, missing {missing[:5]}")


def check_contents(read: Mapping[tuple[str, int], np.ndarray], oracle: CacheOracle) -> None:
    """Each (field, page) read back equals the oracle on its written rows."""
    for (field_id, page), got in read.items():
        want, written = oracle.expected(field_id, page)
        if not same_bits(np.ascontiguousarray(got[written]), np.ascontiguousarray(want[written])):
            rows = np.flatnonzero(written)
            raise OracleViolation(
                f"{field_id} page {page}: read-back differs from the oracle (rows {rows.min()}..{rows.max()})"
            )

