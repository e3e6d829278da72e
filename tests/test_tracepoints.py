"""The asm goto form's records (FreeBSD 15's set_sdt_tracepoint_set): scan reads each one through its
relocations exactly as readelf -r resolves them (a section symbol plus an addend on x86-64 and AArch64, a
local label on RISC-V, the addend in the word on i386), the patch point is the one NOP objdump shows there,
and the target is code that calls the probe's recorder; several records for one probe where inline code was
duplicated, targets in .text.unlikely, and damaged or foreign records refused in one line."""

from __future__ import annotations

import json
import re

import pytest
from helpers import (
    ARCHES,
    assemble,
    cross_tool,
    include_flag,
    readelf_relocs,
    readelf_sections,
    readelf_symbols,
    run,
    sdtgen,
)
from toolchain import kernel_cflags

from sdtgen import arch as arches

SOURCE = r"""
#include <sdt.h>

SDT_PROBE_DEFINE2(t, hot, loop, item, "int", "unsigned int");
SDT_PROBE_DEFINE1(t, inl, ref, take, "int");
SDT_PROBE_DEFINE1(t, mem, alloc, fail, "long");

unsigned int expensive(unsigned int x);

long loop(int n, const unsigned int *p)
{
	long sum = 0;

	for (int i = 0; i < n; i++) {
		sum += p[i];
		SDT_PROBE2(t, hot, loop, item, i, expensive(p[i]));  /* evaluated only out of line */
	}
	return sum;
}

static inline __attribute__((always_inline)) int take(int x)
{
	SDT_PROBE1(t, inl, ref, take, x);  /* one record for each copy the compiler makes */
	return x + 1;
}

int first(int x) { return take(x) * 3; }
int second(int x) { return take(x + 7) - 2; }

__attribute__((cold, noinline)) long fail(long size)  /* cold: the whole function in .text.unlikely */
{
	SDT_PROBE1(t, mem, alloc, fail, size);
	return -size;
}

int direct(int x)
{
	DTRACE_PROBE1(anon, int, x);
	return x;
}
"""

NOP_MNEMONIC = {"x86_64": "nop", "i386": "nop", "aarch64": "nop", "riscv64": "nop"}
SET = "set_sdt_tracepoint_set"


def compile_goto(tmp, arch: str, source: str = SOURCE, name: str = "goto", *flags: str):
    src, obj = tmp / f"{name}.c", tmp / f"{name}.o"
    src.write_text(source)
    run([cross_tool(arch, "gcc"), *kernel_cflags(arch), "-DSDT_ASM_GOTO", include_flag(), *flags, "-c", "-o",
         str(obj), str(src)])
    return obj


def readelf_records(obj, arch: str) -> list[tuple[str, tuple[str, int], tuple[str, int]]]:
    """(probe word's symbol, (section, offset) of the patch point, of the target) of every record, resolved
    from readelf -rW (a section symbol's or label's value from readelf -sW plus the addend; the addend of a REL
    object from the word's own bytes) and readelf's section headers."""
    a = arches.by_name(arch)
    word = a.bits // 8
    sections = readelf_sections(obj)
    symbols = readelf_symbols(obj)
    (index,) = [i for i, (name, *_) in enumerate(sections) if name == SET]
    data = obj.read_bytes()
    base = sections[index][2]
    fields: dict[int, tuple[str, int]] = {}
    for rsec, offset, sym, _, tname, addend in readelf_relocs(obj, a.bits):
        if rsec.removeprefix(".rela").removeprefix(".rel") != SET:
            continue
        assert tname == a.reloc_name(a.abs_word), tname  # FreeBSD's asm: absolute words only
        if addend is None:  # REL: the addend is the word itself
            addend = int.from_bytes(data[base + offset:base + offset + word], "little", signed=True)
        value, _, _, _, ndx, name = symbols[sym]
        fields[offset] = (name, 0) if ndx == "UND" else (sections[int(ndx)][0], value + addend)
    size = sections[index][3]
    assert size % (4 * word) == 0
    out = []
    for at in range(0, size, 4 * word):
        assert at + 3 * word not in fields and not any(data[base + at + 3 * word:base + at + 4 * word])
        out.append((fields[at][0], fields[at + word], fields[at + 2 * word]))
    return out


