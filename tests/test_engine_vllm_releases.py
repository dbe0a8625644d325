"""The vLLM adapter follows the release under test: the planning functions EngineCore._initialize_kv_caches
calls, found from core.py's own imports, called as their signatures ask, with the Platform hooks the
release has. The default suite checks that detection on the installed vLLM (0.33.0) and on small edits
of its core.py, its Platform and its planning module, and plans the released 0.30.0, 0.31.0 and 0.32.0
from their wheels on the index, unpacked (their .py files) as `make compat` does, or from the folder an
environment variable names (docs/engines/vllm-releases.md)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import types
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

from kvproof.ci import compat
from kvproof.engines.verdict import EngineError
from kvproof.engines.vllm import backends, catalog, engine, mutants, planner, platform, stand_ins
from kvproof.impl import faults

QWEN = catalog.MODELS["qwen3-next-80b-a3b"]
INSTALLED = Path(__file__).resolve().parent.parent  # the repository root, where `verify` runs


def installed_core_py() -> Path:
    import vllm

    return Path(vllm.__file__).parent / "v1" / "engine" / "core.py"


def test_the_installed_release_plans_through_its_engine_cores_imports() -> None:
    """vLLM 0.33.0's core.py imports get_kv_cache_configs and get_global_kv_cache_groups from
    kv_cache_planning, which is the planning module (the seeded bugs patch it); its entry takes the
    global groups, and its Platform finds backends as a list."""
    v = platform.modules()
    assert v.planning.__name__ == "vllm.v1.core.kv_cache_planning"
    assert v.core.modules == {"get_kv_cache_configs": "vllm.v1.core.kv_cache_planning",
                              "resolve_kv_cache_layout": "vllm.v1.attention.backends.utils",
                              "get_global_kv_cache_groups": "vllm.v1.core.kv_cache_planning",
                              "register_all_kvcache_specs": "vllm.v1.core.single_type_kv_cache_manager"}
    assert "global_kv_cache_groups" in inspect.signature(v.core.calls["get_kv_cache_configs"]).parameters
    cuda = type(platform.cuda_assumed(v))
    assert "_find_non_ssm_backends" in vars(cuda) and "_find_non_ssm_backend" not in vars(cuda)
    assert callable(getattr(cuda, "get_kv_cache_config_builder_cls", None))  # placement by the platform's builder


def edited_core(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """A copy of the installed core.py with each (old, new) text replaced (each must occur)."""
    text = installed_core_py().read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "v1" / "engine" / "core.py"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return path


# 0.32.0's shape of core.py: the planning entry imported from kv_cache_utils, no whole-model grouping first
AS_IN_0_32 = (("from vllm.v1.core.kv_cache_planning import (\n    get_global_kv_cache_groups,\n"
               "    get_kv_cache_configs,\n)\n", ""),
              ("from vllm.v1.core.kv_cache_utils import (\n", "from vllm.v1.core.kv_cache_utils import (\n"
               "    get_kv_cache_configs,\n"),
              ("global_kv_cache_groups = get_global_kv_cache_groups(vllm_config, kv_cache_specs)",
               "global_kv_cache_groups = None"),
              ("vllm_config, kv_cache_specs, available_gpu_memory, global_kv_cache_groups\n",
               "vllm_config, kv_cache_specs, available_gpu_memory\n"))


def test_core_py_is_read_for_where_each_planning_function_comes_from(tmp_path) -> None:
    """engine_core_imports reads core.py's module-level imports and the names _initialize_kv_caches
    calls: edited to 0.32.0's shape, the entry comes from kv_cache_utils and no global grouping is
    called; without the method, or calling the entry by attribute, the vLLM is unsupported."""
    assert platform.engine_core_imports(installed_core_py())["get_kv_cache_configs"] == "vllm.v1.core.kv_cache_planning"
    older = platform.engine_core_imports(edited_core(tmp_path / "older", *AS_IN_0_32))
    assert older["get_kv_cache_configs"] == "vllm.v1.core.kv_cache_utils"
    assert "get_global_kv_cache_groups" not in older
    renamed = edited_core(tmp_path / "renamed", ("def _initialize_kv_caches(", "def _initialize_caches("))
    with pytest.raises(platform.Unsupported, match=r"has no EngineCore\._initialize_kv_caches"):
        platform.engine_core_imports(renamed)
    dotted = edited_core(tmp_path / "dotted", ("kv_cache_configs = get_kv_cache_configs(",
                                               "kv_cache_configs = planning.get_kv_cache_configs("))
    with pytest.raises(platform.Unsupported, match="calls no imported get_kv_cache_configs"):
        platform.engine_core_imports(dotted)


def test_an_engine_core_of_0_32s_shape_plans_the_same_through_kv_cache_utils(tmp_path, monkeypatch) -> None:
    """The installed planning functions behind 0.32.0's call shape: core.py imports
    get_kv_cache_configs from kv_cache_utils (here a three-argument function that groups the model
    itself, as 0.32.0's does) and calls no get_global_kv_cache_groups. The adapter calls it with
    three arguments, plans the same point the same, and a seeded bug on a planning helper patches
    kv_cache_utils, the module that plans, so one kv_cache_utils lacks no longer applies."""
    from vllm.v1.core import kv_cache_planning, kv_cache_utils

    calls: list[int] = []

    def get_kv_cache_configs(vllm_config: Any, kv_cache_specs: Any, available_memory: Any) -> Any:
        calls.append(len(available_memory))
        groups = kv_cache_planning.get_global_kv_cache_groups(vllm_config, kv_cache_specs)
        return kv_cache_planning.get_kv_cache_configs(vllm_config, kv_cache_specs, available_memory, groups)

    monkeypatch.setattr(kv_cache_utils, "get_kv_cache_configs", get_kv_cache_configs, raising=False)
    before = planner.plan(planner.Point(QWEN, 1, "auto", "auto", False, backends.FLASH_ATTN))
    v = platform.modules()
    core = platform.engine_core(edited_core(tmp_path, *AS_IN_0_32).parent.parent.parent)
    assert core.modules["get_kv_cache_configs"] == "vllm.v1.core.kv_cache_utils" and not calls
    older = replace(v, planning=kv_cache_utils, core=core)
    monkeypatch.setitem(platform._LOADED, next(k for k, loaded in platform._LOADED.items() if loaded is v), older)
    after = planner.plan(planner.Point(QWEN, 1, "auto", "auto", False, backends.FLASH_ATTN))
    assert calls == [1] and after.documents == before.documents and after.block_size == 544
    with faults.inject("vllm_split_page_padded"), pytest.raises(
            RuntimeError, match=r"vllm_split_page_padded no longer applies: vllm\.v1\.core\.kv_cache_utils has no "
                                r"_get_layer_block_stride"), mutants.applied(older):
        pass


def interface_with(v: platform.Vllm, base: type) -> types.ModuleType:
    """vllm.platforms.interface with another Platform class."""
    module = types.ModuleType(v.interface.__name__)
    module.Platform, module.PlatformEnum = base, v.interface.PlatformEnum  # type: ignore[attr-defined]
    module.DeviceCapability = v.interface.DeviceCapability  # type: ignore[attr-defined]
    return module


def test_a_platform_that_finds_one_backend_gets_the_points_first(monkeypatch) -> None:
    """0.30.0's Platform asks _find_non_ssm_backend (one backend, None without attention) where
    0.31.0 on asks _find_non_ssm_backends: kvproof answers whichever hook this Platform has, and a
    Platform with neither, or without the hybrid alignment, is unsupported."""
    v = platform.modules()
    base = v.interface.Platform
    older = type("Platform", (base,), {"_find_non_ssm_backends": None,
                                       "_find_non_ssm_backend": classmethod(lambda cls, vllm_config: None)})
    cuda = platform.cuda_assumed(replace(v, interface=interface_with(v, older)))
    assert "_find_non_ssm_backend" in vars(type(cuda)) and type(cuda)._find_non_ssm_backends is None
    backend = backends.FLASH_ATTN.load()
    with platform.point_answers(cuda, (9, 0), [backend]):
        assert cuda._find_non_ssm_backend(None) is backend
    with platform.point_answers(cuda, (9, 0), []):
        assert cuda._find_non_ssm_backend(None) is None
    neither = type("Platform", (base,), {"_find_non_ssm_backends": None})
    with pytest.raises(platform.Unsupported, match="has neither _find_non_ssm_backends nor _find_non_ssm_backend"):
        platform.cuda_assumed(replace(v, interface=interface_with(v, neither)))
    with pytest.raises(platform.Unsupported, match=r"no _align_hybrid_block_size: .* in vLLM 0\.20\.0"):
        platform.check_hooks(type("Platform", (base,), {"_align_hybrid_block_size": None}))
    platform.check_hooks(base)


def test_a_release_older_than_0_30_is_one_unsupported_line(tmp_path) -> None:
    """By its version stamp, before anything of it is imported: exit 2, one line that says where the
    hybrid alignment kvproof runs entered vLLM. A stamp from 0.30.0 on, or none, is planned."""
    for release in ("0.30.0", "0.33.1.dev3+g1234abc", "unknown"):
        engine._supported(release)
    with pytest.raises(EngineError, match=r"^unsupported: vllm 0\.29\.0 is older than 0\.30\.0, .*in 0\.20\.0$"):
        engine._supported("0.29.0")
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise ImportError('never imported')\n", encoding="utf-8")
    (tmp_path / "vllm" / "_version.py").write_text("__version__ = version = '0.19.1'\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--engine-path", str(tmp_path)],
                          capture_output=True, text=True, check=False, timeout=300, cwd=INSTALLED)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("verify engine: error: unsupported: vllm 0.19.1 is older than 0.30.0") and "0.20.0" in line
    # no stamp: planned if it has what the adapter follows; this one has no engine core
    (tmp_path / "vllm" / "_version.py").unlink()
    (tmp_path / "vllm" / "__init__.py").write_text("", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--engine-path", str(tmp_path)],
                          capture_output=True, text=True, check=False, timeout=300, cwd=INSTALLED)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "verify engine: error: unsupported: vllm unknown: this vLLM has no vllm/v1/engine/core.py, whose "
        "EngineCore._initialize_kv_caches kvproof plans through"]


def test_a_backend_that_imports_compiled_flash_attention_is_stood_in_only_for_that_import() -> None:
    """0.30.0 and 0.31.0's flashattn_mla.py imports vllm.vllm_flash_attn, whose __init__ raises on a
    CPU: an ImportError raised there is recognised (and no other), and the guarded package is in
    sys.modules only while the backend imports."""
    def raised_in(filename: str) -> ImportError:
        try:
            exec(compile("raise ImportError('needs the CUDA extensions')", filename, "exec"))
        except ImportError as err:
            return err
        raise AssertionError("no ImportError")

    assert stand_ins.compiled_missing(raised_in("/x/vllm/vllm_flash_attn/__init__.py")) == stand_ins.FLASH_ATTN
    assert stand_ins.compiled_missing(raised_in("/x/vllm/other/__init__.py")) is None
    assert stand_ins.FLASH_ATTN not in sys.modules
    with stand_ins.installed((stand_ins.FLASH_ATTN,)):
        guarded: Any = sys.modules[stand_ins.FLASH_ATTN]
        with pytest.raises(planner.StubUsed, match=r"vllm\.vllm_flash_attn\.flash_attn_varlen_func"):
            guarded.flash_attn_varlen_func()
    assert stand_ins.FLASH_ATTN not in sys.modules


# --- the releases themselves: each planned only where its unpacked folder is named ---------------------------------

RELEASES = {
    # release: (environment variable, what its engine core and Platform look like)
    "0.30.0": ("KVPROOF_VLLM_0_30", {"planning": "vllm.v1.core.kv_cache_utils", "global_groups": False,
                                     "finder": "_find_non_ssm_backend", "builder": False}),
    "0.31.0": ("KVPROOF_VLLM_0_31", {"planning": "vllm.v1.core.kv_cache_utils", "global_groups": False,
                                     "finder": "_find_non_ssm_backends", "builder": False}),
    "0.32.0": ("KVPROOF_VLLM_0_32", {"planning": "vllm.v1.core.kv_cache_utils", "global_groups": False,
                                     "finder": "_find_non_ssm_backends", "builder": False}),
}


def release_folder(release: str) -> Path:
    """The release's unpacked folder: the one its variable names, else the one `make compat` keeps
    under reports/compat/ (unpacked from the index's wheel on first use)."""
    variable = RELEASES[release][0]
    where = os.environ.get(variable)
    if not where:
        try:
            return compat.release_folder("vllm", release, compat.CACHE)
        except (subprocess.CalledProcessError, OSError, zipfile.BadZipFile) as err:
            pytest.fail(f"vLLM {release} could not be unpacked from the index ({err}); set {variable} to a folder of "
                        "its .py files (docs/engines/vllm-releases.md)")
    folder = Path(where)
    if not (folder / "vllm" / "__init__.py").is_file():
        pytest.fail(f"{variable}={where}: no vllm/__init__.py there")
    return folder


DETECT = """
import inspect, json, sys
from kvproof.engines.vllm import engine, platform
release = engine.use_checkout(sys.argv[1])[0]
v = platform.modules()
cuda = type(platform.cuda_assumed(v))
entry = v.core.calls["get_kv_cache_configs"]
print(json.dumps({"release": release, "planning": v.planning.__name__,
                  "global_groups": "global_kv_cache_groups" in inspect.signature(entry).parameters,
                  "finder": next(name for name in platform.FINDERS if name in vars(cuda)),
                  "builder": callable(getattr(cuda, "get_kv_cache_config_builder_cls", None))}))
"""


@pytest.mark.parametrize("release", list(RELEASES))
def test_each_release_is_detected_from_its_own_code(release) -> None:
    folder = release_folder(release)
    proc = subprocess.run([sys.executable, "-c", DETECT, str(folder)], capture_output=True, text=True, check=False,
                          timeout=600, cwd=INSTALLED)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"release": release, **RELEASES[release][1]}


# What the adapter's GLM-5.3-Flash planning imports from vLLM and a release lacks: 0.30.0 has no glm5next.common
# package (its GLM code is laid out under glm5next/nvidia): there both members are NOT VERIFIED (adapter), never
# planned with a guess. 0.31.0 and 0.32.0 plan them (no top-k buffer width in their MLA spec), and every Qwen4-Exp
# member plans at every release (its QSA layer's KV dtype read as each release's constructor reads it).
GLM_GAPS = {"0.30.0": "No module named 'vllm.models.glm5next.common'"}


@pytest.mark.parametrize("release", list(RELEASES))
def test_each_release_plans_every_model_at_tp_1(release) -> None:
    """Every model planned at tp 1 with FlashAttention, FlashMLA, GLM's sparse MLA backend or Qwen4-Exp's QSA
    backend, bf16, both prefix-caching values: a verdict, never exit 2; none NOT VERIFIED but, at 0.30.0,
    GLM-5.3-Flash's members, whose gap names what the release lacks. Qwen3-Next's 544-token block
    (16 x ceil(1,097,728 / 32,768)) is the same in every release."""
    folder = release_folder(release)
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--engine-path", str(folder),
                           "--tp", "1", "--dtype", "auto", "--assume", "backend=FLASH_ATTN", "backend=FLASHMLA",
                           "backend=FLASHINFER_MLA_SPARSE_SM90", "backend=QWEN4_EXP_QSA_TRITON@sm_90",
                           "mamba_dtype=auto", "pp=1", "--json"],
                          capture_output=True, text=True, check=False, timeout=1800, cwd=INSTALLED)
    assert proc.returncode in (0, 1, 3), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["version"] == release
    reasons = {r["recipe"]: r["reason"] for r in report["recipes"]}
    glm = [name for name in catalog.MODELS if name.startswith("glm53-flash-family-")]
    qwen4 = [name for name in catalog.MODELS if name.startswith("qwen3.8-flash-next-family-")]
    assert (len(glm), len(qwen4)) == (2, 4) and all(reasons[name] is None for name in qwen4)
    gaps = glm if release in GLM_GAPS else []
    assert all(reasons[name].startswith("adapter: ") and GLM_GAPS[release] in reasons[name] for name in gaps)
    assert {name: reason for name, reason in reasons.items() if name not in gaps} == dict.fromkeys(
        name for name in catalog.MODELS if name not in gaps)
    qwen = next(r for r in report["recipes"] if r["recipe"] == "qwen3-next-80b-a3b")
    off = next(p for p in qwen["points"] if p["prefix"] == "off" and p["spec"] == 0)
    assert off["parent_bytes"] == 12 * 544 * 2048  # 12 slots of the 544-token page


