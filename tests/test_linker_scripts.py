"""sdtgen's linker scripts, and a kernel's own: the hobby-OS-style final script docs/table.md shows, at
another address, INCLUDE-ing sdtgen's two snippets, links with GNU ld and lld on every architecture, checks,
and boots firing what the kernel's C fires natively."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ARCHES, FIXTURE, SDTGEN, cross_tool, include_flag, need_tool, readelf_symbols, run, sdtgen
from matrix import boot_trace, comparable, pointer_args, split_call
from native_oracle import Call, data_symbolizer, run_native

# Where a hobby kernel on QEMU links itself: physical addresses, none of them sdtgen's default.
LOAD = {"x86_64": 0x100000, "i386": 0x100000, "aarch64": 0x40080000, "riscv64": 0x80200000}
DOCS = Path(__file__).resolve().parent.parent / "docs" / "table.md"


def docs_script() -> str:
    """The kernel's own script docs/table.md shows, INCLUDE lines and all."""
    section = DOCS.read_text().split("## Your own linker script", 1)[1]
    return section.split("```\n", 2)[1]


CALLS = ("kmain 1", "vfs_lookup_id:int 2", "sched_switch 7 8 3 1 5000 0x40", "proc_exit:void 42")


def hobby_script(path, arch: str, snippets: bool = True):
    """The documented script at the architecture's address, entering the fixture at kmain; without the
    snippets if asked."""
    text = docs_script().replace("0x80200000", f"{LOAD[arch]:#x}").replace("ENTRY(_start)", "ENTRY(kmain)")
    if not snippets:
        text = "\n".join(ln for ln in text.splitlines() if "INCLUDE" not in ln)
    path.write_text(text)
    return path


def build(out, arch: str, linker: str, script, check: bool = True, **make_vars: str):
    """The fixture kernel through the fragment, with SDT_FINAL_LDS naming the kernel's own script."""
    cross_tool(arch, "gcc")
    ld = need_tool("ld.lld", "lld") if linker == "lld" else cross_tool(arch, "ld")
    assigns = [f"{k}={v}" for k, v in make_vars.items()]
    return run(["make", "-C", str(FIXTURE), f"O={out}", f"SDTGEN={SDTGEN}", f"ARCH={arch}", f"LD={ld}",
                f"SDT_FINAL_LDS={script}", *assigns], check=check)


@pytest.mark.parametrize("linker", ["bfd", "lld"])
@pytest.mark.parametrize("arch", ARCHES)
def test_a_kernels_own_script_including_the_snippets_checks_and_boots(tmp_path, arch, linker, native_exe):
    build(tmp_path, arch, linker, hobby_script(tmp_path / "hobby.ld", arch))
    image = tmp_path / "kernel.elf"
    assert sdtgen("check", tmp_path / "kernel.o", image).returncode == 0
    sections = {name: addr for name, addr in readelf_addresses(image, arch)}
    assert sections[".text"] == LOAD[arch]  # where the kernel's script put it, as readelf reads it
    assert {"set_sdt_probes_set", "set_sdt_sites_set"} <= sections.keys()
    pointers = pointer_args((FIXTURE,))
    native = run_native(native_exe, [Call(s.partition(":")[0], a) for s, a in map(split_call, CALLS)])
    expected = comparable(native, pointers, data_symbolizer(native_exe))
    assert sum(e[0] == "fire" for e in expected) > 10
    assert boot_trace(image, list(CALLS), pointers, arch) == expected


