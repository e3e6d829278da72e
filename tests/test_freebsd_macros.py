"""The rest of FreeBSD's SDT macros: _XLATE, SDT_PROBE_ARGTYPE, DTRACE_PROBEn, the six-argument limit,
and the build-time half of is-enabled checks (scan, gen, check).

fixtures/freebsd defines its probes as FreeBSD's network providers do; what it declares is read from
its C text (tools/probe_source.py), where the is-enabled calls are from readelf's relocations.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from helpers import ARCHES, FREEBSD, assemble, compile_c, cross_tool, partial_link, run, sdtgen
from probe_source import defined_probes

ISEN = "__dtrace_isenabled_"


def source_probes() -> dict[str, tuple]:
    """spec -> (native types, translated types or None each), as the C source declares them."""
    out = {}
    for p in defined_probes(FREEBSD):
        xargs = p.xargs or (None,) * len(p.args)
        out[p.spec] = (list(p.args), list(xargs))
    return out


@pytest.mark.parametrize("form", [
    'SDT_PROBE_DEFINE7(hk, a, b, c, "int", "int", "int", "int", "int", "int", "int");',
    'SDT_PROBE_DEFINE7_XLATE(hk, a, b, c, "int", "t", "int", "t", "int", "t", "int", "t", "int", "t", "int", "t", '
    '"int", "t");',
    "void f(int x) { SDT_PROBE7(hk, a, b, c, x, x, x, x, x, x, x); }",
    "void f(int x) { DTRACE_PROBE6(seven, int, x, int, x, int, x, int, x, int, x, int, x); }",
    'SDT_PROBE_DEFINE(hk, a, b, c); SDT_PROBE_ARGTYPE(hk, a, b, c, 6, "int", NULL);',
])
def test_a_seventh_argument_is_a_compile_error_saying_six(form, tmp_path):
    src = tmp_path / "seven.c"
    src.write_text(f"#include <sdt.h>\n{form}\n")
    include = sdtgen("include-dir", check=True).stdout.strip()
    proc = run(["gcc", "-c", f"-I{include}", "-o", str(tmp_path / "seven.o"), str(src)], check=False)
    assert proc.returncode != 0
    assert "supports" in proc.stderr and ("six" in proc.stderr or "five" in proc.stderr), proc.stderr


@pytest.mark.parametrize("form", ["call", "goto"])
@pytest.mark.parametrize("arch", ARCHES)
def test_freebsd_style_definitions_list_with_both_type_sets(arch, form, freebsd_kernel):
    build = freebsd_kernel(arch, **({"FORM": "goto"} if form == "goto" else {}))
    want = source_probes()
    for path in (build.partial, build.image):
        listed = json.loads(sdtgen("probes", "--json", path, check=True).stdout)["probes"]
        got = {f"{p['provider']}:{p['module']}:{p['function']}:{p['name']}": (p["args"], p["xargs"]) for p in listed}
        assert got == want, path
    sites = json.loads(sdtgen("scan", "--json", build.partial, check=True).stdout)["sites"]
    # the goto build: every SDT_PROBEn and DTRACE_PROBEn an asm goto, the is-enabled checks still calls
    assert {s["form"] for s in sites} == ({"goto", "isen"} if form == "goto" else {"call", "isen"})
    report = json.loads(sdtgen("check", "--json", build.partial, build.image, check=True).stdout)
    assert report["ok"] and report["stable"] == len(sites)


def test_dtrace_probes_are_provider_sdt_without_module_or_function(freebsd_kernel):
    listed = json.loads(sdtgen("probes", "--json", freebsd_kernel("x86_64").image, check=True).stdout)["probes"]
    anonymous = {p["name"]: (p["provider"], p["module"], p["function"]) for p in listed if p["provider"] == "sdt"}
    assert anonymous == {"route-hit": ("sdt", "", ""), "route-miss": ("sdt", "", "")}


def test_verbose_listing_shows_each_arguments_types(freebsd_kernel):
    out = sdtgen("probes", "-v", freebsd_kernel("x86_64").image, check=True).stdout
    for spec, (args, xargs) in source_probes().items():
        name = spec.rpartition(":")[2]
        block = out[out.index(f" {name} "):]
        block = block[:block.find("\n\n", block.index("Argument Types"))]
        lines = re.findall(r"args\[(\d)\]: (.*)", block)
        shown = [f"{x} (native: {a})" if x else a for a, x in zip(args, xargs, strict=True)]
        assert [text for _, text in lines] == shown, spec


def is_enabled_calls(build, arch_name: str) -> set[tuple[str, int]]:
    """(section, offset of the call) of every relocation against an is-enabled function, from readelf."""
    readelf = cross_tool(arch_name, "readelf")
    out = run([readelf, "-rW", str(build.dir / "hot.o")]).stdout
    section, found = "", set()
    for line in out.splitlines():
        m = re.match(r"Relocation section '\.rela?(\S+)'", line)
        if m:
            section = m.group(1)
        fields = line.split()
        if len(fields) >= 5 and fields[4].startswith(ISEN):
            offset = int(fields[0], 16)
            found.add((section, offset - 1 if arch_name in ("x86_64", "i386") else offset))  # x86: the opcode byte
    return found


@pytest.mark.parametrize("arch", ARCHES)
def test_scan_finds_every_is_enabled_call_as_its_own_form(arch, freebsd_kernel, tmp_path):
    build = freebsd_kernel(arch)
    # hot.o alone, so offsets are the compiler's, as readelf reads them.
    hot = tmp_path / "hot.o"
    shutil.copy(build.dir / "hot.o", hot)
    sites = json.loads(sdtgen("scan", "--json", hot, check=True).stdout)["sites"]
    isen = {(s["section"], s["offset"]) for s in sites if s["form"] == "isen"}
    assert isen == is_enabled_calls(build, arch) and len(isen) >= 2
    assert {s["probe"] for s in sites if s["form"] == "isen"} == {"hk:hot:loop:hash"}
    assert all(s["symbol"].startswith(ISEN) for s in sites if s["form"] == "isen")
    human = sdtgen("scan", hot, check=True).stdout
    assert len(re.findall(r"^hk:hot:loop:hash\s+isen\s", human, re.M)) == len(isen)


@pytest.mark.parametrize("arch", ARCHES)
def test_check_passes_the_built_image_and_fails_one_whose_is_enabled_call_is_gone(arch, freebsd_kernel, tmp_path):
    build = freebsd_kernel(arch)
    report = json.loads(sdtgen("check", "--json", build.partial, build.image, check=True).stdout)
    assert report["ok"] and report["stable"] == len(report["sites"])
    isen = sum(v["form"] == "isen" for v in report["sites"])
    assert report["isenabled"] == isen == len(is_enabled_calls(build, arch))
    # Overwrite one is-enabled call with NOPs, where objdump says the call is.
    broken, addr = without_an_is_enabled_call(build, arch, tmp_path)
    proc = sdtgen("check", "--json", build.partial, broken)
    assert proc.returncode != 0
    bad = [v for v in json.loads(proc.stdout)["sites"] if v["status"] != "stable"]
    assert [(v["probe"], v["form"]) for v in bad] == [("hk:hot:loop:hash", "isen")] and bad[0]["address"] == addr
    human = sdtgen("check", build.partial, broken)
    assert human.returncode != 0 and "hk:hot:loop:hash is-enabled check missing" in human.stderr, human.stderr


def without_an_is_enabled_call(build, arch: str, tmp_path):
    """A copy of the image with NOPs over the first is-enabled call objdump shows; (the copy, the call's address)."""
    dis = run([cross_tool(arch, "objdump"), "-d", str(build.image)]).stdout
    m = re.search(r"^\s*([0-9a-f]+):\s+([0-9a-f]{2}(?: [0-9a-f]{2})*|[0-9a-f]{8}|[0-9a-f]{4})\s.*<" + ISEN, dis, re.M)
    assert m, "objdump shows no call to an is-enabled function"
    addr, size = int(m.group(1), 16), len(m.group(2).replace(" ", "")) // 2
    data = bytearray(build.image.read_bytes())
    offset = file_offset(build.image, addr, arch)
    one = {"x86_64": b"\x90", "i386": b"\x90", "aarch64": bytes.fromhex("1f2003d5"),
           "riscv64": bytes.fromhex("13000000")}[arch]  # nop, as the ISA manuals encode it
    data[offset:offset + size] = one * (size // len(one))
    broken = tmp_path / "broken.elf"
    broken.write_bytes(bytes(data))
    return broken, addr


def file_offset(image, addr: int, arch: str) -> int:
    """The file offset of a virtual address, from readelf's program headers."""
    out = run([cross_tool(arch, "readelf"), "-lW", str(image)]).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            off, vaddr, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if vaddr <= addr < vaddr + filesz:
                return off + addr - vaddr
    raise AssertionError(f"{addr:#x} is in no LOAD segment")


@pytest.mark.parametrize("asm, what", [
    ("f: jmp __dtrace_isenabled_hk_a_b_c", "tail"),
    ("f: leaq __dtrace_isenabled_hk_a_b_c(%rip), %rax; ret", "address"),
])
def test_gen_refuses_an_is_enabled_reference_that_is_not_a_plain_call(asm, what, tmp_path):
    obj = assemble(tmp_path, "isen", f".text\n.globl f\n.type f, @function\n{asm}\n.size f, .-f\n")
    partial = partial_link(tmp_path, "partial", obj)
    proc = sdtgen("gen", partial, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2, proc.stderr
    assert "is not a plain call" in proc.stderr and ".text:f+0x" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()


@pytest.mark.parametrize("source, problem", [
    ('SDT_PROBE_ARGTYPE(hk, a, b, c, 0, "int", NULL);', "which no SDT_PROBE_DEFINE defines"),
    ('SDT_PROBE_DEFINE(hk, a, b, c); SDT_PROBE_ARGTYPE(hk, a, b, c, 1, "int", NULL);', "but not argument 0"),
])
def test_argument_types_without_their_probe_or_with_a_gap_are_refused(source, problem, tmp_path):
    obj = compile_c(tmp_path, "bad", f"#include <sdt.h>\n{source}\n")
    proc = sdtgen("scan", obj)
    assert proc.returncode == 2 and problem in proc.stderr, proc.stderr


def test_the_large_code_model_is_named_as_the_cause_not_the_use_of_the_macros(tmp_path):
    """-mcmodel=large loads every callee's address and calls through a register (objdump shows it), so even
    SDT_PROBE_ENABLED() becomes an address load: gen must say so, not tell the user to use the macro they used."""
    obj = compile_c(tmp_path, "large", '#include <sdt.h>\nSDT_PROBE_DEFINE1(hk, a, b, c, "int");\n'
                    "int f(int x) { if (SDT_PROBE_ENABLED(hk, a, b, c)) SDT_PROBE1(hk, a, b, c, x); return x; }\n",
                    "-mcmodel=large")
    dis = run(["objdump", "-dr", str(obj)]).stdout
    assert "R_X86_64_64\t__dtrace_isenabled_hk_a_b_c" in dis and "call   *%" in dis
    partial = partial_link(tmp_path, "partial", obj)
    proc = sdtgen("gen", partial, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    (line,) = proc.stderr.splitlines()
    assert proc.returncode == 2 and "absolute address load of __dtrace_isenabled_hk_a_b_c" in line
    assert "-mcmodel=large" in line and "code model that calls directly" in line
    assert "use it only through SDT_PROBE_ENABLED()" not in line