def test_a_seeded_bug_at_a_release_patches_the_module_that_plans_there() -> None:
    """vllm_split_page_padded replaces _get_layer_block_stride in 0.32.0's kv_cache_utils (the module
    its core.py plans through) and is killed there as at 0.33.0: FlashMLA's split pages lose their
    exact stride."""
    folder = release_folder("0.32.0")
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--engine-path", str(folder),
                           "--recipe", "kimi-linear-48b-a3b", "--tp", "1", "--dtype", "auto", "--assume",
                           "backend=FLASHMLA", "mamba_dtype=auto", "prefix=off", "spec=0", "pp=1",
                           "--json"],
                          capture_output=True, text=True, check=False, timeout=900, cwd=INSTALLED,
                          env={**os.environ, faults.ENV: "vllm_split_page_padded"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    (point,) = json.loads(proc.stdout)["recipes"][0]["points"]
    assert "exact_stride" in {f["property"] for f in point["findings"]}


# --- upstream bugs on the releases that shipped them (docs/findings/real-releases.md) -------------------------------

def plan_release(release: str, *args: str) -> tuple[int, dict[str, Any]]:
    """`verify engine vllm --engine-path FOLDER ARGS --json` on a release's unpacked folder: its exit and report."""
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--engine-path",
                           str(release_folder(release)), *args, "--json"],
                          capture_output=True, text=True, check=False, timeout=900, cwd=INSTALLED)
    assert proc.returncode in (0, 1, 3), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["version"] == release
    return proc.returncode, report