def readelf_addresses(image, arch: str) -> list[tuple[str, int]]:
    """(name, address) of every section, from the architecture's readelf -SW."""
    out = []
    for line in run([cross_tool(arch, "readelf"), "-SW", str(image)]).stdout.splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 4 and fields[0].startswith("[") and fields[0] != "[Nr]":
            out.append((fields[1], int(fields[3], 16)))
    return out


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_without_the_snippets_the_build_stops_naming_them(tmp_path, linker):
    """A script that places neither set, under --gc-sections (what the snippets' KEEPs are for): the linker
    drops the sets, check fails, the image is deleted, and the line says what to include. (Without
    --gc-sections both linkers place the sets as orphan sections, and the runtime's references to their
    __start_/__stop_ symbols make them define those.)"""
    proc = build(tmp_path, "riscv64", linker, hobby_script(tmp_path / "bare.ld", "riscv64", snippets=False),
                 check=False, SDT_LDFLAGS="--gc-sections")
    assert proc.returncode != 0 and not (tmp_path / "kernel.elf").exists()
    (line,) = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert "has no set_sdt_sites_set linker set" in line
    assert "INCLUDE sdt_text.ld and sdt_data.ld" in line and "sdtgen linker-script sdt_text --path" in line


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_runtime_sources_are_built_with_the_kernels_flags_and_kept_under_gc_sections(tmp_path, linker):
    """SDT_RUNTIME_SRCS (sdtgen's runtime, and here a source of the kernel's own added to it): compiled with
    SDT_CFLAGS (the kernel's: RISC-V soft-float, as readelf says) into the runtime's archive, whose members join
    the image when it uses them (here through -u), and .text.sdt_* code kept by sdt_text.ld although nothing
    calls it."""
    runtime = tmp_path / "rt.c"
    runtime.write_text('__attribute__((section(".text.sdt_runtime"))) int sdt_runtime_probe(int x) { return x; }\n'
                       "int sdt_runtime_unkept(int x) { return x + 1; }\n"
                       '__attribute__((section(".text.rt_used"))) int sdt_runtime_used(int x) { return x + 2; }\n')
    shipped = Path(sdtgen("runtime-dir", check=True).stdout.strip()) / "sdt_runtime.c"
    for used in (True, False):
        out = tmp_path / f"out-{used}"
        build(out, "riscv64", linker, hobby_script(tmp_path / "hobby.ld", "riscv64"),
              SDT_RUNTIME_SRCS=f"{shipped} {runtime}", SDT_LDFLAGS="--gc-sections" + " -u sdt_runtime_used" * used)
        for obj in ("kernel_sdt_rt_rt.o", "kernel_sdt_rt_sdt_runtime.o", "kernel_sdt_rt_arch.o"):
            assert "soft-float ABI" in run([cross_tool("riscv64", "readelf"), "-hW", str(out / obj)]).stdout
        symbols = run([cross_tool("riscv64", "nm"), str(out / "kernel.elf")]).stdout
        assert (" sdt_runtime_used" in symbols) == (" sdt_runtime_probe" in symbols) == used  # an unused member
        assert " sdt_runtime_unkept" not in symbols  # gc ran; KEEP held
        assert " sdt_init" in symbols and " sdt_trap" in symbols  # the runtime, reached from sdt_entries


def test_the_final_script_is_the_snippets_in_sdtgens_layout():
    for arch in ARCHES:
        final = sdtgen("linker-script", "final", "--arch", arch, check=True).stdout
        assert "btext = .;" in final and "__start_set_sdt_sites_set" in final
        for name in ("sdt_text", "sdt_data"):
            snippet = sdtgen("linker-script", name, check=True).stdout
            body = snippet.split("*/\n", 1)[1].rstrip("\n")
            assert body in final and "\tINCLUDE" not in final
            path = sdtgen("linker-script", name, "--path", check=True).stdout.strip()
            assert path.endswith(f"linker_scripts/{name}.ld") and Path(path).read_text() == snippet
        path = sdtgen("linker-script", "partial", "--arch", arch, "--path", check=True).stdout.strip()
        assert path.endswith("linker_scripts/partial.ld")
    assert sdtgen("include-dir", check=True).stdout.strip().endswith("sdtgen/include")
    assert sdtgen("makefile", check=True).stdout.strip().endswith("sdtgen/data/sdtgen.mk")
    assert sdtgen("linker-script", "final", "--path").returncode == 2



OWN_SECTIONS = r"""
#include <sdt.h>

SDT_PROVIDER_DEFINE(ks);
SDT_PROBE_DEFINE2(ks, , , work, "int", "int");

__attribute__((section(".text.init"), noinline)) int kinit(int x) { return x * 3; }
__attribute__((section(".text.init"), noinline)) int kinit_more(int x) { return x + 1; }

__attribute__((noinline)) int kwork(int x)
{
	int y = kinit(x) + kinit_more(x);
	SDT_PROBE2(ks, , , work, x, y);
	return y;
}

__attribute__((section(".text.entry"), noreturn)) void _start(void)
{
	for (;;)
		kwork(1);
}
"""

# The kernel's own script: its entry first at its load address, its init text bounded by its own symbols.
OWN_SCRIPT = """ENTRY(_start)
SECTIONS
{
	. = 0x100000;
	.text : {
		*(.text.entry)
		__init_start = .;
		*(.text.init)
		__init_end = .;
		. = ALIGN(16);  /* the partial link's .text starts aligned: btext with it (offset mode) */
		btext = .;
		*(.text .text.*)
	}
	INCLUDE sdt_text.ld
	. = ALIGN(4096);
	.rodata : { *(.rodata .rodata.*) }
	.data : { *(.data .data.*) }
	INCLUDE sdt_data.ld
	.bss : { *(.bss .bss.* COMMON) }
	/DISCARD/ : { *(.eh_frame .note.GNU-stack .note.gnu.property) }
}
"""


