"""sdtgen scan: every relocation against a probe symbol, as readelf sees it."""

from __future__ import annotations

import json
import re

from helpers import assemble, compile_c, need_tool, partial_link, readelf_probe_relocs, run, sdtgen


def test_scan_finds_exactly_the_sites_readelf_shows(kernel):
    data = json.loads(sdtgen("scan", kernel.partial, "--json", check=True).stdout)
    expected = readelf_probe_relocs(kernel.partial)
    assert len(expected) >= 20
    got = sorted((s["section"], s["offset"] + 1, s["reloc"], s["symbol"]) for s in data["sites"])
    assert got == sorted(expected)  # offset is the instruction's: one byte before the rel32 field


def test_scan_reports_instruction_forms_and_text_offsets(kernel):
    data = json.loads(sdtgen("scan", kernel.partial, "--json", check=True).stdout)
    assert data["arch"] == "x86_64" and data["object"] == str(kernel.partial)
    objdump = run(["objdump", "-d", "--no-show-raw-insn", str(kernel.partial)]).stdout
    for site in data["sites"]:
        assert site["section"] == ".text" and site["text_offset"] == site["offset"]
        line = next(ln for ln in objdump.splitlines() if re.match(rf"\s*{site['offset']:x}:\s", ln))
        mnemonic = line.split("\t")[1].split()[0]
        assert {"call": "call", "tail": "jmp"}[site["form"]] == mnemonic, line
    by_probe = {s["probe"]: s for s in data["sites"]}
    assert by_probe["hk:proc:exit:done"]["form"] == "tail"  # last statement of a void function
    assert by_probe["hk:proc:exec:exec-success"]["symbol"] == "__dtrace_sdt_hk_proc_exec_exec__success"
    assert sum(s["probe"] == "hk:lib:ref:acquire" for s in data["sites"]) == 4  # inlined in four callers
    assert by_probe["hk:mem:alloc:fail"]["function"].startswith("kmem_fail+")  # the cold path


def test_human_output_lists_each_site(kernel):
    out = sdtgen("scan", kernel.partial, check=True).stdout
    assert out.splitlines()[0] == f"{kernel.partial}: x86_64, 21 sites of 18 probes"
    assert re.search(r"hk:proc:exit:done\s+tail\s+\.text\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+R_X86_64_PLT32\s+proc_exit\+",
                     out)


def test_cold_path_outside_text_without_the_partial_script(tmp_path):
    src = """
    #include <sdt.h>
    SDT_PROBE_DEFINE1(t, m, f, oops, "int");
    __attribute__((cold, noinline)) int oops(int x) { SDT_PROBE1(t, m, f, oops, x); return -x; }
    """
    obj = compile_c(tmp_path, "cold", src)
    site = json.loads(sdtgen("scan", obj, "--json", check=True).stdout)["sites"][0]
    assert site["section"] == ".text.unlikely" and site["text_offset"] is None
    merged = partial_link(tmp_path, "merged", obj)
    site = json.loads(sdtgen("scan", merged, "--json", check=True).stdout)["sites"][0]
    assert site["section"] == ".text" and site["text_offset"] == site["offset"]


def test_every_reference_is_listed_with_its_form(tmp_path):
    obj = assemble(tmp_path, "refs", """
        .text
        .globl f
    f:  lea __dtrace_sdt_t_m_f_n(%rip), %rax
        call __dtrace_sdt_t_m_f_n
        jne __dtrace_sdt_t_m_f_n
        ret
        .data
        .quad __dtrace_sdt_t_m_f_n
    """)
    sites = json.loads(sdtgen("scan", obj, "--json", check=True).stdout)["sites"]
    forms = sorted((s["section"], s["form"], s["detail"]) for s in sites)
    assert forms == [(".data", "ref", "data reference"),
                     (".text", "call", "call rel32"),
                     (".text", "cond", "conditional tail jump (jcc rel32)"),
                     (".text", "ref", "PC-relative address load")]
    assert [s["offset"] for s in sites if s["form"] == "cond"] == [12]  # the jcc, not its rel32 field


def test_prefix_finds_fentry_call_sites(tmp_path):
    """Another convention through --prefix: ftrace's calls to a defined __fentry__."""
    need_tool("gcc", "gcc")
    traced = compile_c(tmp_path, "traced", "int a(int x) { return x + 1; }\nint b(int x) { return x * 3; }\n",
                       "-pg", "-mfentry")
    fentry = compile_c(tmp_path, "fentry", "void __fentry__(void) {}\n")
    vmlinux = partial_link(tmp_path, "vmlinux", traced, fentry)
    sites = json.loads(sdtgen("scan", vmlinux, "--prefix", "__fentry__", "--json", check=True).stdout)["sites"]
    assert sorted(s["function"] for s in sites) == ["a+0x0", "b+0x0"]
    assert {s["symbol"] for s in sites} == {"__fentry__"} and {s["form"] for s in sites} == {"call"}


def test_object_without_probes_has_no_sites(tmp_path):
    obj = compile_c(tmp_path, "plain", "int f(int x) { return x; }\n")
    data = json.loads(sdtgen("scan", obj, "--json", check=True).stdout)
    assert data["sites"] == []