@pytest.mark.parametrize("release", list(RELEASES))
def test_vllm_41037_the_block_moves_with_tp_in_every_release(release) -> None:
    """vllm#41037, shipped in every release from 0.30.0 to 0.33.0: _align_hybrid_block_size sizes the attention
    page from the per-rank KV heads, so Qwen3-Next's block is 544 tokens at tp 1 and 272 at tp 4."""
    code, report = plan_release(release, "--recipe", "qwen3-next-80b-a3b", "--tp", "4", "--dtype", "auto", "--assume",
                                "backend=FLASH_ATTN", "mamba_dtype=auto", "prefix=off", "spec=0", "pp=1")
    assert code == 3
    (point,) = report["recipes"][0]["points"]
    assert point["property"] == "tp_block_size"
    assert point["message"].startswith("block size 272 tokens at tp=4 but 544 at tp=1")


@pytest.mark.parametrize("release", list(RELEASES))
def test_vllm_51752_a_stage_without_attention_plans_16_tokens_in_every_release(release) -> None:
    """vllm#51752, shipped in every release from 0.30.0 to 0.33.0: at pp 8 Kimi-Linear's stage 0 (layers 0-2, all
    KDA) skips the hybrid alignment and plans 16-token blocks; the other stages plan 1,920."""
    code, report = plan_release(release, "--recipe", "kimi-linear-48b-a3b", "--tp", "1", "--dtype", "auto",
                                "--assume", "backend=FLASHMLA", "mamba_dtype=auto", "prefix=off", "pp=8")
    assert code == 3
    (point,) = report["recipes"][0]["points"]
    assert point["property"] == "pp_block_size"
    assert ("16 tokens at rank 0 (no attention layer among layers 0-2); 1920 tokens at rank 1, 2, 3, 4, 5, 6, 7"
            in point["message"])


