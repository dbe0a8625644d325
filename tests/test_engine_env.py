"""A tokenspeed module kvproof loads reads the environment from the point's assumptions, never
from the machine kvproof runs on: a declared assumption answers the point's value (and is
consulted), any other variable raises StubUsed naming it, in every way Python reads it, at
import and in functions, in a whole module and in one taken in part (partial.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import loader

NAME = "INKLING_FP8_SCONV"  # a declared assumption (recipes/inkling.py reads it)
PROBE = f'''
import os
import os.path
from os import environ, getenv
from os import environ as env


def subscript():
    return os.environ["{NAME}"]


def get():
    return os.environ.get("{NAME}", "0")


def getenv_():
    return os.getenv("{NAME}")


def contains():
    return "{NAME}" in os.environ


def from_environ():
    return environ["{NAME}"], env.get("{NAME}")


def from_getenv():
    return getenv("{NAME}")


def local_import():
    import os as again
    from os import environ as inner
    return again.environ.get("{NAME}"), inner["{NAME}"]


def undeclared():
    return os.environ.get("HOME")


def whole():
    return dict(os.environ)


def path():
    return os.path.join("a", "b")
'''
FORMS = ("subscript", "get", "getenv_", "from_getenv")


def _package(root: Path, modules: dict[str, str]) -> loader.Source:
    recipes = root / "tokenspeed" / "runtime" / "layers" / "attention" / "kv_cache" / "recipes"
    recipes.mkdir(parents=True)
    (recipes / "__init__.py").write_text("")
    for name, text in modules.items():
        (recipes / f"{name}.py").write_text(text)
    return loader.Source(root / "tokenspeed", "test", "path")


@pytest.fixture
def probe(tmp_path: Path) -> types.ModuleType:
    return loader.load(_package(tmp_path, {"probe": PROBE}), ("probe",))["probe"]


@pytest.mark.parametrize("value", ["0", "1"])
def test_each_read_answers_the_points_value_not_the_machines(probe: types.ModuleType, value: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "machine")
    for form in FORMS:
        loader.ASSUMED.point({NAME: value})
        assert getattr(probe, form)() == value and loader.ASSUMED.consulted == {NAME}, form
    loader.ASSUMED.point({NAME: value})
    assert probe.contains() is True and loader.ASSUMED.consulted == {NAME}
    assert probe.from_environ() == (value, value) and probe.local_import() == (value, value)
    assert probe.path() == "a/b"  # the rest of os is the real module


def test_an_assumption_the_point_does_not_make_raises(probe: types.ModuleType) -> None:
    loader.ASSUMED.point({})
    with pytest.raises(StubUsed, match=f"make {NAME} an assumption axis"):
        probe.get()


def test_an_undeclared_variable_or_the_whole_environment_raises_naming_it(probe: types.ModuleType) -> None:
    loader.ASSUMED.point({NAME: "0"})
    with pytest.raises(StubUsed, match=r"'HOME'.*make it an assumption axis"):
        probe.undeclared()
    with pytest.raises(StubUsed, match="the whole environment"):
        probe.whole()


def test_a_read_at_import_answers_for_no_point(tmp_path: Path) -> None:
    at_import = f'import os\nVALUE = os.environ.get("{NAME}")\n'
    source = _package(tmp_path, {"at_import": at_import, "other": 'import os\nHOME = os.getenv("HOME")\n'})
    loader.ASSUMED.point({NAME: "1"})
    with pytest.raises(StubUsed, match=f"make {NAME} an assumption axis"):
        loader.load(source, ("at_import",))
    assert loader.ASSUMED.values == {NAME: "1"}  # the point's assumptions are back after the load
    with pytest.raises(StubUsed, match="'HOME'"):
        loader.load(source, ("other",))


def test_a_module_taken_in_part_reads_the_same(tmp_path: Path) -> None:
    part = loader.load(_package(tmp_path, {"probe": PROBE}), ("probe!",))["probe"]
    assert type(part).__name__ == "PartialModule"
    loader.ASSUMED.point({NAME: "1"})
    assert part.get() == "1" and part.from_getenv() == "1" and part.local_import() == ("1", "1")
    with pytest.raises(StubUsed, match="'HOME'"):
        part.undeclared()


def test_the_real_recipe_reads_its_switch_from_the_point() -> None:
    modules = loader.load(loader.installed_source(), ("inkling",))
    for value, on in (("0", False), ("1", True)):
        loader.ASSUMED.point({NAME: value})
        assert modules["inkling"]._fp8_sconv() is on and loader.ASSUMED.consulted == {NAME}
    assert sys.modules["os"].environ is not modules["inkling"].os.environ
