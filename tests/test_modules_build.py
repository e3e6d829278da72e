"""A loadable module at build time: `sdtgen gen --module NAME` on the module's partial link writes its own
table (the section sdt_module_table, its symbols hidden), `check` proves that table against the module as a
kernel's loader places it (its own relocations, no relaxation), and `probes` lists its probes with the
module's name where their definitions leave the module field empty. Read back with readelf, the truth."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import ROOT, SDTGEN, need_tool, run, sdtgen

MODULE = ROOT / "fixtures" / "module"
CROSS = {"aarch64": "aarch64-linux-gnu-gcc", "riscv64": "riscv64-linux-gnu-gcc", "i386": "i686-linux-gnu-gcc"}


def build(out, arch: str = "x86_64", **make_vars: str):
    if arch in CROSS:
        need_tool(CROSS[arch], f"gcc-{CROSS[arch].removesuffix('-gcc')}")
    extra = [f"{k}={v}" for k, v in make_vars.items()]
    run(["make", "-C", str(MODULE), f"ARCH={arch}", f"O={out}", f"SDTGEN={SDTGEN}", *extra])
    return out


def test_the_module_object_carries_its_own_table_under_a_hidden_symbol(built):
    out = built
    sections = run(["readelf", "-SW", str(out / "hkm.ko")]).stdout
    assert " sdt_module_table " in sections and " set_sdt_sites_set " in sections
    symbols = [ln.split() for ln in run(["readelf", "-sW", str(out / "hkm.ko")]).stdout.splitlines()]
    (table,) = [s for s in symbols if s and s[-1] == "__sdt_module_table"]
    assert table[4:6] == ["GLOBAL", "HIDDEN"]


def test_a_shared_object_built_as_a_module_exports_none_of_its_stubs_or_recorders(tmp_path):
    out = build(tmp_path / "so", DLOPEN="1")
    exported = run(["readelf", "--dyn-syms", "-W", str(out / "libhkm.so")]).stdout
    assert "hkm_work" in exported  # its own function, as the C defines it
    assert "__dtrace_sdt_" not in exported and "__sdt_rec_" not in exported and "__sdt_prog_" not in exported


@pytest.mark.parametrize("arch", ["x86_64", "riscv64"])
def test_check_proves_the_module_table_as_a_loader_places_it(tmp_path, arch):
    out = build(tmp_path / arch, arch)
    r = sdtgen("check", str(out / "mod.o"), str(out / "hkm.ko"))
    assert r.returncode == 0, r.stderr
    assert "a module: its table checked against it placed at" in r.stdout
    assert "3 sites (table mode reloc): 3 stable, 0 moved, 0 missing" in r.stdout


def test_check_refuses_a_module_whose_table_was_written_for_other_code(tmp_path):
    """The table gen wrote for the -O2 object, linked with the same source built -O0: its sites are elsewhere."""
    good = build(tmp_path / "o2")
    other = tmp_path
    run(["gcc", "-O0", "-ffreestanding", "-fno-pic", "-mcmodel=kernel", "-mno-red-zone", "-fno-common",
         "-fno-asynchronous-unwind-tables", "-fno-stack-protector", f"-I{ROOT / 'sdtgen' / 'include'}", "-c", "-o",
         str(other / "o0.o"), str(MODULE / "mod.c")])
    run(["ld", "-r", "-o", str(other / "stale.ko"), str(other / "o0.o"), str(good / "mod_sdt_stubs.o"),
         str(good / "mod_sdt_table.o")])
    r = sdtgen("check", str(good / "mod.o"), str(other / "stale.ko"))
    assert r.returncode != 0


def test_probes_of_a_module_name_it_where_the_definition_leaves_the_module_empty(built):
    out = built
    listing = sdtgen("probes", str(out / "hkm.ko"), "--json", check=True).stdout
    specs = sorted(f"{p['provider']}:{p['module']}:{p['function']}:{p['name']}" for p in json.loads(listing)["probes"])
    assert specs == ["hkm:drv:work:dev", "hkm:drv:work:done", "hkm:hkm:work:step"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("module"))


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "x" * 65, "int"])
def test_gen_refuses_a_module_name_that_is_not_an_identifier(tmp_path, built, name):
    obj = built / "mod.o"
    copy = tmp_path / "copy.o"
    shutil.copy(obj, copy)
    r = sdtgen("gen", str(copy), "--module", name, "--stubs", str(tmp_path / "s.c"), "--table", str(tmp_path / "t.S"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "is not a module name" in r.stderr
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()