def test_vllm_57721_is_not_found_on_0_31_its_planned_models_widen_their_state() -> None:
    """vllm#57721 shipped in 0.30.0 and 0.31.0 in three model classes (GraniteMoeHybrid, FalconH1, Zamba2);
    Qwen3-Next passes num_spec there, so both of its speculative points boot on 0.31.0."""
    code, report = plan_release("0.31.0", "--recipe", "qwen3-next-80b-a3b", "--tp", "1", "--dtype", "auto",
                                "--assume", "backend=FLASH_ATTN", "mamba_dtype=auto", "prefix=off", "spec=2", "spec=3",
                                "draft_dtype=target", "draft_backend=target", "pp=1")
    assert code == 0
    assert [(p["spec"], p["verdict"]) for p in report["recipes"][0]["points"]] == [(2, "ok"), (3, "ok")]


# the assertion vLLM's MambaSpec.page_size_bytes makes of a padded page, by release (v1/kv_cache_interface.py)
PADDED_PAGE_ASSERT = {"0.30.0": 1026, "0.31.0": 1075}


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0"])
def test_vllm_57721_is_found_on_0_30_and_0_31_at_the_granite_family(release) -> None:
    """vllm#57721 as shipped: GraniteMoeHybrid's model class sizes the state the alignment pads by without the
    speculative conv rows its MambaMixer2 layers keep (3,328 x (3 + tokens) values), so at 1 and 2 ngram tokens
    the padded page (811,008 B at a member's 1 KV head) is smaller than the layers' state and vLLM's own
    assertion fails at startup; 0.32.0 passes num_spec and boots both."""
    code, report = plan_release(release, "--recipe", "granite-4.0-h-tiny-family-0", "--tp", "1", "--dtype", "auto",
                                "--assume", "backend=FLASH_ATTN", "mamba_dtype=auto", "prefix=off", "spec=0", "spec=1",
                                "spec=2", "pp=1")
    points = report["recipes"][0]["points"]
    assert report["recipes"][0]["coverage"] == "family"
    if release == "0.32.0":
        assert code == 0
        assert [(p["spec"], p["verdict"], p["parent_bytes"]) for p in points] == [
            (0, "ok", 3244032), (1, "ok", 3276800), (2, "ok", 3309568)]
        return
    assert code == 1
    assert [(p["spec"], p["verdict"], p["property"]) for p in points] == [
        (0, "ok", None), (1, "counterexample", "boots"), (2, "counterexample", "boots")]
    line = PADDED_PAGE_ASSERT[release]
    assert all(p["message"] == f"AssertionError: assertion failed at vllm/v1/kv_cache_interface.py:{line}"
               for p in points[1:])


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0"])
def test_vllm_57721_is_found_on_0_30_and_0_31_at_the_falcon_h1_family(release) -> None:
    """vllm#57721 in FalconH1 as shipped: its model class pads the state page to 409,600 B for a 403,968 B state
    without the speculative rows; the layers keep 407,552 B at 1 ngram token (within the padding) and 411,136 B
    at 2, so vLLM's own assertion fails at 2; 0.32.0 passes num_spec and boots all three."""
    code, report = plan_release(release, "--recipe", "falcon-h1-0.5b-family-0", "--tp", "1", "--dtype", "auto",
                                "--assume", "backend=FLASH_ATTN", "mamba_dtype=auto", "prefix=off", "spec=0", "spec=1",
                                "spec=2", "pp=1")
    points = report["recipes"][0]["points"]
    assert report["recipes"][0]["coverage"] == "family"
    if release == "0.32.0":
        assert code == 0
        assert [(p["spec"], p["verdict"], p["parent_bytes"]) for p in points] == [
            (0, "ok", 14745600), (1, "ok", 14745600), (2, "ok", 15040512)]
        return
    assert code == 1
    assert [(p["spec"], p["verdict"], p["property"]) for p in points] == [
        (0, "ok", None), (1, "ok", None), (2, "counterexample", "boots")]
    assert points[2]["message"] == ("AssertionError: assertion failed at vllm/v1/kv_cache_interface.py:"
                                    f"{PADDED_PAGE_ASSERT[release]}")


