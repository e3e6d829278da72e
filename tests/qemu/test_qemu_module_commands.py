"""QEMU's loader is given its module at boot: a script's `module FILE` line gives it, as --module does, and the
module fires as its C runs natively (tests/module_native.py)."""

from __future__ import annotations

import json

import pytest
from helpers import sdtgen
from module_native import module_firings
from test_qemu_modules import module_for

CALLS = [3, 0, 2]


@pytest.fixture(scope="module")
def native_module(tmp_path_factory):
    return module_firings(tmp_path_factory.mktemp("native-module"), CALLS)


def test_a_scripts_module_line_boots_qemu_with_the_module_as_the_option_does(tmp_path, qemu_kernel, native_module):
    ko = module_for(tmp_path, "x86_64")
    script = tmp_path / "load.sdt"
    script.write_text(f"module {ko}\n" + "".join(f"run hkm_work {n}\n" for n in CALLS))
    r = sdtgen("qemu", qemu_kernel("x86_64"), "--json", "--enable", "hkm:::", "--script", script, "--timeout", "120")
    assert r.returncode == 0, r.stderr
    got = [{"probe": e["probe"], "args": e["args"]} if e["event"] == "fire" else {"return": e["value"]}
           for e in map(json.loads, r.stdout.splitlines()) if e["event"] in ("fire", "return")]
    assert got == [{**e, "probe": e["probe"].replace("hkm::", "hkm:hkm:")} if "probe" in e else e
                   for e in native_module]
