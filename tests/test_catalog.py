"""The model catalog: built-in geometries and one-line errors naming the key for bad configs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kvproof.spec.catalog import ConfigError, load_model, parse_config


def test_kimi_k3_geometry():
    m = load_model("kimi-k3")
    assert m.num_layers == 93
    assert m.mla_layers == (*range(4, 93, 4), 93)
    assert len(m.kda_layers) == 69 and not set(m.kda_layers) & set(m.mla_layers)
    assert (m.mla_heads, m.kv_lora_rank, m.qk_rope_head_dim, m.latent_dim) == (96, 512, 64, 576)
    assert (m.kda_heads, m.kda_head_dim, m.conv_kernel) == (96, 128, 4)
    assert m.tp_domain == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96)


def test_kimi_linear_and_deepseek():
    kl = load_model("kimi-linear-48b-a3b")
    assert kl.mla_layers == (4, 8, 12, 16, 20, 24, 27) and len(kl.kda_layers) == 20
    assert kl.mla_heads == kl.kda_heads == 32
    ds = load_model("deepseek-v3")
    assert not ds.hybrid and len(ds.mla_layers) == 61 and ds.mla_heads == 128
    assert ds.tp_domain[-1] == 128


def _k3_raw() -> dict:
    from importlib import resources

    return json.loads(resources.files("kvproof.spec").joinpath("models", "kimi-k3.json").read_text())


def _mutate(path: list[str], value) -> dict:
    raw = copy.deepcopy(_k3_raw())
    node = raw
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (["text_config", "num_hidden_layers"], KeyError, "'num_hidden_layers'"),
        (["text_config", "kv_lora_rank"], "512", "'kv_lora_rank' must be an integer"),
        (["text_config", "num_attention_heads"], True, "'num_attention_heads' must be an integer"),
        (["text_config", "qk_rope_head_dim"], 0, "'qk_rope_head_dim' must be positive"),
        (["text_config", "linear_attn_config", "num_heads"], -96, "'linear_attn_config.num_heads' must be positive"),
        (["text_config", "linear_attn_config", "kda_layers"], [1, 1, 2], "lists layer 1 twice"),
        (["text_config", "linear_attn_config", "kda_layers"], [0, 1], "layer 0 out of range 1..93"),
        (["text_config", "linear_attn_config", "full_attn_layers"], [4, 8], "complement of kda_layers"),
        (["text_config", "linear_attn_config", "head_dim"], KeyError, "'linear_attn_config.head_dim'"),
        (["text_config", "linear_attn_config"], [1], "'linear_attn_config' must be an object"),
        (["text_config"], 5, "config key 'text_config' must be an object"),
    ],
)
def test_bad_config_names_the_key(path, value, needle):
    with pytest.raises(ConfigError) as err:
        parse_config(_mutate(path, value), "bad")
    message = str(err.value)
    assert needle in message and "\n" not in message


def test_tp_must_divide_heads():
    with pytest.raises(ConfigError, match="tp=5 does not divide"):
        load_model("kimi-k3").check_tp(5)


def test_config_file_and_unknown_model(tmp_path):
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(_k3_raw()))
    assert load_model(config=path).mla_layers == load_model("kimi-k3").mla_layers
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(config=path)
    with pytest.raises(ConfigError, match="unknown model"):
        load_model("llama")


def test_conv_kernel_must_keep_a_state():
    with pytest.raises(ConfigError, match=r"'linear_attn_config\.short_conv_kernel_size' must be at least 2"):
        parse_config(_mutate(["text_config", "linear_attn_config", "short_conv_kernel_size"], 1), "bad")


def test_head_counts_up_to_the_bound_and_no_further():
    raw = _mutate(["text_config", "num_attention_heads"], 65_536)
    raw["text_config"]["linear_attn_config"]["num_heads"] = 65_536
    assert parse_config(raw, "wide").tp_domain == tuple(2**i for i in range(17))
    raw["text_config"]["num_attention_heads"] = 2**40
    with pytest.raises(ConfigError, match=r"^config key 'num_attention_heads' must be at most 65,536, got "
                                          r"1,099,511,627,776$"):
        parse_config(raw, "huge")


@pytest.mark.parametrize(("path", "value"), [
    (["text_config", "num_hidden_layers"], 2**31),
    (["text_config", "num_hidden_layers"], 2**63),
    (["text_config", "num_hidden_layers"], 10**30),
    (["text_config", "kv_lora_rank"], 65_537),
    (["text_config", "qk_rope_head_dim"], 2**62),
    (["text_config", "linear_attn_config", "num_heads"], 65_537),
    (["text_config", "linear_attn_config", "head_dim"], 2**31),
    (["text_config", "linear_attn_config", "short_conv_kernel_size"], 1025),
])
def test_every_size_is_bounded_before_anything_is_built(path, value):
    with pytest.raises(ConfigError, match=f"^config key '{'.'.join(path[-2:]) if len(path) > 2 else path[-1]}' "
                                          "must be at most"):
        parse_config(_mutate(path, value), "huge")


def test_layer_lists_longer_than_the_model_are_refused_before_they_are_scanned():
    raw = _mutate(["text_config", "linear_attn_config", "kda_layers"], [1] * 100_000)
    with pytest.raises(ConfigError, match="lists 100,000 layers, more than num_hidden_layers 93"):
        parse_config(raw, "long")


def test_sweep_sizes_are_admitted():
    """1,024 layers, 4,096 heads, head_dim 256, kv_lora_rank 1,024: the sweep's largest points."""
    raw = _mutate(["text_config", "num_hidden_layers"], 1024)
    lin = raw["text_config"]["linear_attn_config"]
    lin.update(kda_layers=[n for n in range(1, 1025) if n % 4], full_attn_layers=list(range(4, 1025, 4)),
               num_heads=4096, head_dim=256)
    raw["text_config"].update(num_attention_heads=4096, kv_lora_rank=1024)
    model = parse_config(raw, "sweep")
    assert (len(model.mla_layers), len(model.kda_layers), model.latent_dim) == (256, 768, 1024 + 64)


