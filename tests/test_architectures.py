"""Every architecture end to end: the fixture builds, checks and boots, and fires as its C does run natively."""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
from itertools import pairwise

import pytest
from helpers import ARCHES, FIXTURE, OTHER_ARCHES, build_c_kernel, cross_tool, need_tool, run, sdtgen
from matrix import boot_trace, comparable, pointer_args, split_call
from native_oracle import Call, data_symbolizer, run_native

from sdtgen import arch as arches
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

CALLS = ("kmain 1", "kmain 3", "sched_switch 7 8 3 1 5000 0x40", "sched_run 0", "vfs_lookup_id:int 2",
         "kmem_alloc 0x100000", "proc_exec:int 9", "proc_exec:int 0", "proc_exit:void 42")
POINTERS = pointer_args((FIXTURE,))


def native_trace(native_exe, calls=CALLS) -> tuple:
    """The calls run natively, as comparable() puts a boot's events: the truth every architecture reproduces."""
    events = run_native(native_exe, [Call(s.partition(":")[0], a) for s, a in map(split_call, calls)])
    return comparable(events, POINTERS, data_symbolizer(native_exe))


def trace(image, arch: str, arm: str = "trap", calls=CALLS) -> tuple:
    return boot_trace(image, list(calls), POINTERS, arch, arm)


@pytest.fixture(scope="module")
def native_calls(native_exe):
    return native_trace(native_exe)


FORMS = ("call", "goto")  # sdt.h's probe forms: calls NOP'd at boot, and FreeBSD 15's asm goto (SDT_ASM_GOTO)


def fixture_kernel(arch_kernel, kernel, arch: str, form: str):
    if (arch, form) == ("x86_64", "call"):
        return kernel
    return arch_kernel(arch, **({"FORM": "goto"} if form == "goto" else {}))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arch", ARCHES)
def test_fixture_builds_and_checks(arch_kernel, kernel, arch, form):
    k = fixture_kernel(arch_kernel, kernel, arch, form)
    proc = sdtgen("check", k.partial, k.image)
    assert proc.returncode == 0, proc.stderr
    assert "21 sites" in proc.stdout and "21 stable" in proc.stdout
    scanned = json.loads(sdtgen("scan", k.partial, "--json").stdout)
    assert scanned["arch"] == arch
    # the goto build keeps one call: lib.c's direct call to __dtrace_sdt_raw_checksum, without the macros
    assert sum(s["form"] == "goto" for s in scanned["sites"]) == (20 if form == "goto" else 0)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arch", ARCHES)
def test_firings_and_results_equal_the_native_run(arch_kernel, kernel, arch, form, native_calls):
    fired = trace(fixture_kernel(arch_kernel, kernel, arch, form).image, arch)
    assert fired == native_calls
    names = {e[1] for e in fired if e[0] == "fire"}
    assert {"hk:sched:switch:six", "hk:vfs:lookup:entry", "hk:proc:exit:done"} <= names  # six args, strings, tail
    six = next(e for e in fired if e[0] == "fire" and e[1] == "hk:sched:switch:six" and e[2][0] == 7)
    assert six[2] == (7, 8, 3, 1, 5000, 0x40)
    assert ("return", -2) in fired


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arch", ARCHES)
def test_branch_mode_firings_and_results_equal_the_native_run(arch_kernel, kernel, arch, form, native_calls):
    """Recorded in the guest by branches, the firings are what the C source does natively."""
    assert trace(fixture_kernel(arch_kernel, kernel, arch, form).image, arch, "branch") == native_calls


def test_riscv_branch_mode_without_relaxation_arms_8_byte_sites_in_their_first_word(arch_kernel, native_calls):
    """jal in the first word, the second still the NOP: arming is one aligned store, never an auipc+jalr pair."""
    image = arch_kernel("riscv64", RELAX="0").image
    assert trace(image, "riscv64", "branch") == native_calls
    s = open_session("emulator", str(image), Reporter(out=io.StringIO()), arm="branch")
    try:
        s.enable(":::")
        sites = s.target.runtime.sites
        assert {x.state for x in sites} == {"branch"} and {x.size for x in sites} == {8}
        cs = s.image.arch.disassembler()
        for x in s.target.runtime.sites:
            jal, nop = cs.disasm(s.target.machine.read(x.addr, 8), x.addr)
            assert (jal.mnemonic, nop.mnemonic) in (("jal", "nop"), ("j", "nop")), (jal.mnemonic, nop.mnemonic)
    finally:
        s.close()


