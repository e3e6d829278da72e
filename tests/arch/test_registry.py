"""The architecture registry: one module per architecture, and its facts as the tools themselves state them.

The compilers' own `-dumpmachine`, Debian's package database (dpkg -S), GNU ld's
default output format and the ELF header of what each compiler makes are the
truth; the CLI, the fixture Makefile and CI read the registry, so they are
checked to offer exactly its architectures.
"""

from __future__ import annotations

import json
import os
import pkgutil
import shutil
import struct
import sys

import pytest
from helpers import ARCHES, ROOT, cross_tool, need_tool, run, sdtgen
from toolchain import kernel_cflags

from sdtgen import arch as arches


def test_every_module_of_the_package_is_an_architecture_x86_64_first():
    modules = {m.name for m in pkgutil.iter_modules(arches.__path__)} - {"base"}
    assert set(arches.names()) == modules and arches.names()[0] == "x86_64" == arches.DEFAULT
    assert len({a.machine for a in arches.all_arches()}) == len(modules)


@pytest.mark.parametrize("name", ARCHES)
def test_the_compiler_names_its_own_architecture(name, tmp_path):
    a = arches.by_name(name)
    gcc = cross_tool(name, "gcc")
    assert arches.for_triple(run([gcc, "-dumpmachine"]).stdout).name == name
    src = tmp_path / "f.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    run([gcc, *kernel_cflags(name), "-c", "-o", str(tmp_path / "f.o"), str(src)])
    header = (tmp_path / "f.o").read_bytes()[:20]
    assert header[4] == (2 if a.bits == 64 else 1) and struct.unpack_from("<H", header, 18)[0] == a.machine
    need_tool("clang", "clang")
    assert arches.for_triple(run(["clang", f"--target={a.toolchain.triple}", "-dumpmachine"]).stdout).name == name


@pytest.mark.parametrize("name", ARCHES)
def test_packages_are_the_ones_debian_installs_the_tools_from(name):
    t = arches.by_name(name).toolchain
    for tool, package in ((f"{t.cross_prefix}gcc", t.gcc_package), (f"{t.cross_prefix}ld.bfd", t.binutils_package)):
        path = cross_tool(name, tool[len(t.cross_prefix):])
        if not shutil.which("dpkg"):
            pytest.skip("no dpkg: not a Debian machine")
        owner = run(["dpkg", "-S", path]).stdout.split(":")[0]
        assert owner == package, f"{path} comes from {owner}, the registry says {package}"


@pytest.mark.parametrize("name", ARCHES)
def test_the_qemu_package_is_the_one_debian_installs_the_emulator_from(name):
    a = arches.by_name(name)
    path = need_tool(a.qemu.binary, a.qemu.package)
    if not shutil.which("dpkg"):
        pytest.skip("no dpkg: not a Debian machine")
    assert run(["dpkg", "-S", path]).stdout.split(":")[0] == a.qemu.package


@pytest.mark.parametrize("name", ARCHES)
def test_final_script_names_the_format_gnu_ld_writes(name, tmp_path):
    a = arches.by_name(name)
    ld = cross_tool(name, "ld")
    assert run([ld, "--print-output-format"]).stdout.strip() == a.toolchain.ld_format
    script = sdtgen("linker-script", "final", "--arch", name, check=True).stdout
    assert f'OUTPUT_FORMAT("{a.toolchain.ld_format}")' in script and f"OUTPUT_ARCH({a.toolchain.ld_arch})" in script
    assert f"KERNBASE = {a.kernel_base:#x};" in script and "$" not in script  # every placeholder filled
    out = tmp_path / "final.ld"
    assert sdtgen("linker-script", "final", "--arch", name, "-o", out, check=True).stdout == ""
    assert out.read_text() == script


def test_ci_asks_for_the_packages_with_nothing_but_the_standard_library():
    """.ci/run runs `python3 -m sdtgen arch --packages` before any venv: -S keeps site-packages out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = run([sys.executable, "-S", "-m", "sdtgen", "arch", "--packages"], env=env)
    expected = list(dict.fromkeys(p for a in arches.all_arches()
                                  for p in (a.toolchain.gcc_package, a.toolchain.binutils_package, a.qemu.package)))
    assert proc.stdout.split() == expected
    assert {"qemu-system-x86", "qemu-system-arm", "qemu-system-misc"} <= set(expected)
    assert "sdtgen arch --packages" in (ROOT / ".ci" / "run").read_text()


def test_every_arch_choice_of_the_cli_is_the_registrys():
    for name in ARCHES:
        assert sdtgen("arch", name, "--get", "name", check=True).stdout.strip() == name
    bad = sdtgen("linker-script", "final", "--arch", "vax")
    assert bad.returncode == 2 and all(n in bad.stderr for n in ARCHES)
    listed = sdtgen("arch", check=True).stdout.splitlines()[1:]
    assert [ln.split()[0] for ln in listed] == list(ARCHES)
    records = json.loads(sdtgen("arch", "--json", check=True).stdout)["arches"]
    assert [(r["name"], r["machine"], r["packages"]) for r in records] == [
        (a.name, a.machine, [a.toolchain.gcc_package, a.toolchain.binutils_package]) for a in arches.all_arches()]


def test_an_unknown_triple_is_one_line_naming_sdt_arch():
    proc = sdtgen("arch", "--triple", "sparc64-linux-gnu")
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and "SDT_ARCH" in proc.stderr


def test_the_fixture_makefile_refuses_an_architecture_the_registry_lacks(tmp_path):
    from helpers import FIXTURE, SDTGEN

    proc = run(["make", "-C", str(FIXTURE), f"O={tmp_path}", f"SDTGEN={SDTGEN}", "ARCH=vax"], check=False)
    assert proc.returncode != 0 and "ARCH=vax" in proc.stderr and not any(tmp_path.iterdir())
