"""Progress on long work: drawn on a terminal's stderr, and nothing at all on a pipe, with --json,
or in a forked worker (cli/progress.py)."""

from __future__ import annotations

import fcntl
import io
import multiprocessing
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from kvproof.cli import progress

VERIFY = [sys.executable, "-m", "kvproof", "engine", "tokenspeed", "--recipe", "mha", "--tp", "1"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _count(monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO, wanted: bool) -> str:
    monkeypatch.setattr(sys, "stderr", stderr)
    with progress.shown(wanted), progress.task(3, "work", "points") as shown:
        for name in ("a", "b", "c"):
            time.sleep(0.15)  # tqdm redraws at most every 0.1 s
            shown.advance(1, name)
    return stderr.getvalue()


def test_a_terminal_sees_the_count_and_what_is_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = _count(monkeypatch, _Terminal(), True)
    assert "work: 3/3 points" in drawn and ", c" in drawn


@pytest.mark.parametrize("stderr,wanted", [(io.StringIO(), True), (_Terminal(), False)], ids=["pipe", "json"])
def test_nothing_is_drawn_on_a_pipe_or_with_json(monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO,
                                                 wanted: bool) -> None:
    assert _count(monkeypatch, stderr, wanted) == ""


def _drawing_here() -> bool:
    return progress.drawing()


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")
def test_a_forked_worker_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with progress.shown(True):
        assert progress.drawing()
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert pool.apply(_drawing_here) is False


def _stderr_on_a_terminal(argv: list[str], tmp_path: Path) -> tuple[int, str]:
    """argv's exit code and what it wrote to stderr, a terminal of 100 columns; stdout goes to a file."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with open(tmp_path / "stdout", "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=side, close_fds=True)
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_verify_engine_shows_its_points_on_a_terminal_and_nothing_with_json(tmp_path: Path) -> None:
    code, drawn = _stderr_on_a_terminal(VERIFY, tmp_path)
    assert code in (0, 1) and "tokenspeed mha: " in drawn and " points [" in drawn, drawn[-500:]
    code, drawn = _stderr_on_a_terminal([*VERIFY, "--json"], tmp_path)
    assert code in (0, 1) and "tokenspeed mha: " not in drawn, drawn[-500:]
    piped = subprocess.run(VERIFY, capture_output=True, text=True, check=False)
    assert piped.returncode in (0, 1) and "tokenspeed mha: " not in piped.stderr, piped.stderr[-500:]


def test_a_sweep_on_z3_counts_its_rounds_on_a_terminal(tmp_path: Path) -> None:
    """`ceil` takes the z3 query (no table): each query round is counted, with what it is doing."""
    code, drawn = _stderr_on_a_terminal([sys.executable, "-m", "kvproof", "sweep", "--model", "kimi-k3", "--policy",
                                         "ceil", "--vary", "num_layers=24..64", "mla_every=2..4"], tmp_path)
    assert code in (0, 1) and "sweep: " in drawn and " rounds [" in drawn and "refinement(s)" in drawn, drawn[-500:]