# A probe two megabytes of code before its recorder (which gen puts after the kernel's text): out of the
# reach of RISC-V's jal (+-1 MiB) and c.j (+-2 KiB), within every other architecture's branch.
FAR_SOURCE = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(fr);
SDT_PROBE_DEFINE1(fr, far, away, hit, "long");
long kmain(long x) { SDT_PROBE1(fr, far, away, hit, x); return x + 1; }
__attribute__((used)) void filler(void) { __asm__ volatile(".space 0x200000"); }
"""


@pytest.mark.parametrize("arch", ARCHES)
def test_branch_mode_traps_only_sites_out_of_range_and_says_so_once(tmp_path, arch):
    image = build_c_kernel(tmp_path, arch, FAR_SOURCE)
    buf = io.StringIO()
    s = open_session("emulator", str(image), Reporter(as_json=True, out=buf), arm="branch")
    try:
        for _ in range(2):
            s.enable(":::")
            s.disable(":::")
        s.enable(":::")
        (site,) = s.target.runtime.sites
        assert site.state == ("trap" if arch == "riscv64" else "branch")
        assert s.run("kmain:long", [4]) == 5
        events = [json.loads(x) for x in buf.getvalue().splitlines()]
        assert [e["args"] for e in events if e["event"] == "fire"] == [[4]]  # fired either way
        warnings = [e["text"] for e in events if e["event"] == "warning"]
        assert warnings == (["sites out of branch range of their recorder were armed with the breakpoint"]
                            if arch == "riscv64" else [])
    finally:
        s.close()


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_tail_site_disarmed_returns_and_armed_fires(arch_kernel, arch):
    buf = io.StringIO()
    s = open_session("emulator", str(arch_kernel(arch).image), Reporter(as_json=True, out=buf))
    try:
        (site,) = [x for x in s.target.runtime.sites if x.probe.spec == "hk:proc:exit:done"]
        assert site.form == "tail"
        assert s.run("kmain:long", [1]) == 36185  # proc_exit's tail site is a return when disarmed
        s.enable("hk:proc:exit:done")
        assert s.run("kmain:long", [1]) == 36185
        fires = [json.loads(x) for x in buf.getvalue().splitlines() if '"fire"' in x]
        assert [f["args"] for f in fires] == [[61]]
    finally:
        s.close()


def test_riscv_relaxation_shrinks_sites_and_reloc_mode_follows(arch_kernel):
    k = arch_kernel("riscv64")
    scanned = json.loads(sdtgen("scan", k.partial, "--json").stdout)["sites"]
    assert {(s["form"], s["length"], s["reloc"]) for s in scanned} == {("call", 8, "R_RISCV_CALL_PLT"),
                                                                       ("tail", 8, "R_RISCV_CALL_PLT")}
    # The final link's truth, from objdump: what relaxation left at each site (jal, or j / c.j by distance).
    linked = objdump_insns(cross_tool("riscv64", "objdump"), k.image)
    s = open_session("emulator", str(k.image), Reporter(out=io.StringIO()))
    try:
        sites = s.target.runtime.sites
        assert {x.form for x in sites} == {"call", "tail"}
        for x in sites:
            mnemonic, size = linked[x.addr]
            assert x.length == 8 and x.size == size < 8  # the table's length, the relaxed instruction's size
            assert mnemonic == ("jal" if x.form == "call" else "j")
        cs = s.image.arch.disassembler()
        for x in sites:  # disarmed: a call site is a NOP, a tail site returns, each in the relaxed size
            insns = list(cs.disasm(s.target.machine.read(x.addr, x.size), x.addr))
            assert [i.mnemonic for i in insns] == (["nop"] if x.form == "call" else
                                                   ["c.jr"] if x.size == 2 else ["ret"])
    finally:
        s.close()


def objdump_insns(objdump: str, image) -> dict[int, tuple[str, int]]:
    """Every instruction objdump decodes in an image's text: address -> (mnemonic, size in bytes)."""
    out = run([objdump, "-d", "--no-show-raw-insn", str(image)]).stdout
    found = {}
    for m in re.finditer(r"^\s*([0-9a-f]+):\s+(\S+)", out, re.M):
        found[int(m.group(1), 16)] = m.group(2)
    addrs = sorted(found)
    return {a: (found[a], b - a) for a, b in pairwise(addrs)}


