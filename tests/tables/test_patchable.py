"""__patchable_function_entries (gcc -fpatchable-function-entry=N,M) lists each function's entry at the
address readelf -r (objects) and objdump -s (linked files) show, on four architectures."""

from __future__ import annotations

import json

import pytest
import readelf
from builders import ARCHES
from helpers import run, sdtgen

SOURCE = r"""
__attribute__((noinline)) int leaf(int x) { return x * 3; }
__attribute__((noinline)) static int helper(int x) { return leaf(x) + 1; }
__attribute__((patchable_function_entry(0, 0))) int unpatched(int x) { return x - 1; }
int start(int x) { return helper(x) + unpatched(x); }
"""
PATCHED = {"leaf", "helper", "start"}


def listed(path) -> list[dict]:
    return json.loads(sdtgen("probes", path, "--json", "--kind", "patchable", check=True).stdout)["probes"]


def addresses(probes: list[dict]) -> list:
    return sorted((a for p in probes for a in p["addresses"]), key=str)


@pytest.fixture(scope="module", params=[(a, m) for a in ARCHES for m in ("2", "3,1")], ids=str)
def patched(request, builder):
    arch, nm = request.param
    b = builder(arch)
    obj = b.obj(f"patched-{nm}", SOURCE, f"-fpatchable-function-entry={nm}", "-fno-pic")
    pic = b.obj(f"patched-pic-{nm}", SOURCE, f"-fpatchable-function-entry={nm}", "-fPIC")
    exe = b.link(f"patched-{nm}", [obj], "-no-pie", "-Wl,-e,start")
    so = b.link(f"libpatched-{nm}.so", [pic], "-shared")
    return obj, exe, so


def test_objects_list_each_entry_through_its_relocation(patched):
    obj = patched[0]
    got = listed(obj)
    fields = readelf.relocated_fields(obj, "__patchable_function_entries")
    assert addresses(got) == sorted((w for [(_, w)] in fields.values()), key=str)
    assert {p["name"] for p in got} == PATCHED
    for p in got:  # with M NOPs before the symbol, the entry belongs to the function after it
        assert readelf.first_function_from(obj, p["addresses"][0]) == p["name"] == p["function"]


def test_linked_files_list_the_addresses_objdump_shows(patched):
    for path in patched[1:]:
        got = listed(path)
        word = 8 if "ELF64" in run(["readelf", "-h", str(path)]).stdout else 4
        (start, data), = readelf.contents(path, "__patchable_function_entries")
        assert addresses(got) == sorted(readelf.linked_words(path, start, data, word)), path
        assert {p["name"] for p in got} == PATCHED
        for p in got:
            assert readelf.first_function_from(path, p["addresses"][0]) == p["name"]
