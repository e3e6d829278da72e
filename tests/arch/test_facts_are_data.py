"""What differs between architectures is a fact in each one's module (sdtgen/arch/NAME.py), never a test of its name
elsewhere: a fifth architecture edits its own module of facts, and nothing else of the host's Python."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import ARCHES, cross_tool, run
from toolchain import kernel_cflags

import sdtgen
from sdtgen import arch as arches

PACKAGE = Path(sdtgen.__file__).parent
FACTS = PACKAGE / "arch"  # where a name is the key of its facts
NAMES = set(arches.module_names())


def named_architectures(source: str) -> list[int]:
    """The lines of ``source`` where an architecture's name appears as a string of its own (a comparison, a
    default, a table's key), anywhere outside a longer text."""
    return sorted({n.lineno for n in ast.walk(ast.parse(source))
                   if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in NAMES})


def test_no_module_outside_the_architectures_names_one():
    """Not one module of the package outside sdtgen/arch compares, defaults to or keys a table by an architecture's
    name: modlink's --no-relax reads Arch.relaxes, QEMU's module file QemuMachine.module_in_ram, the exhaustive
    torture's torn stores Arch.fetch_sees_torn_stores, linker-script's default sdtgen.arch.DEFAULT."""
    found = [f"{p.relative_to(PACKAGE)}:{line}" for p in sorted(PACKAGE.rglob("*.py")) if FACTS not in p.parents
             for line in named_architectures(p.read_text())]
    assert found == []


@pytest.mark.parametrize("source", ['if arch.name == "riscv64": pass', 'x = arch.name in ("x86_64", "i386")',
                                    'parser.add_argument("--arch", default="aarch64")', 'T = {"riscv64": 1}'])
def test_a_name_is_found_in_each_form(source):
    assert named_architectures(source) == [1]
    assert named_architectures('"""riscv64 is relaxed."""\nprint(f"{arch.name} of riscv64")') == []


@pytest.mark.parametrize("name", ARCHES)
def test_relaxes_is_whether_gnu_ld_shortens_a_call(name, tmp_path):
    """Arch.relaxes (modlink links a module for a kernel's loader with --no-relax where it holds) against GNU ld
    itself: a call to a function linked next to it, built with the kernel's flags, takes fewer bytes linked with
    relaxation than without exactly where the architecture says the final link relaxes."""
    objects = []
    for unit, code in (("f", "void g(void);\nvoid f(void) { g(); }\n"), ("g", "void g(void) { }\n")):
        src, obj = tmp_path / f"{unit}.c", tmp_path / f"{unit}.o"  # apart: the compiler cannot drop the call
        src.write_text(code)
        run([cross_tool(name, "gcc"), *kernel_cflags(name), "-c", "-o", str(obj), str(src)])
        objects.append(str(obj))
    sizes = []
    for relax in ("--relax", "--no-relax"):
        out = tmp_path / f"call{relax}.elf"
        run([cross_tool(name, "ld"), relax, "-e", "f", "-Ttext=0x100000", "-o", str(out), *objects])
        text = run([cross_tool(name, "size"), "-A", str(out)]).stdout
        sizes.append(next(int(line.split()[1]) for line in text.splitlines() if line.startswith(".text")))
    assert (sizes[0] < sizes[1]) == arches.by_name(name).relaxes, sizes


@pytest.mark.parametrize("name", ARCHES)
def test_the_exhaustive_torture_tears_a_store_where_the_manual_says_a_fetch_may_see_it_torn(name):
    """Intel's SDM (vol. 3A, 8.1.3, cross-modifying code) gives no atomicity of a multi-byte store to another
    processor's instruction fetch: on x86 the exhaustive torture lands every subset of a store's bytes. Arm's ARM
    (B2.2.1) and the RISC-V ISA (the Ziccif note) make an aligned 4-byte instruction store single-copy atomic to
    the fetch: there, all or none."""
    from sdtgen.targets.emulator.exhaustive import landings

    x86 = name in {"x86_64", "i386"}  # the manuals' word, written here apart from the modules of facts
    seen = landings(arches.by_name(name), 0x1000, b"\x01\x02\x03\x04")
    assert len(seen) == (16 if x86 else 2)
    assert [seen[0], seen[-1]] == [[], [(0x1000, 1), (0x1001, 2), (0x1002, 3), (0x1003, 4)]]