def test_riscv_offset_mode_breaks_with_relaxation_and_holds_without(arch_kernel, tmp_path):
    relaxed = arch_kernel("riscv64", SDT_MODE="offset", RELAX="0")  # builds and checks: offsets hold
    assert sdtgen("check", relaxed.partial, relaxed.image).returncode == 0
    from helpers import FIXTURE, SDTGEN

    proc = run(["make", "-C", str(FIXTURE), f"O={tmp_path}", f"SDTGEN={SDTGEN}", "ARCH=riscv64",
                "SDT_MODE=offset"], check=False)
    assert proc.returncode != 0
    assert "relaxed calls and deleted their spare bytes" in proc.stderr and "--no-relax" in proc.stderr
    assert not (tmp_path / "kernel.elf").exists()


def test_riscv_without_relaxation_keeps_8_byte_sites(arch_kernel):
    k = arch_kernel("riscv64", RELAX="0")
    s = open_session("emulator", str(k.image), Reporter(out=io.StringIO()))
    try:
        assert {x.size for x in s.target.runtime.sites} == {8}
        assert s.run("kmain:long", [1]) == 36185
    finally:
        s.close()


# A user's Makefile as the README has it: the compiler and linker set, SDT_ARCH not.
USER_MAKEFILE = """\
SDTGEN := {sdtgen}
CC := {cc}
LD := {ld}
include $(shell $(SDTGEN) makefile)
CFLAGS := -ffreestanding -fno-pic -O2 -fno-asynchronous-unwind-tables {cflags} -I$(SDT_INCLUDE)
all: kernel.elf
$(eval $(call sdt_image,kernel.elf,kernel.o,k.o))
"""
USER_SOURCE = """\
#include <sdt.h>
SDT_PROVIDER_DEFINE(u);
SDT_PROBE_DEFINE1(u, k, kmain, hello, "long");
long kmain(long x) { SDT_PROBE1(u, k, kmain, hello, x); return x + 1; }
"""


def user_build(tmp_path, cc: str, ld: str, cflags: str = "") -> subprocess.CompletedProcess:
    from helpers import SDTGEN

    (tmp_path / "Makefile").write_text(USER_MAKEFILE.format(sdtgen=SDTGEN, cc=cc, ld=ld, cflags=cflags))
    (tmp_path / "k.c").write_text(USER_SOURCE)
    return run(["make", "-C", str(tmp_path), "--no-print-directory"], check=False)


@pytest.mark.parametrize("arch", ARCHES)
def test_the_fragment_takes_the_architecture_from_the_compiler(tmp_path, arch):
    """No SDT_ARCH: `$(CC) -dumpmachine` names it, and the image is linked for that machine."""
    a = arches.by_name(arch)
    cc, ld = cross_tool(arch, "gcc"), cross_tool(arch, "ld")
    proc = user_build(tmp_path, cc, ld, " ".join(a.toolchain.cflags))
    assert proc.returncode == 0, proc.stderr
    header = (tmp_path / "kernel.elf").read_bytes()[:20]
    assert struct.unpack_from("<H", header, 18)[0] == a.machine  # e_machine, from the ELF header itself
    assert f"OUTPUT_FORMAT(\"{a.toolchain.ld_format}\")" in (tmp_path / "kernel_sdt_final.ld").read_text()


def test_a_compiler_for_no_known_architecture_stops_make_naming_sdt_arch(tmp_path):
    """clang for SPARC says sparc64-linux-gnu: make stops before any link, and says to set SDT_ARCH."""
    need_tool("clang", "clang")
    proc = user_build(tmp_path, "clang --target=sparc64-linux-gnu", "ld", "-fintegrated-as")
    assert proc.returncode != 0 and (tmp_path / "k.o").exists()  # compiled, then stopped
    assert "sparc64-linux-gnu" in proc.stderr and "set SDT_ARCH" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "kernel.o").exists()


def test_an_explicit_sdt_arch_wins(tmp_path):
    """SDT_ARCH set by hand is used as given: here the wrong one, which the linker refuses."""
    cc, ld = cross_tool("aarch64", "gcc"), cross_tool("aarch64", "ld")
    (tmp_path / "k.c").write_text(USER_SOURCE)
    user_build(tmp_path, cc, ld)  # writes the Makefile; builds aarch64
    proc = run(["make", "-C", str(tmp_path), "-B", "SDT_ARCH=x86_64"], check=False)
    assert proc.returncode != 0 and "x86-64" in (tmp_path / "kernel_sdt_final.ld").read_text()