def objdump_lines(obj, arch: str) -> dict[tuple[str, int], str]:
    """(section, offset) -> the instruction objdump -dr decodes there (with the relocations it lists)."""
    out, section, last = {}, None, None
    for line in run([cross_tool(arch, "objdump"), "-dr", "-w", str(obj)]).stdout.splitlines():
        m = re.match(r"Disassembly of section (\S+):", line)
        if m:
            section = m[1]
            continue
        m = re.match(r"\s*([0-9a-f]+):\s+(?:[0-9a-f]{2,8} )+\s*(.*)$", line)
        if m and section:
            last = (section, int(m[1], 16))
            out[last] = m[2].strip()
        elif last and re.match(r"\s+[0-9a-f]+: R_", line):
            out[last] += " ;" + line.strip()
    return out


def scanned(obj) -> list[dict]:
    return json.loads(sdtgen("scan", "--json", obj, check=True).stdout)["sites"]


@pytest.mark.parametrize("arch", ARCHES)
def test_scan_reads_each_record_as_readelf_resolves_its_relocations(tmp_path, arch):
    obj = compile_goto(tmp_path, arch)
    records = readelf_records(obj, arch)
    gotos = [s for s in scanned(obj) if s["form"] == "goto"]
    assert sorted((s["symbol"], (s["section"], s["offset"]), (s["target_section"], s["target"])) for s in gotos) \
        == sorted(("__dtrace_" + probe, patch, target) for probe, patch, target in records)
    per_probe = {}
    for probe, _, _ in records:
        per_probe[probe] = per_probe.get(probe, 0) + 1
    assert per_probe["sdt_t_inl_ref_take"] >= 2  # take() inlined twice: a record for each copy
    fail = next(s for s in gotos if s["probe"] == "t:mem:alloc:fail")
    assert fail["section"] == fail["target_section"] == ".text.unlikely" and fail["text_offset"] is None


@pytest.mark.parametrize("arch", ARCHES)
def test_each_patch_point_is_one_nop_and_each_target_code_that_calls_the_recorder(tmp_path, arch):
    obj = compile_goto(tmp_path, arch)
    code = objdump_lines(obj, arch)
    length = len(arches.by_name(arch).goto_nop)
    for s in (s for s in scanned(obj) if s["form"] == "goto"):
        nop = code[(s["section"], s["offset"])]
        assert nop.split()[0].startswith(NOP_MNEMONIC[arch]), nop
        following = sorted(o for sec, o in code if sec == s["section"] and o > s["offset"])
        assert following[0] == s["offset"] + length  # one instruction of the NOP's length, no more
        after = [text for (sec, o), text in sorted(code.items()) if sec == s["target_section"] and o >= s["target"]]
        assert (s["target_section"], s["target"]) in code  # an instruction starts there
        calls = next(t for t in after if "__sdt_rec_" in t)  # its first call out is to the recorder
        assert f"__sdt_rec_{s['symbol']}" in calls, (s, calls)


@pytest.mark.parametrize("arch", ["x86_64", "riscv64"])
def test_a_partial_link_of_several_objects_keeps_every_record_and_scan_reads_them_all(tmp_path, arch):
    """Plain ld -r (section-name order, .text.unlikely kept apart), two objects: records back to back in one
    set, each with its relocations (RISC-V's labels carried over as local symbols)."""
    one = compile_goto(tmp_path, arch)
    two = compile_goto(tmp_path, arch, SOURCE.replace("long loop(", "long loop2(").replace("int first(", "int f1(")
                       .replace("int second(", "int f2(").replace("long fail(", "long fail2(")
                       .replace("int direct(", "int direct2("), "two")
    merged = tmp_path / "merged.o"
    run([cross_tool(arch, "ld"), "-r", "-o", str(merged), str(one), str(two)])
    records = readelf_records(merged, arch)
    assert len(records) == len(readelf_records(one, arch)) * 2
    gotos = [s for s in scanned(merged) if s["form"] == "goto"]
    assert sorted((s["symbol"], (s["section"], s["offset"]), (s["target_section"], s["target"])) for s in gotos) \
        == sorted(("__dtrace_" + probe, patch, target) for probe, patch, target in records)


# -- targets in another section, and records that are not the form ---------------------------------------
COLD_ARGUMENT = r"""
#include <sdt.h>
SDT_PROBE_DEFINE1(t, cold, arg, hit, "long");
__attribute__((cold, noinline)) long cold_arg(long x) { return x * 7; }
long hot(long x) { SDT_PROBE1(t, cold, arg, hit, cold_arg(x)); return x + 1; }
"""


