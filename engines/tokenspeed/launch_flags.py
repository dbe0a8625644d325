"""tokenspeed 0.1.1's launch flags, in its own spellings, read into a kvproof Launch.

Spellings and defaults are the engine's (tokenspeed/runtime/utils/server_args.py): `--tp` is an
alias of `--attn-tp-size` (passing both is an error there too), `--ep-size` of
`--expert-parallel-size`; a repeated flag keeps its last value, as argparse does. A `--flag` the
engine does not parse is refused (a misspelled parallelism flag never passes), and so are the
parallelism flags tokenspeed's Mapping reads that kvproof does not model. The engine's other
flags (`--port`, the model path, ...) do not bear on parallelism or the cache: kept as `ignored`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import Any

from kvproof.engines.tokenspeed.flags import BARE, SPELLINGS
from kvproof.spec.launch import DEFAULTS, KV_CACHE_DTYPES, OPTIONAL, SEARCH_MAX, SIZE_FLAGS, Launch


class LaunchFlagError(ValueError):
    """A launch flag the engine itself would refuse to parse; one line naming the flag."""


# spelling -> Launch field, for the integer size flags
SIZE_SPELLINGS: dict[str, str] = {
    "--tp": "tp", "--tensor-parallel-size": "tp", "--attn-tp-size": "tp",
    "--data-parallel-size": "dp",
    "--pipeline-parallel-size": "pp",
    "--world-size": "world",
    "--dense-tp-size": "dense_tp",
    "--ep-size": "ep", "--expert-parallel-size": "ep",
    "--moe-tp-size": "moe_tp",
    "--decode-context-parallel-size": "dcp",
    "--nnodes": "nnodes",
}
# the spelling a fix is written in, per field
CANONICAL: dict[str, str] = {
    "tp": "--tp", "dp": "--data-parallel-size", "pp": "--pipeline-parallel-size", "world": "--world-size",
    "dense_tp": "--dense-tp-size", "ep": "--ep-size", "moe_tp": "--moe-tp-size",
    "dcp": "--decode-context-parallel-size", "nnodes": "--nnodes", "enable_ep": "--enable-expert-parallel",
    "dist_init_addr": "--dist-init-addr", "dtype": "--kv-cache-dtype", "prefill": "--disaggregation-mode",
}
DISAGGREGATION_MODES = ("null", "prefill", "decode", "encode")  # tokenspeed's choices
# speculative decoding flags: read and shown; the draft layers they add come with --drafts (the draft
# model's config, not a flag)
SPECULATIVE = ("--speculative-algorithm", "--speculative-num-steps", "--speculative-draft-model-path",
               "--speculative-eagle-topk", "--speculative-num-draft-tokens")
DTYPE_SPELLING = {"fp8": "fp8", "bf16": "bfloat16", None: "mxfp8"}
# Parallelism flags tokenspeed's Mapping reads that the rules do not model -> the one value that
# changes nothing (None: every value does). Refused rather than checked as if absent.
NOT_MODELLED: dict[str, str | None] = {
    "--nprocs-per-node": None, "--lm-head-tp-size": None, "--attn-head-tp-size": None,
    "--prefill-context-parallel-size": "1",
}
EXAMPLE_ADDR = "127.0.0.1:4000"  # a placeholder host:port in written-out launches


@dataclass(frozen=True)
class ParsedLaunch:
    launch: Launch
    given: tuple[tuple[str, str], ...]  # (spelling, value) of every flag read, in order
    ignored: tuple[str, ...]
    kv_cache_dtype: str  # the engine's spelling
    dist_init_addr: str | None
    speculative: tuple[tuple[str, str], ...]


def _size(flag: str, text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise LaunchFlagError(f"{flag} expects an integer, got {text[:40]!r}") from None
    if not 1 <= value <= SEARCH_MAX:
        raise LaunchFlagError(f"{flag} must be between 1 and {SEARCH_MAX}, got {text[:40]}")
    return value


def _host_port(text: str) -> bool:
    """tokenspeed splits --dist-init-addr on ':' into exactly a host and an integer port."""
    parts = text.split(":")
    return len(parts) == 2 and bool(parts[0]) and parts[1].isascii() and parts[1].isdigit()


def _split(argv: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) pairs: `--f=v`, `--f v`, a bare `--f`, or (token, None) for a positional."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--") and "=" in token:
            flag, value = token.split("=", 1)
            pairs.append((flag, value))
        elif token.startswith("--") and token not in BARE and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            pairs.append((token, argv[i + 1]))
            i += 1
        else:
            pairs.append((token, None))
        i += 1
    return pairs


def _refuse_unknown(flag: str, value: str | None) -> None:
    if flag.startswith("--") and flag != "--" and flag not in SPELLINGS:
        near = difflib.get_close_matches(flag, SPELLINGS, n=1)
        raise LaunchFlagError(f"{flag[:60]!r} is not a tokenspeed 0.1.1 flag"
                              + (f" (did you mean {near[0]}?)" if near else ""))
    if flag in NOT_MODELLED and value != NOT_MODELLED[flag]:
        raise LaunchFlagError(f"{flag} is a parallelism flag kvproof's launch rules do not model "
                              "(tokenspeed's Mapping reads it): leave it out to check the rest")


def parse_launch(argv: list[str]) -> ParsedLaunch:
    values: dict[str, Any] = {}
    given, ignored, speculative = [], [], []
    dtype_spelling, addr = "auto", None
    tp_spellings: set[str] = set()
    for flag, value in _split(argv):
        _refuse_unknown(flag, value)
        known = flag in SIZE_SPELLINGS or flag in ("--enable-expert-parallel", "--dist-init-addr", "--kv-cache-dtype",
                                                   "--disaggregation-mode", *SPECULATIVE)
        if not known:
            ignored.append(flag if value is None else f"{flag} {value}")
            continue
        if flag == "--enable-expert-parallel":
            if value is not None:
                raise LaunchFlagError(f"--enable-expert-parallel takes no value, got {value[:40]!r}")
            values["enable_ep"] = True
            given.append((flag, ""))
            continue
        if value is None:
            raise LaunchFlagError(f"{flag} expects a value")
        given.append((flag, value))
        if flag in SIZE_SPELLINGS:
            values[SIZE_SPELLINGS[flag]] = _size(flag, value)
            if SIZE_SPELLINGS[flag] == "tp":
                tp_spellings.add("--attn-tp-size" if flag == "--attn-tp-size" else "--tp")
        elif flag == "--kv-cache-dtype":
            if value not in KV_CACHE_DTYPES:
                raise LaunchFlagError(f"--kv-cache-dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                                      f"got {value[:40]!r}")
            dtype_spelling = value
        elif flag == "--disaggregation-mode":
            if value not in DISAGGREGATION_MODES:
                raise LaunchFlagError(f"--disaggregation-mode must be one of {', '.join(DISAGGREGATION_MODES)}, "
                                      f"got {value[:40]!r}")
            values["prefill"] = value == "prefill"
        elif flag == "--dist-init-addr":
            if not _host_port(value):  # tokenspeed raises on it whatever the dp
                raise LaunchFlagError(f"--dist-init-addr expects host:port, got {value[:40]!r}")
            addr = value
        else:
            speculative.append((flag, value))
    if len(tp_spellings) > 1:
        raise LaunchFlagError("--tp (--tensor-parallel-size) and --attn-tp-size are aliases; pass one")
    launch = replace(Launch(), **values, dtype=KV_CACHE_DTYPES[dtype_spelling],
                     dist_init_addr=addr is not None)
    return ParsedLaunch(launch, tuple(given), tuple(ignored), dtype_spelling, addr, tuple(speculative))


def launch_argv(launch: Launch) -> list[str]:
    """The flags that give `launch` (the inverse of parse_launch), in canonical spellings."""
    argv: list[str] = []
    for name in SIZE_FLAGS:
        value = getattr(launch, name)
        if value is not None and (name in OPTIONAL or value != DEFAULTS[name]):
            argv += [CANONICAL[name], str(value)]
    if launch.enable_ep:
        argv.append(CANONICAL["enable_ep"])
    if launch.dist_init_addr:
        argv += [CANONICAL["dist_init_addr"], EXAMPLE_ADDR]
    if launch.prefill:
        argv += [CANONICAL["prefill"], "prefill"]
    return [*argv, CANONICAL["dtype"], DTYPE_SPELLING[launch.dtype]]