@pytest.mark.parametrize("policy", ["drop", "overwrite"])
@pytest.mark.parametrize("arch", ["aarch64", "i386"])
def test_overflow_is_exact_on_other_architectures(arch_kernel, native_exe, arch, policy):
    """A ring of two 1 KiB packets read when the run ends: shown plus lost is what the C fires natively; drop
    keeps the oldest run, overwrite the newest."""
    expected = [e[1] for e in native_trace(native_exe, ("kmain 70",)) if e[0] == "fire"]
    buf = io.StringIO()
    s = open_session("emulator", str(arch_kernel(arch).image), Reporter(as_json=True, out=buf), arm="branch",
                     buffer_size=2048, overflow=policy, stream=False)
    try:
        s.enable(":::")
        s.run("kmain:long", [70])
        s.stats()
    finally:
        s.close()
    events = [json.loads(x) for x in buf.getvalue().splitlines()]
    shown = [e["probe"] for e in events if e["event"] == "fire"]
    (stats,) = [e for e in events if e["event"] == "stats"]
    assert 0 < len(shown) < len(expected) and len(shown) + stats["lost"] == len(expected)
    assert shown == (expected[:len(shown)] if policy == "drop" else expected[len(expected) - len(shown):])


# An asm goto site whose out-of-line code lies two megabytes away, past filler(): out of a RISC-V jal's
# reach. No compiler puts it there (gcc keeps RISC-V's out-of-line code in its function), so it is assembled:
# the NOP and FreeBSD's record as sdt.h's asm writes them, the target code as gcc's would be, in a section
# of its own after the filler, returning with a register jump (a j would not reach back either).
FAR_GOTO_SOURCE = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(fr);
SDT_PROBE_DEFINE1(fr, far, away, hit, "long");
__asm__(".text\n.globl kmain\n.type kmain, @function\n.balign 4\nkmain:\n"
        "\taddi sp, sp, -16\n\tsd ra, 8(sp)\n\tsd a0, 0(sp)\n"
        "990:\n.option push\n.option norvc\n\tnop\n.option pop\n"
        "991:\n\tld a0, 0(sp)\n\taddi a0, a0, 1\n\tld ra, 8(sp)\n\taddi sp, sp, 16\n\tret\n.size kmain, .-kmain\n"
        ".pushsection .text.zfar, \"ax\"\nfar_target:\n\tld a0, 0(sp)\n"
        "\tcall __sdt_rec___dtrace_sdt_fr_far_away_hit\n\tlla t0, 991b\n\tjr t0\n.popsection\n"
        ".pushsection set_sdt_tracepoint_set, \"aw\"\n\t.quad sdt_fr_far_away_hit, 990b, far_target, 0\n"
        ".popsection\n");
__attribute__((used)) void filler(void) { __asm__ volatile(".space 0x200000"); }
"""


def test_an_asm_goto_target_out_of_jump_range_is_reached_through_the_breakpoint(tmp_path):
    """RISC-V's j reaches +-1 MiB: the site is armed with ebreak in either mode, and sdt_trap resumes the CPU at
    the target, whose code fires the probe; disarmed, the NOP again."""
    image = build_c_kernel(tmp_path, "riscv64", FAR_GOTO_SOURCE)
    for arm in ("branch", "trap"):
        buf = io.StringIO()
        s = open_session("emulator", str(image), Reporter(as_json=True, out=buf), arm=arm)
        try:
            (site,) = s.target.runtime.sites
            assert site.form == "goto" and abs(site.target - site.addr) > 1 << 20
            s.enable(":::")
            assert s.target.runtime.sites[0].state == "trap"
            assert s.target.machine.read(site.addr, 4) == struct.pack("<I", 0x00100073)  # ebreak
            assert s.run("kmain:long", [4]) == 5
            s.disable(":::")
            assert s.target.machine.read(site.addr, 4) == struct.pack("<I", 0x13) and s.run("kmain:long", [6]) == 7
            events = [json.loads(x) for x in buf.getvalue().splitlines()]
            assert [e["args"] for e in events if e["event"] == "fire"] == [[4]]
            assert [e["text"] for e in events if e["event"] == "warning"] == \
                ["sites out of branch range of their recorder were armed with the breakpoint"]
        finally:
            s.close()


def test_offset_mode_tables_place_asm_goto_sites_and_targets_from_btext(arch_kernel, native_calls):
    """The 2015 design's table for the asm goto form: the NOP and the target both btext + their offsets, which
    hold while the final link keeps .text in one piece; the firings are the native run's."""
    k = arch_kernel("x86_64", FORM="goto", SDT_MODE="offset")
    proc = sdtgen("check", k.partial, k.image)
    assert proc.returncode == 0 and "(table mode offset): 21 stable" in proc.stdout, proc.stdout + proc.stderr
    assert "btext + 0x" in (k.dir / "kernel_sdt_table.S").read_text()
    assert trace(k.image, "x86_64", "branch") == native_calls
