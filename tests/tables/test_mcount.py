"""ftrace's __mcount_loc lists one probe per traced function, at the addresses readelf -r (objects)
and objdump -s (linked programs) show, named by the function that holds each site."""

from __future__ import annotations

import json

import pytest
import readelf
from helpers import run, sdtgen

SOURCE = r"""
void __fentry__(void) {}
__attribute__((noinline)) int leaf(int x) { return x * 3; }
__attribute__((noinline)) static int helper(int x) { return leaf(x) + 1; }
__attribute__((no_instrument_function)) int untraced(int x) { return x - 1; }
int start(int x) { return helper(x) + untraced(x); }
"""
TRACED = {"leaf", "helper", "start"}
FLAGS = {"x86_64": ("-pg", "-mfentry", "-mrecord-mcount"), "i386": ("-pg", "-mfentry", "-mrecord-mcount", "-fno-pic")}


def listed(path) -> list[dict]:
    return json.loads(sdtgen("probes", path, "--json", "--kind", "mcount", check=True).stdout)["probes"]


@pytest.fixture(scope="module", params=sorted(FLAGS))
def traced(request, builder):
    b = builder(request.param)
    stub = b.obj("fentry", "void __fentry__(void) {}")
    obj = b.obj("traced", SOURCE.replace("void __fentry__(void) {}", ""), *FLAGS[request.param])
    exe = b.link("traced", [obj, stub], "-no-pie", "-Wl,-e,start")
    return obj, exe


def test_objects_list_their_sites_through_relocations(traced):
    obj, _ = traced
    got = listed(obj)
    fields = readelf.relocated_fields(obj, "__mcount_loc")
    assert sorted(a for p in got for a in p["addresses"]) == sorted(w for (_, _), [(_, w)] in fields.items())
    assert {p["name"] for p in got} == TRACED  # every function gcc instrumented, none it did not
    assert all(p["function"] == p["name"] and p["sites"] == 1 and p["provider"] == "ftrace" for p in got)


def test_linked_programs_list_the_addresses_objdump_shows(traced):
    _, exe = traced
    got = listed(exe)
    (_, data), = readelf.contents(exe, "__mcount_loc")
    word = 8 if "ELF64" in __import__("helpers").run(["readelf", "-h", str(exe)]).stdout else 4
    assert sorted(a for p in got for a in p["addresses"]) == sorted(readelf.words(data, word))
    for p in got:
        assert readelf.function_at(exe, p["addresses"][0]) == p["name"]
    assert {p["name"] for p in got} == TRACED


def test_a_vmlinux_style_image_reads_between_start_and_stop_mcount_loc(traced, tmp_path):
    """Linux folds __mcount_loc into its init data between two symbols; only those bounds say where."""
    obj, _ = traced
    script = tmp_path / "kernel.ld"
    script.write_text("SECTIONS {\n . = 0x100000;\n .text : { *(.text*) }\n .init.data : { QUAD(0) . = ALIGN(8);\n"
                      "  __start_mcount_loc = .; KEEP(*(__mcount_loc)) __stop_mcount_loc = .; QUAD(0) *(.data*) }\n}\n")
    image = tmp_path / "vmlinux"
    __import__("helpers").run(["ld", "-m", "elf_x86_64" if "x86_64" in str(obj) else "elf_i386", "-T", str(script),
                               "-e", "start", "-o", str(image), str(obj), str(obj.with_name("fentry.o"))])
    assert not any(s.name == "__mcount_loc" for s in readelf.sections(image))
    syms = {s.name: s.value for s in readelf.symbols(image).values()}
    (start, data), = readelf.contents(image, ".init.data")
    lo, hi = syms["__start_mcount_loc"] - start, syms["__stop_mcount_loc"] - start
    word = 8 if "x86_64" in str(obj) else 4
    got = listed(image)
    assert sorted(a for p in got for a in p["addresses"]) == sorted(readelf.words(data[lo:hi], word))
    assert {p["name"] for p in got} == TRACED


def test_an_entry_outside_every_section_is_named_by_no_function(builder):
    """A function without .size (assembler code) is a label: it holds bytes up to the end of its
    section, not every address after it. readelf shows the entry lies in no section."""
    b = builder("x86_64")
    src = b.dir / "label.s"
    src.write_text(".text\n.globl start\n.type start, @function\nstart: ret\n"
                   ".section __mcount_loc, \"a\"\n.quad start\n.quad start + 0x100000\n")
    obj = b.dir / "label.o"
    run(["as", "-o", str(obj), str(src)])
    exe = b.link("label", [obj], "-no-pie", "-Wl,-e,start")
    start = next(s for s in readelf.symbols(exe).values() if s.name == "start")
    assert start.size == 0
    outside = start.value + 0x100000
    assert not any(s.addr <= outside < s.addr + s.size for s in readelf.sections(exe))
    got = {p["addresses"][0]: p["function"] for p in listed(exe)}
    assert got == {start.value: "start", outside: ""}


def compressed(obj, out, kind: str):
    """A copy of ``obj`` whose __mcount_loc objcopy compressed (SHF_COMPRESSED): objcopy compresses
    only debug sections, so the section goes there and back under a debug section's name."""
    debug, squeezed = out.with_suffix(".debug.o"), out.with_suffix(".squeezed.o")
    run(["objcopy", "--rename-section", "__mcount_loc=.debug_mcount", "--set-section-flags",
         "__mcount_loc=readonly", str(obj), str(debug)])
    run(["objcopy", f"--compress-debug-sections={kind}", str(debug), str(squeezed)])
    run(["objcopy", "--rename-section", ".debug_mcount=__mcount_loc", str(squeezed), str(out)])
    flags = next(ln for ln in run(["readelf", "-SW", str(out)]).stdout.splitlines() if " __mcount_loc " in ln)
    assert " C " in flags, "objcopy did not compress the section"
    return out


@pytest.fixture(scope="module")
def many(builder):
    """An object with enough traced functions that compressing its __mcount_loc pays."""
    source = "void __fentry__(void) {}\n" + "".join(f"int f{i}(int x) {{ return x + {i}; }}\n" for i in range(200))
    return builder("x86_64").obj("many", source, *FLAGS["x86_64"])


def test_a_zlib_compressed_mcount_loc_lists_its_sites_decompressed(many, tmp_path):
    squeezed = compressed(many, tmp_path / "zlib.o", "zlib")
    fields = readelf.relocated_fields(many, "__mcount_loc")  # readelf reads the uncompressed original
    got = listed(squeezed)
    assert sorted(a for p in got for a in p["addresses"]) == sorted(w for (_, _), [(_, w)] in fields.items())
    assert len(got) == 201


def test_a_compression_sdtgen_cannot_read_is_one_line_and_exit_2(many, tmp_path):
    squeezed = compressed(many, tmp_path / "zstd.o", "zstd")
    proc = sdtgen("probes", "--kind", "mcount", squeezed)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"{squeezed}: error: section __mcount_loc is compressed (SHF_COMPRESSED) with "
                           "compression type 2, which sdtgen does not read (zlib only); rebuild it with the section "
                           "uncompressed\n")
