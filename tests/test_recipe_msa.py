"""tokenspeed's msa recipe at nvidia/MiniMax-M3-NVFP4 (engines/tokenspeed/msa.py): the default run
verifies; the layout is the checkpoint's (index_k on the 57 sparse layers only, in the model's own
bfloat16); planning reads no key the stored, trimmed config.json lacks; the recipe's refusals."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvproof.engines import user_config
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import engine, inputs, loader, msa, pipeline
from kvproof.engines.tokenspeed.configs import STRICT, member_dicts
from kvproof.engines.tokenspeed.profile import configs

STORED = Path(msa.__file__).with_name("models") / "minimax-m3-nvfp4.json"
POINT = {"model": "minimax-m3-nvfp4", "tp": 1, "dtype": "fp8"}
# The keys planning probes that the published file lacks too, each with why the engine's own
# answer is the probe's default: transformers' MiniMaxM3VLTextConfig has no index_init_blocks
# (configuration_minimax_m3_vl.py:113-117), so getattr(text, "index_init_blocks", 0)
# (layers/attention/configs/msa.py:115) gives 0 there as here.
PROBED = {"index_init_blocks": "no attribute of transformers' text config class either"}


@pytest.fixture(scope="module")
def modules() -> dict[str, Any]:
    return loader.load(loader.installed_source(), msa.MODULES)


def _planned(result: pipeline.Planned | pipeline.Refused) -> dict:
    assert isinstance(result, pipeline.Planned), result
    return result.documents[1]


def test_the_default_run_verifies_every_tp_the_model_loads_at_and_each_dtype() -> None:
    (result,) = engine.run(loader.installed_source(), ["msa"]).recipes
    assert not result.adapter and result.not_verified is None
    # tp past the 4 index heads: the model's indexer refuses it at load (models/minimax_m3.py)
    assert {(p.point["tp"], p.point["dtype"]) for p in result.points} == {
        (tp, dtype) for tp in (1, 2, 4) for dtype in ("fp8", "bfloat16")}
    assert all(p.verdict == "ok" for p in result.points)
    assert result.as_dict()["coverage"] == "checkpoint"


def test_sparse_layers_add_index_k_in_the_checkpoints_model_dtype() -> None:
    doc = _planned(engine.plan(loader.installed_source(), "msa", POINT))
    fields = {f["id"]: f for f in doc["fields"]}
    index_k = sorted(int(name.split(".")[1]) for name in fields if name.endswith(".index_k"))
    assert index_k == list(range(3, 60))  # sparse_attention_freq: layers 0-2 dense, 3-59 sparse
    assert {(tuple(fields[f"layer.{i}.index_k"]["shape"]), fields[f"layer.{i}.index_k"]["dtype"])
            for i in index_k} == {((128, 128), "bfloat16")}
    # fp8 K/V are stored as uint8 (plan.py scatter_stored_dtype_name); 4 KV heads at tp 1.
    assert {(tuple(fields[f"layer.{i}.k"]["shape"]), fields[f"layer.{i}.k"]["dtype"]) for i in range(60)} == {
        ((128, 4, 128), "uint8")}
    assert doc["parent_bytes"] == 60 * 2 * 128 * 4 * 128 + 57 * 128 * 128 * 2


def test_the_model_dtype_decides_the_index_k_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(msa, "model_dtype", lambda text: torch.float32)
    doc = _planned(engine.plan(loader.installed_source(), "msa", POINT))
    assert {f["dtype"] for f in doc["fields"] if f["id"].endswith(".index_k")} == {"float32"}


def test_model_dtype_is_derived_as_tokenspeeds_model_config_derives_it() -> None:
    import torch

    assert msa.model_dtype(json.loads(STORED.read_text())["text_config"]) is torch.bfloat16
    assert msa.model_dtype({"dtype": "float32"}) is torch.float16  # configs/model_config.py:996-1008
    assert msa.model_dtype({}) is torch.bfloat16  # configs/model_config.py:990-992


def test_the_stored_file_is_the_published_one_less_the_weight_quant_map() -> None:
    data = STORED.read_bytes()
    assert (len(data), hashlib.md5(data).hexdigest()) == (9057, "00e928a0aa13ef5a3240b05d7165f38a")  # SOURCES.md
    stored = json.loads(data)
    assert list(stored["quantization_config"]) == ["quant_algo", "kv_cache_quant_algo", "exclude_modules",
                                                   "quant_method"]
    assert stored["text_config"]["sparse_attention_config"]["sparse_attention_freq"] == [0] * 3 + [1] * 57


@pytest.fixture
def strict_reads() -> Iterator[None]:
    """Reads of a key the stored file lacks raise (HFConfig, and nested objects by [key] or
    .get), except the probes PROBED names."""
    STRICT.family, STRICT.absent = "stored minimax-m3-nvfp4.json", frozenset(PROBED)
    try:
        yield
    finally:
        STRICT.family, STRICT.absent = None, frozenset()


@pytest.mark.usefixtures("strict_reads")
def test_planning_reads_no_key_the_stored_file_lacks(modules: dict[str, Any]) -> None:
    profile = engine.PROFILES["msa"]
    stored = {name: member_dicts(config) for name, config in configs(profile).items()}
    package = loader.installed_source().package_dir
    for point in profile.points(stored):
        def build(point: dict[str, Any] = point) -> Any:
            return profile.build(modules, stored, point)

        _planned(pipeline.run(build, modules["plan"], package))


@pytest.mark.usefixtures("strict_reads")
def test_the_strict_reads_catch_a_read_of_the_removed_key() -> None:
    stored = member_dicts(json.loads(STORED.read_text()))
    with pytest.raises(StubUsed, match="'quantized_layers'"):
        stored["quantization_config"].get("quantized_layers", {})
    with pytest.raises(StubUsed, match="'index_topk_blocks'"):
        getattr(msa.text_config({**stored, "text_config": {"num_hidden_layers": 60}}), "index_topk_blocks", None)


def test_speculative_num_draft_tokens_is_read_without_speculation(monkeypatch: pytest.MonkeyPatch) -> None:
    """MSAConfig.generate reads it unconditionally (configs/msa.py:127): without the launch's
    resolved value the point is an adapter gap naming it, never planned with a stand-in."""
    monkeypatch.setattr(msa, "server_args", lambda tp, dtype, block, extra: inputs.server_args(tp, dtype, block=block))
    (result,) = engine.run(loader.installed_source(), ["msa"], {"tp": [1], "dtype": ["fp8"]}).recipes
    assert result.adapter and "speculative_num_draft_tokens" in (result.not_verified or "")


@pytest.mark.parametrize(("dtype", "quant", "says"), [
    ("mxfp8", "none", "does not support kv_cache_dtype='mxfp8'"),
    ("fp8", "per_tensor", "does not support kv_cache_quant_method='per_tensor'"),
])
def test_the_recipe_refuses_mxfp8_and_a_quant_method(monkeypatch: pytest.MonkeyPatch, dtype: str, quant: str,
                                                      says: str) -> None:
    monkeypatch.setattr(msa, "server_args", lambda tp, cache, block, extra: inputs.server_args(
        tp, cache, block=block, extra={**extra, "kv_cache_quant_method": quant}))
    result = engine.plan(loader.installed_source(), "msa", {**POINT, "dtype": dtype})
    assert isinstance(result, pipeline.Refused) and says in result.message


def test_the_recipe_asks_no_assumption(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU or environment question (loader._answer answers every one): the points assume nothing."""
    asked: list[str] = []
    answer = loader._answer

    def recorded(name: str, what: str) -> str:
        asked.append(name)
        return answer(name, what)

    monkeypatch.setattr(loader, "_answer", recorded)
    (result,) = engine.run(loader.installed_source(), ["msa"]).recipes
    assert result.points and not result.adapter and not asked
    assert not any("assume" in p.point for p in result.points)


def test_a_users_config_plans_as_the_checkpoint() -> None:
    published = json.loads(STORED.read_text())
    run = engine.run(loader.installed_source(), ["msa"], {"tp": [4]},
                     config=user_config.UserConfig("mine.json", published))
    (result,) = run.recipes
    assert result.not_verified is None and {p.point["model"] for p in result.points} == {"mine"}
    assert result.as_dict()["config"] == "mine.json"
