"""sdtgen gen: stub C and the linker-set table, in both table modes."""

from __future__ import annotations

import re
import shutil

import pytest
from helpers import (
    FIXTURE,
    SDTGEN,
    assemble,
    compile_c,
    compile_runtime,
    final_link,
    need_tool,
    partial_link,
    readelf_probe_relocs,
    run,
    sdtgen,
)

from sdtgen.elf.reader import ElfFile


def symbols(path) -> dict[str, int]:
    with ElfFile(path) as elf:
        return {s.name: s.value for s in elf.symbols if s.name}


def test_stubs_define_every_probe_once(kernel):
    text = kernel.stubs.read_text()
    defined = re.findall(r"SDT_STUB void (\w+)\(void\)", text)
    scanned = {ln.split()[-1] for ln in run(["nm", "-u", str(kernel.partial)]).stdout.splitlines()}
    assert sorted(defined) == sorted(s for s in scanned if s.startswith("__dtrace_sdt_"))
    assert "__dtrace_sdt_raw_checksum" in defined  # called without the macros


def test_every_stub_has_its_own_address_even_under_icf(kernel, tmp_path):
    need_tool("ld.gold", "binutils")
    objs = compile_runtime(tmp_path, "k", kernel.stubs, kernel.table, "x86_64", "-ffunction-sections")
    image = tmp_path / "icf.elf"
    run(["ld.gold", "--icf=all", "-e", "0", "-o", str(image), str(kernel.partial), *map(str, objs)])
    addrs = {n: a for n, a in symbols(image).items() if n.startswith("__dtrace_sdt_")}
    assert len(addrs) == 18 and len(set(addrs.values())) == len(addrs)


def test_reloc_mode_anchors_each_site_in_the_object(kernel):
    sites = [ln for ln in sdtgen("scan", kernel.partial, check=True).stdout.splitlines()[2:]]
    anchors = {n: v for n, v in symbols(kernel.partial).items() if n.startswith("__sdt_site_")}
    assert len(anchors) == len(sites) == 21
    table = kernel.table.read_text()
    assert table.count("\t.4byte __sdt_site_") == 21
    assert "btext" not in table


def test_offset_mode_stores_offsets_from_btext(kernel_offset):
    table = kernel_offset.table.read_text()
    offsets = [int(x, 16) for x in re.findall(r"\.4byte btext \+ (0x[0-9a-f]+) - \.", table)]
    # readelf's relocated fields in .text, one byte after each call/jmp opcode.
    fields = sorted(off for sec, off, _, _ in readelf_probe_relocs(kernel_offset.partial) if sec == ".text")
    assert offsets == [f - 1 for f in fields] and len(offsets) == 21
    assert not any(n.startswith("__sdt_site_") for n in symbols(kernel_offset.partial))


def test_gen_twice_gives_identical_outputs_and_leaves_them_alone(kernel, tmp_path):
    obj = tmp_path / "k.o"
    shutil.copy(kernel.partial, obj)
    first = [tmp_path / "a.c", tmp_path / "a.S"]
    sdtgen("gen", obj, "--stubs", first[0], "--table", first[1], check=True)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in [*first, obj]}
    sdtgen("gen", obj, "--stubs", first[0], "--table", first[1], check=True)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in [*first, obj]} == before


def test_object_with_no_probes_gives_an_empty_valid_table(tmp_path):
    obj = partial_link(tmp_path, "k", compile_c(tmp_path, "plain", "int kmain(int x) { return x * 2; }\n"))
    image = final_link(tmp_path, obj)
    assert sdtgen("check", obj, image, check=True).returncode == 0
    out = sdtgen("probes", image, check=True).stdout
    assert out.strip() == "ID  PROVIDER  MODULE  FUNCTION  NAME  SITES  ARGS"


