"""A conditional tail jump to a probe (clang -Os): returns when taken, fires only when taken."""

from __future__ import annotations

import io
import json

import pytest
from helpers import need_tool, run, sdtgen

from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

SOURCE = """#include <sdt.h>
SDT_PROBE_DEFINE1(hk, cc, check, big, "unsigned long");
void check_big(unsigned long x) { if (x > 3) SDT_PROBE1(hk, cc, check, big, x); }
unsigned long kmain(unsigned long x) { check_big(x); check_big(x * 2); return x + 1; }
unsigned long echo(unsigned long x) { return 10 * x + 1; }
"""


# Two conditional tail sites of two probes, each with its own condition and displacement.
TWO = """#include <sdt.h>
SDT_PROBE_DEFINE1(hk, cc, check, big, "unsigned long");
SDT_PROBE_DEFINE1(hk, cc, check, small, "unsigned long");
void check_big(unsigned long x) { if (x > 3) SDT_PROBE1(hk, cc, check, big, x); }
void check_small(unsigned long x) { if (x < 100) SDT_PROBE1(hk, cc, check, small, x); }
unsigned long kmain(unsigned long x) { check_big(x); check_small(x); return x + 1; }
"""


def build(tmp, arch: str, source: str = SOURCE):
    """The source through clang -Os for ``arch``, linked as sdtgen.mk links a kernel (runtime by gcc)."""
    from helpers import compile_runtime, cross_tool, final_script
    from toolchain import kernel_cflags

    from sdtgen import arch as arches

    need_tool("clang", "clang")
    include = sdtgen("include-dir", check=True).stdout.strip()
    (tmp / "cc.c").write_text(source)
    obj = tmp / "cc.o"
    flags = [f for f in kernel_cflags(arch) if not f.startswith("-O")]
    run(["clang", f"--target={arches.by_name(arch).toolchain.triple}", *flags, "-Os", f"-I{include}", "-c", "-o",
         str(obj), str(tmp / "cc.c")])
    ld = cross_tool(arch, "ld") if arch != "x86_64" else "ld"
    partial = tmp / "kernel.o"
    run([ld, "-r", "-T", sdtgen("linker-script", "partial", "--path", check=True).stdout.strip(), "-o",
         str(partial), str(obj)])
    stubs, table = tmp / "stubs.c", tmp / "table.S"
    sdtgen("gen", partial, "--stubs", stubs, "--table", table, check=True)
    image = tmp / "cc.elf"
    run([ld, "-T", str(final_script(tmp / "final.ld", arch)), "-o", str(image), str(partial),
         *map(str, compile_runtime(tmp, "k", stubs, table, arch))])
    return partial, image


@pytest.fixture(scope="module", params=["x86_64", "i386"])
def image(tmp_path_factory, request):
    return build(tmp_path_factory.mktemp(f"cond-{request.param}"), request.param)


def test_clang_os_emits_a_conditional_tail_jump_to_the_probe(image):
    partial, _ = image
    from helpers import cross_tool

    elf = json.loads(sdtgen("scan", partial, "--json", check=True).stdout)
    objdump = run([cross_tool(elf["arch"], "objdump") if elf["arch"] != "x86_64" else "objdump", "-d",
                   str(partial)]).stdout
    sites = json.loads(sdtgen("scan", partial, "--json", check=True).stdout)["sites"]
    cond = [s for s in sites if s["form"] == "cond"]
    assert cond and cond[0]["length"] == 6
    line = next(ln for ln in objdump.splitlines() if ln.strip().startswith(f"{cond[0]['offset']:x}:"))
    assert "\tj" in line and "jmp" not in line  # a jcc
    assert sdtgen("check", partial, image[1]).returncode == 0


def events(buf: io.StringIO) -> list[dict]:
    out = [json.loads(x) for x in buf.getvalue().splitlines()]
    buf.seek(0)
    buf.truncate()
    return out