def test_vllm_57721_is_not_found_on_0_31_at_the_zamba2_family_its_page_leaves_room() -> None:
    """Zamba2's class ships the same bug in 0.31.0, but Zamba2-7B's 48-token attention page (1,376,256 B at tp 1)
    holds the layers' state even at 2 ngram tokens (991,744 B): every drafted point boots."""
    code, report = plan_release("0.31.0", "--recipe", "zamba2-7b-family-0", "--dtype", "auto", "--assume",
                                "backend=FLASH_ATTN", "mamba_dtype=auto", "prefix=off", "spec=1", "spec=2")
    assert code == 0
    assert [(p["tp"], p["spec"], p["verdict"]) for p in report["recipes"][0]["points"]] == [
        (1, 1, "ok"), (2, 1, "ok"), (1, 2, "ok"), (2, 2, "ok")]


def function_source(path: Path, name: str) -> str:
    """The source of the first function NAME defined in PATH, up to the next definition at its indent."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"def {name}(")
    indent = text[text.rindex("\n", 0, start) + 1:start]
    ends = [i for i in (text.find(f"\n{indent}def ", start), text.find(f"\n{indent}@", start)) if i != -1]
    return text[start:min(ends)] if ends else text[start:]


MODELS = "vllm/model_executor/models"
# (upstream bug, file, function, text the release's function has where the bug is fixed, releases that have it)
FIXES = (
    ("vllm#57721", f"{MODELS}/granitemoehybrid.py", "get_mamba_state_shape_from_config", "num_spec=", {"0.32.0"}),
    ("vllm#57721", f"{MODELS}/falcon_h1.py", "get_mamba_state_shape_from_config", "num_spec=", {"0.32.0"}),
    ("vllm#57721", f"{MODELS}/zamba2.py", "get_mamba_state_shape_from_config", "num_spec=", {"0.32.0"}),
    ("vllm#57721", f"{MODELS}/qwen3_next.py", "get_mamba_state_shape_from_config", "num_spec", set(RELEASES)),
    ("vllm#57721", f"{MODELS}/nemotron_h.py", "get_mamba_state_shape_from_config", "num_spec=", set(RELEASES)),
    ("vllm#55600", "vllm/v1/worker/gpu/model_states/mamba_hybrid.py", "add_request", "// mamba_block_size",
     {"0.32.0"}),
    ("vllm#43626", "vllm/v1/core/kv_cache_utils.py", "unify_kv_cache_spec_page_size",
     "elif isinstance(layer_spec, MambaSpec):", set(RELEASES)),
    ("vllm#25811", "vllm/v1/worker/utils.py", "select_common_block_size", "kv_manager_block_size", set(RELEASES)),
)


@pytest.mark.parametrize("release", list(RELEASES))
def test_the_releases_code_has_each_fix_where_the_real_releases_page_says(release) -> None:
    """What docs/findings/real-releases.md says shipped and fixed where, read from each release's own code: the
    bugs kvproof does not plan (vllm#55600, and vllm#57721 in FalconH1 and Zamba2) and those fixed before 0.30.0."""
    folder = release_folder(release)
    wrong = [f"{bug}: {file} {name}: {'lacks' if release in fixed else 'has'} {text!r}"
             for bug, file, name, text, fixed in FIXES
             if (text in function_source(folder / file, name)) != (release in fixed)]
    assert not wrong
    buggy = function_source(folder / "vllm/v1/worker/gpu/model_states/mamba_hybrid.py", "add_request")
    assert ("// self.cache_config.block_size" in buggy) == (release != "0.32.0")  # vllm#55600 as reported