def test_gcc_puts_the_out_of_line_code_of_a_cold_argument_in_text_unlikely(tmp_path):
    """An argument that calls a cold function: gcc moves the path behind the label to hot.cold in
    .text.unlikely, so the record's target is another section's than its NOP, and the fixture's partial
    script keeps them apart no more (one .text) while plain ld -r does."""
    obj = compile_goto(tmp_path, "x86_64", COLD_ARGUMENT, "cold")
    ((probe, patch, target),) = readelf_records(obj, "x86_64")
    assert probe == "sdt_t_cold_arg_hit"
    assert patch[0] == ".text" and target[0] == ".text.unlikely"
    code = objdump_lines(obj, "x86_64")
    assert "__sdt_rec___dtrace_sdt_t_cold_arg_hit" in " ".join(
        t for (sec, o), t in code.items() if sec == ".text.unlikely" and o >= target[1])
    (site,) = scanned(obj)
    assert (site["section"], site["offset"], site["target_section"], site["target"]) == (*patch, *target)
    merged = tmp_path / "merged.o"
    run(["ld", "-r", "-T", sdtgen("linker-script", "partial", "--path", check=True).stdout.strip(), "-o",
         str(merged), str(obj)])
    (site,) = scanned(merged)
    assert site["section"] == site["target_section"] == ".text" and site["target"] > site["offset"]
X86_RECORD = """
    .text
    .globl hot
hot:
0:  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
1:  ret
    .section .text.unlikely, "ax"
out_of_line:
    call __sdt_rec___dtrace_sdt_t_x_y_z
    jmp 1b
    .pushsection set_sdt_tracepoint_set, "aw"
    .quad sdt_t_x_y_z, 0b, out_of_line, {last}
    .popsection
"""


def test_a_target_in_text_unlikely_is_read_and_anchored_there(tmp_path):
    """The compiler's cold partition (f.cold in .text.unlikely) holding a site's out-of-line code: the
    record's target is another section's, and gen anchors it there."""
    obj = assemble(tmp_path, "cold", X86_RECORD.format(last=0))
    (site,) = scanned(obj)
    assert (site["section"], site["offset"], site["target_section"], site["target"]) == \
        (".text", 0, ".text.unlikely", 0) and site["form"] == "goto"
    stubs, table = tmp_path / "s.c", tmp_path / "t.S"
    sdtgen("gen", obj, "--stubs", stubs, "--table", table, check=True)
    anchors = {name: (ndx, value) for value, _, _, _, ndx, name in readelf_symbols(obj)
               if name.startswith("__sdt_site_")}
    sections = [name for name, *_ in readelf_sections(obj)]
    assert sorted((sections[int(ndx)], value) for ndx, value in anchors.values()) == [(".text", 0),
                                                                                     (".text.unlikely", 0)]
    proc = sdtgen("gen", obj, "--mode", "offset", "--stubs", stubs, "--table", table)
    assert proc.returncode == 2 and "asm goto target (.text.unlikely+0x0) is outside .text" in proc.stderr


@pytest.mark.parametrize("body, problem", [
    (X86_RECORD.format(last=1), "the last word of the asm goto record at set_sdt_tracepoint_set+0x0 is not 0"),
    (X86_RECORD.format(last=0).replace(".quad sdt_t_x_y_z, 0b, out_of_line, 0",
                                       ".quad sdt_t_x_y_z, 0b, out_of_line"),
     "set_sdt_tracepoint_set is 24 bytes, not a whole number of 32-byte asm goto records"),
    (X86_RECORD.format(last=0).replace(".quad sdt_t_x_y_z, 0b,", ".quad sdt_t_x_y_z\n.long 0b - ., 0\n.quad"),
     "the patch point word of the asm goto record at set_sdt_tracepoint_set+0x0 is relocated by type 2"),
    (X86_RECORD.format(last=0).replace(".quad sdt_t_x_y_z,", ".quad 0,"),
     "the probe word of the asm goto record at set_sdt_tracepoint_set+0x0 has no relocation"),
    (X86_RECORD.format(last=0).replace(".quad sdt_t_x_y_z,", ".quad memcpy,"),
     "names memcpy, not a probe"),
    (X86_RECORD.format(last=0).replace("0b, out_of_line", "0b, elsewhere"),
     "the target of the asm goto record at set_sdt_tracepoint_set+0x0 is elsewhere, outside the object's code"),
])
def test_a_damaged_record_is_refused_in_one_line(tmp_path, body, problem):
    obj = assemble(tmp_path, "bad", body)
    for cmd in (["scan", obj], ["gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S"]):
        proc = sdtgen(*cmd)
        assert proc.returncode == 2 and problem in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "s.c").exists()