@pytest.mark.parametrize("arm", ["trap", "branch"])
def test_disarmed_it_returns_and_armed_it_fires_only_when_taken(image, arm):
    buf = io.StringIO()
    s = open_session("emulator", str(image[1]), Reporter(as_json=True, out=buf), arm=arm)
    try:
        assert events(buf)[0]["sites"] >= 1
        assert s.run("check_big:void", [9]) is None and s.run("kmain", [9]) == 10
        assert [e for e in events(buf) if e["event"] == "fire"] == []
        s.enable("hk:cc:check:big")
        s.run("check_big:void", [2])  # condition false: falls through, no firing
        s.run("check_big:void", [9])
        assert s.run("kmain", [2]) == 3  # 2 does not fire, 4 does
        fires = [e["args"] for e in events(buf) if e["event"] == "fire"]
        assert fires == [[9], [4]]
        s.disable("hk:cc:check:big")
        assert s.run("kmain", [9]) == 10
        assert [e for e in events(buf) if e["event"] == "fire"] == []
    finally:
        s.close()


def test_an_action_on_a_conditional_tail_site_gets_its_arguments(image):
    """The host reads a conditional tail site's arguments as at a function's entry (i386: on the stack above the
    return address the jump leaves there, as for a tail jump), and calls the action with them."""
    proc = sdtgen("boot", image[1], "--json", "--enable", "hk:cc:check:big", "--action", "hk:cc:check:big=echo",
                  "--run", "check_big:void", "--arg", "9", "--run", "check_big:void", "--arg", "2")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    # check_big's own site, its jcc (kmain's inlined copies are not run here)
    assert [e["args"] for e in events if e["event"] == "fire"] == [[9]]  # taken once: 2 falls through
    assert [e["value"] for e in events if e["event"] == "action"] == [91]


def test_branch_arming_sends_the_jcc_to_the_recorder_and_disarming_puts_it_back(image):
    s = open_session("emulator", str(image[1]), Reporter(as_json=True, out=io.StringIO()), arm="branch")
    try:
        (site,) = [x for x in s.target.runtime.sites if x.form == "cond"]
        cs = s.image.arch.disassembler()
        original = s.target.machine.read(site.addr, 6)
        before = next(cs.disasm(original, site.addr))
        s.enable("hk:cc:check:big")
        after = next(cs.disasm(s.target.machine.read(site.addr, 6), site.addr))
        recorder = s.image.symbols["__sdt_rec___dtrace_sdt_hk_cc_check_big"].value
        assert (after.mnemonic, int(after.op_str, 16)) == (before.mnemonic, recorder)
        assert int(before.op_str, 16) == site.probe.stub
        s.disable("hk:cc:check:big")
        assert s.target.machine.read(site.addr, 6) == original == s.image.read(site.addr, 6)
    finally:
        s.close()


@pytest.mark.parametrize("arch", ["x86_64", "i386"])
def test_boot_leaves_every_conditional_tail_site_as_the_compiler_wrote_it(tmp_path, arch):
    """A disabled conditional tail site is its jcc, condition and displacement to its own stub: sdt_init writes
    none of its bytes, though the disabled form of the calls around it is the same bytes for every call."""
    _, image = build(tmp_path, arch, TWO)
    s = open_session("emulator", str(image), Reporter(as_json=True, out=io.StringIO()))
    try:
        cond = [x for x in s.target.runtime.sites if x.form == "cond"]
        assert len(cond) == 2 and len({x.probe.stub for x in cond}) == 2
        cs = s.image.arch.disassembler()
        for site in cond:
            assert s.target.machine.read(site.addr, 6) == s.image.read(site.addr, 6)
            insn = next(cs.disasm(s.target.machine.read(site.addr, 6), site.addr))
            assert insn.mnemonic.startswith("j") and int(insn.op_str, 16) == site.probe.stub
    finally:
        s.close()