def test_unreadable_json_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    for text, reason in (("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                         ('{"num_hidden_layers": 1' + "0" * 5000 + "}", "a number too long to read")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=reason):
            load_model(config=path)
    with path.open("wb") as f:
        f.truncate(16 * 2**20 + 1)
    with pytest.raises(ConfigError, match="larger than 16 MiB"):
        load_model(config=path)


def test_a_user_config_is_named_after_its_file_and_must_be_utf8(tmp_path):
    path = tmp_path / "my-model.json"
    path.write_text(json.dumps(_k3_raw()))
    assert load_model("kimi-k3", config=path).name == "my-model"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_model(config=path)


def test_a_tp_off_the_heads_names_the_head_counts_it_must_divide() -> None:
    with pytest.raises(ConfigError) as err:
        load_model("kimi-k3").check_tp(5)
    assert str(err.value) == ("tp=5 does not divide num_attention_heads and linear_attn_config.num_heads of kimi-k3; "
                              "valid tp: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96")
    with pytest.raises(ConfigError) as err:
        load_model("deepseek-v3").check_tp(5)
    assert str(err.value) == ("tp=5 does not divide num_attention_heads of deepseek-v3; "
                              "valid tp: 1, 2, 4, 8, 16, 32, 64, 128")


def test_a_config_that_is_not_an_object_is_named_whole(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config([1], "bad")
    assert str(err.value) == "bad: config must be a JSON object"
    with pytest.raises(ConfigError) as err:
        parse_config({"text_config": 5}, "bad")
    assert str(err.value) == "config key 'text_config' must be an object"
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as err:
        load_model(config=missing)
    assert str(err.value) == f"cannot read config {missing}: No such file or directory"


def test_a_conv_kernel_of_2_keeps_one_input_and_is_admitted() -> None:
    raw = _mutate(["text_config", "linear_attn_config", "short_conv_kernel_size"], 2)
    assert parse_config(raw, "short").conv_kernel == 2