@pytest.mark.parametrize("mode", ["reloc", "offset"])
def test_refuses_references_that_are_not_calls(tmp_path, mode):
    obj = assemble(tmp_path, "ref", """
        .text
    f:  lea __dtrace_sdt_t_m_f_n(%rip), %rax
        ret
    """)
    proc = sdtgen("gen", obj, "--mode", mode, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2
    assert ".text+0x3: PC-relative address load of __dtrace_sdt_t_m_f_n is not a call or jump" in proc.stderr
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()


def test_refuses_a_probe_symbol_that_is_not_a_c_identifier(tmp_path):
    obj = assemble(tmp_path, "evil", """
        .text
    f:  call "__dtrace_sdt_x;y\\n#z"
        ret
    """)
    proc = sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2 and "is not a valid C identifier" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()


def test_offset_mode_needs_sites_in_text(tmp_path):
    src = "#include <sdt.h>\n__attribute__((cold)) void c(void) { SDT_PROBE0(a, b, c, d); }\n"
    obj = compile_c(tmp_path, "cold", src)
    proc = sdtgen("gen", obj, "--mode", "offset", "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2 and "outside .text" in proc.stderr and "linker-script partial" in proc.stderr


UNDEFINED = """#include <sdt.h>
SDT_PROBE_DEFINE1(t, m, f, defined, "int");
int f(int x) {
    SDT_PROBE1(t, m, f, defined, x);
    if (x > 3) SDT_PROBE1(t, m, f, defnied, x);   /* a typo: a probe nothing defines */
    SDT_PROBE1(t, m, f, defnied, x + 1);
    return x;
}
"""


def first_call_place(obj, symbol: str) -> str:
    """section:function+0xoff of the first call to ``symbol``, from objdump's disassembly of the object."""
    func_at, func = {}, None
    for line in run(["objdump", "-dr", "--no-show-raw-insn", str(obj)]).stdout.splitlines():
        m = re.match(r"^([0-9a-f]+) <(\w+)>:$", line)
        if m:
            func = m.group(2)
            func_at[func] = int(m.group(1), 16)
        m = re.match(r"^\s+([0-9a-f]+):\s+R_X86_64_PLT32\s+(\S+)-0x4$", line)
        if m and m.group(2) == symbol:
            return f".text:{func}+{int(m.group(1), 16) - 1 - func_at[func]:#x}"
    raise AssertionError(f"no call to {symbol}")


def test_a_probe_used_without_a_definition_warns_once_naming_its_first_site(tmp_path):
    obj = compile_c(tmp_path, "typo", UNDEFINED)
    proc = sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 0
    lines = proc.stderr.strip().splitlines()
    symbol = "__dtrace_sdt_t_m_f_defnied"
    assert lines == [ln for ln in lines if f"{obj}: warning: {first_call_place(obj, symbol)}: probe {symbol} " in ln]
    assert len(lines) == 1 and "SDT_PROBE_DEFINE" in lines[0]
    assert (tmp_path / "t.S").exists()


def test_strict_makes_an_undefined_probe_an_error_and_writes_nothing(tmp_path):
    obj = compile_c(tmp_path, "typo", UNDEFINED)
    before = obj.read_bytes()
    proc = sdtgen("gen", obj, "--strict", "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert f"{obj}: error: {first_call_place(obj, '__dtrace_sdt_t_m_f_defnied')}: probe " in line
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists() and obj.read_bytes() == before


def test_strict_accepts_an_object_whose_probes_are_all_defined(tmp_path):
    obj = compile_c(tmp_path, "ok", UNDEFINED.replace("defnied", "defined"))
    proc = sdtgen("gen", obj, "--strict", "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 0 and proc.stderr == ""


def test_sdt_strict_in_the_makefile_stops_the_build_at_an_undefined_probe(tmp_path):
    # The fixture calls __dtrace_sdt_raw_checksum directly, with no SDT_PROBE_DEFINE.
    proc = run(["make", "-C", str(FIXTURE), f"O={tmp_path}", f"SDTGEN={SDTGEN}", "SDT_STRICT=1"], check=False)
    assert proc.returncode != 0
    assert "error: .text:kchecksum+" in proc.stderr and "__dtrace_sdt_raw_checksum" in proc.stderr
    assert not (tmp_path / "kernel.elf").exists() and not (tmp_path / "kernel.o").exists()