@pytest.mark.parametrize("nop, what", [
    ("nop; nop; nop; nop; nop", "holding 90 90 90 90 90, not the one 5-byte NOP (0f 1f 44 00 00)"),
    (".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "whose probe sdt_t_x_y_z the object defines itself"),
])
def test_gen_refuses_an_asm_goto_it_cannot_arm_and_scan_still_lists_it(tmp_path, nop, what):
    """FreeBSD's own objects: five 1-byte NOPs on x86 (a jump written over them lands mid-NOP for a CPU between
    two), and a probe word naming FreeBSD's struct sdt_probe, whose out-of-line code calls its sdt_probe."""
    body = X86_RECORD.format(last=0).replace(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", nop)
    if "defines" in what:
        body += "\n.data\n.globl sdt_t_x_y_z\nsdt_t_x_y_z: .quad 0\n"
    obj = assemble(tmp_path, "foreign", body)
    (site,) = scanned(obj)
    assert site["form"] == "ref" and what in site["detail"]
    proc = sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2 and what in proc.stderr and "so arming cannot write a jump over it" in proc.stderr
    assert not (tmp_path / "s.c").exists()


@pytest.mark.parametrize("arch, kind", [("x86_64", "SECTION"), ("aarch64", "SECTION"), ("i386", "SECTION"),
                                        ("riscv64", "NOTYPE")])
def test_patch_points_and_targets_are_relocated_as_each_architecture_does_it(tmp_path, arch, kind):
    """A section symbol plus an addend (i386: REL, the addend in the word, which the main test reads back), a
    local .L label on RISC-V, whose relaxation moves code after the assembler is done."""
    obj = compile_goto(tmp_path, arch)
    symbols = readelf_symbols(obj)
    rows = [r for r in readelf_relocs(obj, arches.by_name(arch).bits) if r[0].endswith(SET)]
    word = arches.by_name(arch).bits // 8
    code = [symbols[sym] for _, offset, sym, *_ in rows if offset % (4 * word) in (word, 2 * word)]
    assert code and {c[2] for c in code} == {kind}
    if arch == "riscv64":
        assert all(c[5].startswith(".L") for c in code)
    assert all(r[5] is None for r in rows) == (arch == "i386")  # only i386's relocations are REL


def test_probes_lists_an_object_whose_only_probes_are_asm_goto_records(tmp_path):
    """No descriptor and no call: the records alone make the object one with probes, named from their word."""
    obj = assemble(tmp_path, "bare", X86_RECORD.format(last=0))
    (probe,) = json.loads(sdtgen("probes", "--json", obj, check=True).stdout)["probes"]
    assert (probe["provider"], probe["name"], probe["sites"]) == ("t", "x_y_z", 1)


@pytest.mark.parametrize("arch", ARCHES)
def test_the_linked_set_is_aligned_whatever_ends_before_it(arch_kernel, arch):
    """The asm aligns nothing (its section's alignment is 1) and the site table before it ends on a 4-byte
    boundary (20-byte entries): sdt_data.ld aligns the set to 8, and its records read whole from there."""
    k = arch_kernel(arch, FORM="goto")
    sections = {s[0]: s for s in readelf_sections(k.image)}
    lines = run(["readelf", "-SW", str(k.image)]).stdout
    addr = int(re.search(rf"{SET}\s+PROGBITS\s+([0-9a-f]+)", lines)[1], 16)
    sites = re.search(r"set_sdt_sites_set\s+PROGBITS\s+([0-9a-f]+)\s+\S+\s+([0-9a-f]+)", lines)
    assert addr % 8 == 0 and SET in sections
    assert (int(sites[1], 16) + int(sites[2], 16)) % 8 == 4  # the site table did end off the boundary
    word = arches.by_name(arch).bits // 8
    assert sections[SET][3] == 20 * 4 * word  # twenty records, none padded
    (line,) = [ln for ln in run(["readelf", "-SW", str(k.dir / "vfs.o")]).stdout.splitlines() if f" {SET} " in ln]
    assert line.split()[-1] == "1"  # Al: the compiler's records ask for no alignment
