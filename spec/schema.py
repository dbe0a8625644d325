"""The plan document's structure, published as a JSON Schema (spec/plan.schema.json).

Another engine can validate its export with any JSON Schema tool; kvproof validates with
`jsonschema` and turns the first error into the same one-line message, naming the key, that the
semantic checks of spec/plan_reader.py give (ids that resolve, page counts). The schema also caps
every list and number a plan may hold, so no document can make the check allocate without
bound.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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


Check = Callable[[Any], bool]

# Draft 2020-12's types as jsonschema's type checker has them: a bool is no number, and a float
# with no fraction is an integer.
_TYPES: dict[str, Check] = {
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: type(v) is int or (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "string": lambda v: isinstance(v, str),
}
_ANNOTATIONS = _NOTES | {"$schema", "$id", "$defs"}


@cache
def _compiled() -> Check:
    # jsonschema walks a plan of a few hundred fields in tens of milliseconds, most of an engine
    # point's check; this compiled test of the same keywords decides it in well under one.
    return _compile(_inline(schema(), schema().get("$defs", {})))


def _compile(node: dict) -> Check:
    """`node` as one test with jsonschema's meaning for each keyword it holds. A keyword the test
    does not implement is an error here, so the schema cannot gain a rule the test skips."""
    unknown = set(node) - _ANNOTATIONS - set(_KEYWORDS)
    if unknown:
        raise ValueError(f"{SCHEMA_FILE}: the compiled check does not implement {sorted(unknown)}")
    tests = tuple(_KEYWORDS[k](node[k], node) for k in node if k in _KEYWORDS)
    if len(tests) == 1:
        return tests[0]

    def test(v: Any) -> bool:  # a loop, not all() over a generator: half the time on a plan
        for t in tests:  # noqa: SIM110
            if not t(v):
                return False
        return True
    return test


def _type(rule: str | list[str], _: dict) -> Check:
    if isinstance(rule, str):
        return _TYPES[rule]
    kinds = tuple(_TYPES[k] for k in rule)
    return lambda v: any(k(v) for k in kinds)


def _properties(rule: dict, node: dict) -> Check:
    checks = {k: _compile(sub) for k, sub in rule.items()}
    extra = node.get("additionalProperties", True)
    closed = extra is False
    rest = _compile(extra) if isinstance(extra, dict) else None

    def test(v: Any) -> bool:
        if not isinstance(v, dict):
            return True
        for k, value in v.items():
            check = checks.get(k)
            if check is not None:
                if not check(value):
                    return False
            elif closed or (rest is not None and not rest(value)):
                return False
        return True
    return test


def _additional(rule: Any, node: dict) -> Check:
    if "properties" in node:  # decided with the properties
        return lambda v: True
    return _properties({}, {"additionalProperties": rule})


def _required(rule: list[str], _: dict) -> Check:
    return lambda v: not isinstance(v, dict) or all(k in v for k in rule)


def _items(rule: dict, _: dict) -> Check:
    check = _compile(rule)

    def test(v: Any) -> bool:
        if isinstance(v, list):
            for x in v:
                if not check(x):
                    return False
        return True
    return test


def _sized(kind: type[list] | type[str], at_least: bool) -> Callable[[int, dict], Check]:
    return lambda bound, _: (lambda v: not isinstance(v, kind) or (len(v) >= bound if at_least else len(v) <= bound))


def _bound(at_least: bool) -> Callable[[int, dict], Check]:
    number = _TYPES["number"]
    return lambda bound, _: (lambda v: not number(v) or (v >= bound if at_least else v <= bound))


def _enum(rule: list[Any], _: dict) -> Check:
    if not all(isinstance(x, str) for x in rule):  # jsonschema's equality of other values is its own
        raise ValueError(f"{SCHEMA_FILE}: the compiled check implements enums of strings only")
    return lambda v: isinstance(v, str) and v in rule


def _one_of(rule: list[dict], _: dict) -> Check:
    checks = [_compile(sub) for sub in rule]
    return lambda v: sum(c(v) for c in checks) == 1


_KEYWORDS: dict[str, Callable[[Any, dict], Check]] = {
    "type": _type, "properties": _properties, "additionalProperties": _additional, "required": _required,
    "items": _items, "minItems": _sized(list, True), "maxItems": _sized(list, False),
    "minLength": _sized(str, True), "maxLength": _sized(str, False), "minimum": _bound(True),
    "maximum": _bound(False), "enum": _enum, "oneOf": _one_of,
}


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
    """Raise ConfigError with one line naming the key for the first structural error, if any.
    A plan the compiled check accepts is valid; any other is explained by jsonschema, which also
    has the last word on validity."""
    if _compiled()(plan):
        return
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
