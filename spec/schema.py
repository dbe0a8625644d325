"""The plan document's structure, published as a JSON Schema (spec/plan.schema.json).

Another engine can validate its export with any JSON Schema tool; kvproof validates with
`jsonschema` and turns the first error into the same one-line message, naming the key, that the
semantic checks of spec/plan_reader.py give (ids that resolve, page counts). The schema also caps
every list and number a plan may hold, so no document can make the check allocate without
bound.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from kvproof.spec.catalog import ConfigError

SCHEMA_FILE = "plan.schema.json"


@cache
def schema() -> dict:
    return json.loads(resources.files("kvproof.spec").joinpath(SCHEMA_FILE).read_text())


@cache
def _validator() -> Any:
    # Imported here: the prover reads derived plans only and should not pay for jsonschema.
    from jsonschema import Draft202012Validator

    # The same schema with its local $refs written out: jsonschema resolves a $ref on every
    # visit, which made one engine plan of 72 fields take 0.7 s to validate.
    return Draft202012Validator(_inline(schema(), schema().get("$defs", {})))


_NOTES = {"description", "title", "$comment"}


def _inline(node: Any, defs: dict) -> Any:
    """`node` with every local {"$ref": "#/$defs/name", ...} merged with that definition, where
    the two share no constraint (the plan schema has no recursive definitions)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = defs[ref.removeprefix("#/$defs/")]
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            if set(siblings) & set(target) <= _NOTES:
                return _inline({**target, **siblings}, defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def key_path(path: Any) -> str:
    """jsonschema's path (a deque of keys and indices) as the plan's own 'groups[0].packing'."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f".{step}" if out else str(step)
    return out


def _show(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length():,} bits"  # its digits would not fit one line
    text = repr(value)
    return text if len(text) <= 24 else text[:20] + "..."


def validate(plan: Any) -> None:
    """Raise ConfigError with one line naming the key for the first structural error, if any."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(plan))
    if error is None:
        return
    raise ConfigError(_message(error))


def _message(error: Any) -> str:
    kind, rule, value = error.validator, error.validator_value, error.instance
    where = key_path(error.absolute_path)
    key = f"plan key {where!r}"
    prefix = f"{where}." if where else ""
    if kind == "type" and not where:
        return "plan must be an object"
    if kind == "type":
        expected = " or ".join(rule) if isinstance(rule, list) else rule
        return f"{key} has the wrong type {type(value).__name__}; expected {expected}"
    if kind == "required":
        missing = next(k for k in rule if k not in value)
        return f"plan is missing key {prefix + missing!r}"
    if kind == "additionalProperties":
        extra = next(k for k in value if k not in error.schema.get("properties", {}))
        name = extra if len(extra) <= 40 else extra[:37] + "..."
        return f"plan key {prefix + name!r} is not part of the plan schema ({SCHEMA_FILE})"
    if kind == "minimum":
        what = "positive" if rule == 1 else f">= {rule}"
        return f"{key} must be {what}, got {_show(value)}"
    if kind == "maximum":
        return f"{key} must be at most {rule:,}, got {_show(value)}"
    if kind == "minItems" and rule == 1:
        return f"{key} is empty: a plan needs at least one"
    if kind in ("minItems", "maxItems"):
        bound = "at least" if kind == "minItems" else "at most"
        return f"{key} lists {len(value):,} items; a plan allows {bound} {rule:,}"
    if kind in ("minLength", "maxLength"):
        bound = "at least" if kind == "minLength" else "at most"
        return f"{key} must be a string of {bound} {rule} characters"
    if kind == "enum":
        return f"{key}: unknown value {_show(value)}; known: {', '.join(map(str, rule))}"
    return f"{key} does not match the plan schema ({kind}, {SCHEMA_FILE})"
