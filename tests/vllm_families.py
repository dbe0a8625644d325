"""What vLLM family tests share: the check of their members' run (each plans at the installed vLLM, holds every plan
property at the points asked, and says it stands for its family, never for the checkpoint it is no verdict on), and
the Bailing classes' member with every default of transformers' BailingHybridConfig changed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import config_defaults

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.families import Member
from kvproof.engines.vllm import catalog, engine


def stand_for_their_family(names: list[str], only: dict[str, Any], checkpoint: str,
                           members: int) -> tuple[str, list[dict[str, Any]]]:
    """The recipes `names` run at `only`: every point plans and holds every property, each result says family, the
    family's `members`, and `checkpoint` as the one it is no verdict on; the text and each result's JSON, for the
    caller's own checks."""
    run = engine.run(names, only)
    text = render(run, baseline.compare([], set(), "vllm", run.version, set()), False, set())
    assert text.count(f"not a verdict on {checkpoint}; --config FILE gives one") == len(names)
    outs = []
    for result in run.recipes:
        assert result.not_verified is None and [p.point["spec"] for p in result.points] == list(only["spec"])
        assert all(p.verdict == "ok" and not p.findings for p in result.points)
        out = result.as_dict()
        assert (out["coverage"], out["members"], out["enumerated"]) == ("family", members, members)
        assert out["family"]["not_a_verdict_on"] == checkpoint
        outs.append(out)
    return text, outs


# transformers names a `bailing_hybrid` member's dtype its own, and answers the keys its attribute_map points at under
# their targets' names, aliases of keys a member holds (max_position_embeddings is model_max_length): bookkeeping too.
BAILING_BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype", "model_max_length"}
BAILING_STRINGS = {"hidden_act": "relu"}  # another value for each string key


def bailing_hybrid_moved(model: catalog.Model) -> tuple[set[str], catalog.Model]:
    """`model`, a member of a `bailing_hybrid` family, with every key transformers' BailingHybridConfig answers that
    the member lacks set to another value at once, and those keys. The class derives bos_token_id, the layer lists
    and rope_parameters again from the member's own keys, so those are left as they are."""
    from transformers import BailingHybridConfig

    assert model.member is not None
    member = model.member
    defaults = BailingHybridConfig().to_dict()
    lacking, changed = config_defaults.changed(defaults, member.config(), BAILING_BOOKKEEPING, BAILING_STRINGS)
    kept = sorted(key for key in lacking if changed[key] == defaults[key])
    assert kept == ["bos_token_id", "layer_types", "mlp_layer_types", "rope_parameters"]
    values = {**member.values, **{k: v for k, v in changed.items() if k not in kept}}
    other = replace(model, member=Member(member.family, member.index, values))
    assert set(json.loads(other.config_text())) == set(member.config()) | set(lacking) - set(kept)
    return set(lacking) - set(kept), other
