"""The entries tokenspeed's own start-up builds a cache recipe through, as the revision under test has them.

`create_attn_components` (layers/attention/registry.py) builds each side's attention config with
`_create_attn_config`, picks the cache family with `_resolve_cache_family`, builds the recipe
with `setup.cache_recipe` (`setup._RECIPES[family]`) and runs `CacheRecipe.setup()`, whose
stages pipeline.py runs. kvproof drives every recipe through the same entries, each found by what
the revision has (an attribute present, a call shape read with `inspect.signature`), never by its
version string: a helper that moved is followed, and one that is gone is an AdapterGap naming it,
so that recipe is NOT VERIFIED (adapter) while the others are planned.

- `_create_attn_config` returns a composite `AttnConfig(components=...)` in tokenspeed 0.1.1 (the
  linear-attention component included) and a flat config (`MLAConfig`, `MHAConfig`) in the
  revisions from #1117 on: `softmax` finds the softmax part of either.
- `_resolve_cache_family` is 0.1.1's; earlier revisions decide the family inline in
  create_attn_components, and the family planned is then the one asked for.
- `setup.cache_recipe` is 0.1.1's; earlier revisions index `_RECIPES` directly.
The registry cannot be imported on a CPU, so these are taken from its source in part
(partial.py): the engine's own definitions, with the engine's own imports.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

from kvproof.engines.stubs import Unavailable
from kvproof.engines.verdict import AdapterGap

REGISTRY = "runtime.layers.attention.registry"
# What a profile loads to build through these entries (loader.load names).
MODULES = ("setup", "base", "plan", f"{REGISTRY}!")
CAPACITY = "capacity and scheduling only; the arena layout never reads it"
# CacheRecipe's constructor arguments past the configs: the budget kvproof does not have, and no
# probe (probe_batch_rows, 0.1.1 on: size by budget). decode_input_tokens is decode_inputs'.
BUDGET: dict[str, Any] = {
    "cache_budget_bytes": Unavailable("cache_budget_bytes", CAPACITY),
    "overlap_schedule_depth": Unavailable("overlap_schedule_depth", CAPACITY),
    "probe_batch_rows": None,
}


def decode_inputs(server_args: Any) -> int:
    """Tokens a decode step feeds each request, as the engine's event loop derives it
    (runtime/engine/event_loop.py): the draft tokens under a speculative algorithm, else 1. The
    DeepSeek-V4 recipe before 0.1.1 sizes its ratio-4 compressor state window from it."""
    return int(server_args.speculative_num_draft_tokens) if server_args.speculative_algorithm is not None else 1


def _entry(module: types.ModuleType, name: str, where: str) -> Any:
    try:
        return getattr(module, name)
    except AttributeError:
        raise AdapterGap(f"{where}.{name}", "this revision has no such entry, which kvproof builds the recipe "
                         "through") from None


def _call(fn: Any, label: str, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, the call kvproof makes as the engine's start-up does; a signature
    that no longer binds it is an AdapterGap naming the signature."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise AdapterGap(f"{label}{inspect.signature(fn)}", f"the call kvproof makes as the engine's start-up "
                         f"does no longer binds: {err}") from None
    return fn(*args, **kwargs)


def arch(modules: dict[str, types.ModuleType], name: str) -> Any:
    """`model_config.attention_arch` as configs/model_config.py sets it for the checkpoint: the
    engine's own `AttentionArch.<name>` (the one the registry's table is keyed by)."""
    enum = _entry(modules[REGISTRY], "AttentionArch", "registry")
    try:
        return enum[name]
    except KeyError:
        raise AdapterGap(f"AttentionArch.{name}", "this revision's AttentionArch has only "
                         + ", ".join(enum.__members__)) from None


def attn_config(modules: dict[str, types.ModuleType], server_args: Any, model_config: Any,
                is_draft: bool = False) -> Any:
    """registry._create_attn_config, called as create_attn_components calls it."""
    create = _entry(modules[REGISTRY], "_create_attn_config", "registry")
    if is_draft:
        return _call(create, "registry._create_attn_config", server_args, model_config, is_draft=True)
    return _call(create, "registry._create_attn_config", server_args, model_config)


def softmax(modules: dict[str, types.ModuleType], config: Any) -> Any:
    """The softmax-family part of an attention config: its SoftmaxAttnConfig component where the
    config is composite (`components`), else the flat config itself."""
    if not hasattr(config, "components"):
        return config
    base = _entry(modules[REGISTRY], "SoftmaxAttnConfig", "registry")
    return _call(config.component, "AttnConfig.component", base)


def stamp_window(modules: dict[str, types.ModuleType], config: Any, window: int) -> None:
    """What create_attn_components does for a DeepSeek-V4 target: the checkpoint's sliding window
    written on the softmax part of its attention config."""
    softmax(modules, config).sliding_window_tokens = window


def check_family(modules: dict[str, types.ModuleType], family: str, server_args: Any, model_config: Any,
                 config: Any) -> None:
    """The family the engine's start-up picks for kvproof's model must be the recipe planned
    (`_resolve_cache_family`, where the revision has it)."""
    registry = modules[REGISTRY]
    if not hasattr(registry, "_resolve_cache_family"):
        return  # decided inline in create_attn_components at this revision
    side = _call(_entry(registry, "_resolve_attn_side", "registry"), "registry._resolve_attn_side", model_config,
                 server_args.attention_backend)
    chosen = _call(registry._resolve_cache_family, "registry._resolve_cache_family", side, config)
    if chosen != family:
        raise AdapterGap("registry._resolve_cache_family", f"kvproof's model for recipe {family!r} resolves to "
                         f"{chosen!r} at this revision")


def check_draft_family(modules: dict[str, types.ModuleType], family: str, server_args: Any,
                       draft_model_config: Any, draft_config: Any) -> None:
    """A draft the target's recipe plans as its continuation layers: create_attn_components
    binds it so when `_resolve_heterogeneous_draft_family` (where the revision has it) answers
    None for the draft's ordinary family (`_ordinary_cache_family` of its attention config; an
    in-tree draft declares no profile of its own), and when it answers an MHA view of an ordinary
    target (`_ORDINARY_CACHE_FAMILIES`): create_attn_components prepares the cache setup with the
    target's family whatever the draft's, and the heterogeneous family only names the draft's
    compute view, a layer window of that one plan (`spec.layer_view(..., family=...)`)."""
    registry = modules[REGISTRY]
    if not hasattr(registry, "_resolve_heterogeneous_draft_family"):
        return
    if hasattr(registry, "_resolve_attn_side"):  # the draft's side checks (0.1.1); decided inline before it
        _call(registry._resolve_attn_side, "registry._resolve_attn_side", draft_model_config,
              server_args.drafter_attention_backend)
    draft_family = _call(_entry(registry, "_ordinary_cache_family", "registry"), "registry._ordinary_cache_family",
                         draft_config)
    resolve = registry._resolve_heterogeneous_draft_family
    # 0.1.1 adds the keyword (an in-tree draft declares no profile: False); the revisions before it take two.
    declared = {"draft_family_declared": False} if "draft_family_declared" in inspect.signature(resolve).parameters \
        else {}
    bound = _call(resolve, "registry._resolve_heterogeneous_draft_family", family, draft_family, **declared)
    if bound is not None and not (bound == "mha" and family in _entry(registry, "_ORDINARY_CACHE_FAMILIES",
                                                                     "registry")):
        raise AdapterGap("registry._resolve_heterogeneous_draft_family", f"the draft of recipe {family!r} binds "
                         f"as a heterogeneous {bound!r} view at this revision, which kvproof does not model")


def registered_class(modules: dict[str, types.ModuleType], family: str) -> Any:
    """The class `_RECIPES[family]` builds (a functools.partial's function)."""
    made = _entry(modules["setup"], "_RECIPES", "setup").get(family)
    if made is None:
        raise AdapterGap(f"setup._RECIPES[{family!r}]", "this revision registers no such family")
    return getattr(made, "func", made)


def _parameters(make: Any, base: Any) -> tuple[dict[str, inspect.Parameter], bool]:
    """The keyword parameters a recipe's constructor takes (its own, and CacheRecipe's where it
    forwards **kwargs), and whether it takes any other keyword."""
    own = inspect.signature(make).parameters
    params = {n: p for n, p in own.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    if any(p.kind == p.VAR_KEYWORD for p in own.values()):
        inherited = inspect.signature(base).parameters
        params |= {n: p for n, p in inherited.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        return params, any(p.kind == p.VAR_KEYWORD for p in inherited.values())
    return params, False


def recipe(modules: dict[str, types.ModuleType], family: str, **given: Any) -> Any:
    """The family's recipe as `setup.cache_recipe(family, **kwargs)` builds it (`_RECIPES[family]`
    where the revision has no cache_recipe), from `given` (the configs) and the budget arguments
    its constructor's signature asks for. A parameter kvproof has no value for is an AdapterGap."""
    setup = modules["setup"]
    table = _entry(setup, "_RECIPES", "setup")
    if family not in table:
        raise AdapterGap(f"setup._RECIPES[{family!r}]", "this revision registers no such family")
    params, open_ended = _parameters(table[family], _entry(modules["base"], "CacheRecipe", "base"))
    budget = {**BUDGET, "decode_input_tokens": decode_inputs(given["server_args"])}
    kwargs = {**given, **{name: budget[name] for name in params if name in budget and name not in given}}
    unknown = [n for n, p in params.items() if n not in kwargs and p.default is p.empty]
    extra = [] if open_ended else [n for n in kwargs if n not in params]
    if unknown or extra:
        what = (f"takes {', '.join(unknown)}, which kvproof has no value for" if unknown
                else f"no longer takes {', '.join(extra)}")
        raise AdapterGap(f"setup._RECIPES[{family!r}]{inspect.signature(table[family])}", what)
    make = getattr(setup, "cache_recipe", None)
    if make is not None:
        return _call(make, "setup.cache_recipe", family, **kwargs)
    return table[family](**kwargs)
