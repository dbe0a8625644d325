"""What the family strictness tests set in place of a config class's defaults: every key transformers' class
answers for a member that lacks it, each given another value the class accepts."""

from __future__ import annotations

from typing import Any

# The keys transformers' PretrainedConfig keeps about the file and its use, not the model.
BOOKKEEPING = frozenset({"_name_or_path", "transformers_version", "id2label", "label2id", "return_dict",
                         "output_attentions", "output_hidden_states", "problem_type", "chunk_size_feed_forward",
                         "is_encoder_decoder"})


def other(key: str, value: Any, strings: dict[str, str]) -> Any:
    """A value the class accepts for the key, other than its default (`strings`: one for each string key)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 0.5
    return strings.get(key, value)


def changed(defaults: dict[str, Any], config: dict[str, Any], bookkeeping: frozenset[str],
            strings: dict[str, str]) -> tuple[list[str], dict[str, Any]]:
    """The keys a member's config lacks that the class answers (but bookkeeping), and another value for each."""
    lacking = sorted(set(defaults) - set(config) - bookkeeping)
    return lacking, {key: other(key, defaults[key], strings) for key in lacking}


def moved(defaults: dict[str, Any], config: dict[str, Any], where: str, bookkeeping: frozenset[str],
          strings: dict[str, str]) -> dict[str, Any]:
    """Another value for every key the class answers that a member's config lacks, at its top level (`where`
    "top") or in one of its sub-configs (`where` its key, `text_config`), as the member's dotted keys; those whose
    default has no other value (None, a structure) left out."""
    if where != "top":
        defaults, config = defaults[where], config[where]
    _lacking, others = changed(defaults, config, bookkeeping, strings)
    prefix = "" if where == "top" else f"{where}."
    return {f"{prefix}{key}": value for key, value in others.items() if value != defaults[key]}