def own_sections_kernel(tmp_path, mode: str, keep: str, linker: str = "bfd"):
    """OWN_SECTIONS built with the fragment's defaults, its own final script and SDT_KEEP_TEXT=``keep``."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "main.c").write_text(OWN_SECTIONS)
    (src / "kernel.ld").write_text(OWN_SCRIPT)
    (src / "Makefile").write_text(
        "include $(shell $(SDTGEN) makefile)\n"
        "CFLAGS := -ffreestanding -fno-pic -O2 -mcmodel=kernel -mno-red-zone -fno-stack-protector "
        "-fno-asynchronous-unwind-tables -I$(SDT_INCLUDE)\n"
        "SDT_FINAL_LDS := kernel.ld\n"
        "all: $(O)/kernel.elf\n"
        "$(O)/main.o: main.c\n\t@mkdir -p $(O)\n\t$(CC) $(CFLAGS) -c -o $@ $<\n"
        "$(eval $(call sdt_image,$(O)/kernel.elf,$(O)/kernel.o,$(O)/main.o))\n")
    out = tmp_path / f"{mode}-{linker}-{bool(keep)}"
    ld = need_tool("ld.lld", "lld") if linker == "lld" else "ld"
    run(["make", "-C", str(src), f"SDTGEN={SDTGEN}", f"O={out}", f"SDT_MODE={mode}", f"SDT_KEEP_TEXT={keep}",
         f"LD={ld}"])
    return out


@pytest.mark.parametrize(("mode", "linker"), [("reloc", "bfd"), ("offset", "bfd"), ("reloc", "lld")])
def test_the_kernels_own_text_sections_reach_its_final_script(tmp_path, mode, linker, native_exe):
    """SDT_KEEP_TEXT: the partial link leaves .text.entry and .text.init as they are, so the kernel's final script
    puts its entry at its load address and bounds its init text with its own symbols, as readelf reads them;
    the table checks in both modes (the fragment ran check), and the image boots firing as the C says."""
    out = own_sections_kernel(tmp_path, mode, ".text.entry .text.init", linker)
    symbols = {name: (value, size) for value, size, _, _, _, name in readelf_symbols(out / "kernel.elf")}
    assert symbols["_start"][0] == 0x100000
    lo, hi = symbols["__init_start"][0], symbols["__init_end"][0]
    inits = sorted(symbols[f][0] for f in ("kinit", "kinit_more"))
    assert lo <= inits[0] < inits[1] < hi and hi - lo >= sum(symbols[f][1] for f in ("kinit", "kinit_more"))
    assert not lo <= symbols["kwork"][0] < hi
    sites = json.loads(sdtgen("scan", out / "kernel.o", "--json", check=True).stdout)["sites"]
    assert [(s["probe"], s["section"], s["function"].split("+")[0]) for s in sites] == [("ks:::work", ".text",
                                                                                         "kwork")]
    boot = sdtgen("boot", out / "kernel.elf", "--enable", "ks:::", "--run", "kwork:int", "--arg", "2", check=True)
    assert boot.stdout.splitlines()[1:] == ["ks:::work  arg0=2 arg1=9", "kwork(2) = 9"]


def test_without_keep_the_partial_link_merges_them_and_the_kernels_bounds_hold_nothing(tmp_path):
    """The default partial script merges .text.init into .text before the final script sees it: the range the
    kernel bounds is empty (what SDT_KEEP_TEXT is for)."""
    out = own_sections_kernel(tmp_path, "reloc", "")
    symbols = {name: value for value, _, _, _, _, name in readelf_symbols(out / "kernel.elf")}
    assert symbols["__init_start"] == symbols["__init_end"]


def test_a_kept_section_holding_a_site_has_no_offset_from_btext(tmp_path):
    """Offset mode measures sites from the start of .text: a site in a section the partial link keeps is
    refused, naming it and what to do; reloc mode takes it."""
    obj = tmp_path / "k.o"
    src = tmp_path / "k.c"
    src.write_text(OWN_SECTIONS.replace("int kwork(int x)", 'int __attribute__((section(".text.init"))) kwork(int x)'))
    run(["gcc", "-ffreestanding", "-fno-pic", "-O2", "-mcmodel=kernel", include_flag(), "-c", "-o", str(obj),
         str(src)])
    script = tmp_path / "partial.ld"
    sdtgen("linker-script", "partial", "--keep", ".text.init", "-o", script, check=True)
    run(["ld", "-r", "-T", str(script), "-o", str(tmp_path / "kernel.o"), str(obj)])
    proc = sdtgen("gen", tmp_path / "kernel.o", "--mode", "offset", "--stubs", tmp_path / "s.c", "--table",
                  tmp_path / "t.S")
    assert proc.returncode != 0 and not (tmp_path / "s.c").exists()
    assert ": error: .text.init:kwork+0x" in proc.stderr and "without --keep for its section" in proc.stderr
    sdtgen("gen", tmp_path / "kernel.o", "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S", check=True)


def test_keep_takes_only_text_section_names():
    for bad in ("*", ".text", ".data.x", ".text.a b", ".text.x)", ".text.*"):
        proc = sdtgen("linker-script", "partial", "--keep", bad)
        assert proc.returncode == 2 and proc.stdout == ""
        (line,) = proc.stderr.splitlines()
        assert line.startswith("sdtgen: error: --keep '") and "name a section .text.NAME" in line
    assert sdtgen("linker-script", "partial", "--keep", ".text.entry", "--path").returncode == 2
    assert sdtgen("linker-script", "sdt_text", "--keep", ".text.entry").returncode == 2
