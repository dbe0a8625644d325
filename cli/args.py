"""What more than one `verify` command shares: the model and draft arguments, --max-padding,
--vary, the padding bound in words, and UsageError. No command imports another command."""

from __future__ import annotations

import argparse
import re
from fractions import Fraction

from kvproof.impl.recipe import DRAFT_DTYPE, DRAFT_LIMIT, MAX_PADDING
from kvproof.spec.catalog import BUILTIN_MODELS, CACHE_DTYPES, ConfigError
from kvproof.spec.sweep_family import PARAMETERS, Range, parse_range


class UsageError(ValueError):
    """A bad flag value that argparse cannot see (an unknown mutant, an unwritable folder)."""


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="kimi-k3", help=f"built-in model: {', '.join(BUILTIN_MODELS)}")
    parser.add_argument("--config", metavar="FILE", help="HF-style config.json (overrides --model)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def max_padding(text: str) -> Fraction | None:
    """--max-padding: a bound >= 0, or inf (None: no bound)."""
    if text.strip().lower() in ("inf", "infinity"):
        return None
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or inf") from None
    if not 0 <= value <= 10**6:
        raise argparse.ArgumentTypeError(f"{text!r}: a padding bound is in 0..1e6, or inf")
    return value


def draft_count(text: str) -> int:
    """--drafts N for one point."""
    if not re.fullmatch(r"\d{1,3}", text.strip()) or int(text) > DRAFT_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r}: give a draft layer count in 0..{DRAFT_LIMIT}")
    return int(text)


def draft_range(text: str) -> tuple[int, ...]:
    """--drafts N or A-B (every count from A to B) for a domain."""
    match = re.fullmatch(r"(\d{1,3})(?:-(\d{1,3}))?", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: give a draft layer count N or a range A-B, e.g. 0-8")
    low = int(match[1])
    high = int(match[2]) if match[2] is not None else low
    if not low <= high <= DRAFT_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r}: need A <= B <= {DRAFT_LIMIT}")
    return tuple(range(low, high + 1))


def add_draft_arguments(parser: argparse.ArgumentParser, domain: bool) -> None:
    """--drafts, --draft-dtype and --max-padding; a domain takes ranges and several dtypes."""
    if domain:
        parser.add_argument("--drafts", type=draft_range, default=(0,), metavar="N|A-B",
                            help="draft MLA layers, or a range of counts (default 0)")
        parser.add_argument("--draft-dtype", nargs="+", action="extend", choices=CACHE_DTYPES,
                            help=f"draft cache dtypes (default {DRAFT_DTYPE}, as tokenspeed forces for DSpark)")
    else:
        parser.add_argument("--drafts", type=draft_count, default=0, metavar="N",
                            help="draft MLA layers (DSpark, MTP), default 0")
        parser.add_argument("--draft-dtype", choices=CACHE_DTYPES, default=DRAFT_DTYPE,
                            help=f"draft cache dtype (default {DRAFT_DTYPE}, as tokenspeed forces for DSpark)")
    parser.add_argument("--max-padding", type=max_padding, default=MAX_PADDING, metavar="X|inf",
                        help="the padding bound you accept (default the target bound 0.25); the engine's "
                        "own bound still applies where it has one (no draft layers)")


def draft_dtypes(args: argparse.Namespace) -> tuple[str, ...]:
    """A domain's --draft-dtype values, the default where none is given (the option extends, so a default list
    would take the given values after it)."""
    return tuple(args.draft_dtype or (DRAFT_DTYPE,))


def bound_text(bound: Fraction | None) -> str:
    return "inf" if bound is None else f"{float(bound):.3f}"


def accepted_bound_text(accepted: Fraction | None) -> str:
    """A domain's padding bound: the user's, but never looser than the engine's where it has one."""
    if accepted is not None and accepted <= MAX_PADDING:
        return bound_text(accepted)
    return f"{bound_text(accepted)} with drafts, the engine's {bound_text(MAX_PADDING)} without"


def parse_vary(items: list[str]) -> dict[str, Range]:
    out: dict[str, Range] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or name not in PARAMETERS:
            raise ConfigError(f"--vary {item!r}: expected NAME=RANGE with NAME one of {', '.join(PARAMETERS)}")
        if name in out:
            raise ConfigError(f"--vary names {name} twice")
        out[name] = parse_range(name, text)
    return out
