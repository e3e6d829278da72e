"""A loadable module in the emulated boot: fixtures/module's mod.c built as a kernel builds a module (its own
table from `sdtgen gen --module hkm`), relocated against the fixture kernel and given to sdt_module_load while
the kernel runs. Its firings equal the same C run natively (tools/native.py), with a spec enabled before the
load, in both arming modes; unloading disarms it, and the runtime's error codes say what is wrong."""

from __future__ import annotations

import io
import json
import os

import pytest
from helpers import SDTGEN, cross_tool, need_tool, run, sdtgen
from module_native import MODULE, booted_with_modules, module_firings, session_firings

from sdtgen.layout import VALUES

CALLS = [3, 1, 0, 5]
CROSS = {"i386": ("i686-linux-gnu-gcc", "gcc-i686-linux-gnu"), "aarch64": ("aarch64-linux-gnu-gcc",
         "gcc-aarch64-linux-gnu"), "riscv64": ("riscv64-linux-gnu-gcc", "gcc-riscv64-linux-gnu")}


@pytest.fixture(scope="module")
def native_module(tmp_path_factory):
    """mod.c built for this machine, each probe a function printing its call: the firings a load must give."""
    return module_firings(tmp_path_factory.mktemp("native-module"), CALLS)


def build_module(tmp_path, arch: str):
    if arch in CROSS:
        need_tool(*CROSS[arch])
    run(["make", "-C", str(MODULE), f"ARCH={arch}", f"O={tmp_path / 'module'}", f"SDTGEN={SDTGEN}"])
    return tmp_path / "module" / "hkm.ko"


# Every architecture in both arming modes with SDTGEN_MODULE_MATRIX=1; otherwise x86-64 in both and one mode each
# for the others (the suite's time).
FULL = os.environ.get("SDTGEN_MODULE_MATRIX") == "1"
CASES = [(a, m) for a in ("x86_64", "i386", "aarch64", "riscv64") for m in ("trap", "branch")
         if FULL or a == "x86_64" or (a, m) in (("i386", "branch"), ("aarch64", "trap"), ("riscv64", "branch"))]


@pytest.mark.parametrize(("arch", "arm"), CASES)
def test_a_spec_enabled_before_the_load_fires_the_modules_probes_as_the_native_run(
        tmp_path, arch_kernel, native_module, arch, arm):
    ko = build_module(tmp_path, arch)
    out = io.StringIO()
    s = booted_with_modules(arch_kernel(arch).image, out)
    try:
        s.set_arm(arm)
        s.enable("hkm:::")  # before the module exists: the runtime remembers it
        s.load_module(str(ko))
        for n in CALLS:
            s.run("hkm_work", [n])
    finally:
        s.close()
    # the native harness names the probes as their definitions do: the empty module field is the module's name
    want = [{**e, "probe": e["probe"].replace("hkm::", "hkm:hkm:")} if "probe" in e else e for e in native_module]
    assert session_firings(out) == want


def test_unload_disarms_and_a_reload_applies_the_specs_again(tmp_path, kernel, native_module):
    ko = build_module(tmp_path, "x86_64")
    out = io.StringIO()
    s = booted_with_modules(kernel.image, out)
    try:
        s.load_module(str(ko))
        s.enable("hkm:drv::")
        s.unload_module("hkm")
        assert [json.loads(x)["sites"] for x in out.getvalue().splitlines()
                if json.loads(x)["event"] == "module" and json.loads(x)["did"] == "unloaded"] == [2]  # two armed
        s.load_module(str(ko))
        s.run("hkm_work", [3])
    finally:
        s.close()
    fired = [e["probe"] for e in session_firings(out) if "probe" in e]
    assert fired == ["hkm:drv:work:dev", "hkm:drv:work:done"]  # hkm:hkm:work:step was never enabled


def test_loaded_twice_unloaded_twice_never_loaded_are_error_codes(tmp_path, kernel):
    ko = build_module(tmp_path, "x86_64")
    s = booted_with_modules(kernel.image, io.StringIO())
    try:
        t = s.target
        s.load_module(str(ko))
        rt, m0 = t.runtime, t.machine
        struct = t.module_struct()
        text = t.module.text
        again = rt.call(m0, "sdt_module_load", [struct, t.module.table, *text])
        assert again == VALUES["SDT_ERR_MODULE_LOADED"]
        other = struct - 4096  # a fresh struct, the same table: still loaded
        assert rt.call(m0, "sdt_module_load", [other, t.module.table, *text]) == VALUES["SDT_ERR_MODULE_LOADED"]
        assert rt.call(m0, "sdt_module_unload", [other]) == VALUES["SDT_ERR_MODULE_UNKNOWN"]
        assert rt.call(m0, "sdt_module_unload", [struct]) == 0
        assert rt.call(m0, "sdt_module_unload", [struct]) == VALUES["SDT_ERR_MODULE_UNLOADED"]
        assert rt.call(m0, "sdt_module_load", [struct, t.module.table + 4, *text]) == VALUES["SDT_ERR_MODULE_TABLE"]
    finally:
        s.close()


def test_unload_and_load_under_calling_cpus_tear_nothing_in_the_emulator(tmp_path, kernel):
    """`sdtgen torture --module --arm module`: two CPUs call the module's function while a third unloads and loads
    it in place, the spec enabled throughout; every instruction a CPU fetches in its sites is the disabled form,
    the branch, or the protocol's breakpoint. 2,000 toggles (1,000 cycles) with SDTGEN_MODULE_TORTURE=1."""
    ko = build_module(tmp_path, "x86_64")
    toggles = 2000 if os.environ.get("SDTGEN_MODULE_TORTURE") == "1" else 12
    out = sdtgen("torture", str(kernel.image), "--module", str(ko), "--arm", "module", "--run", "hkm_work",
                 "--arg", "3", "--cpus", "2", "--toggles", str(toggles), "--timeout", "3600", "--json", check=True)
    summary = json.loads(out.stdout)
    assert (summary["asked"], summary["toggles"], summary["torn"], summary["faults"], summary["wrong"]) == \
        (toggles, toggles, 0, 0, 0)
    assert summary["firings"] > 0
    assert (summary["leaked"], summary["windows"]) == (0, toggles // 2), "unloaded, no site of it ran armed"


def test_a_site_that_is_not_the_expected_call_is_refused_alone_and_reported(tmp_path, kernel):
    """The loader placed the module, then something rewrote one site's call: sdt_module_load refuses that site,
    reporting the bytes it found, and patches the others; the refused one is never written."""
    from sdtgen.modlink import link_module

    ko = build_module(tmp_path, "x86_64")
    out = io.StringIO()
    s = booted_with_modules(kernel.image, out)
    try:
        t = s.target
        linked = link_module(t.image, str(ko), t.module_base)
        for addr, data, _ in linked.segments:
            t.machine.write(addr, data)
        # where gcc put the step probe's call: objdump's relocation against its stub, one byte into the call
        listing = run(["objdump", "-dr", "-j", ".text", str(ko)]).stdout
        offset = next(int(ln.split(":")[0], 16) - 1 for ln in listing.splitlines()
                      if "R_X86_64_PLT32" in ln and "__dtrace_sdt_hkm__work_step" in ln)
        text = linked.text[0]
        t.machine.write(text + offset, b"\x0f\x0b\x90\x90\x90")  # ud2 and NOPs: not the call
        patched = t.runtime.load_module(linked.name, linked.bounds, [t.module_struct(), linked.table, *linked.text])
        states = {x.probe.name: x.state for x in t.runtime.sites if 0 <= x.addr - linked.base < linked.size}
        untouched = t.machine.read(text + offset, 5)
    finally:
        s.close()
    assert patched == 2 and states == {"step": "refused", "dev": "off", "done": "off"}
    assert untouched == b"\x0f\x0b\x90\x90\x90"
    warnings = [json.loads(x)["text"] for x in out.getvalue().splitlines() if json.loads(x)["event"] == "warning"]
    assert any("hkm:hkm:work:step" in w and "not the expected call" in w and "0f 0b 90 90 90" in w for w in warnings)


@pytest.mark.parametrize("arch", ["x86_64", "riscv64"])
def test_the_relocation_time_hook_disables_the_calls_of_a_module_built_without_its_table(tmp_path, arch_kernel,
                                                                                           arch):
    """A kernel's own loader places mod.c's object (no `gen --module`), resolves its probe stubs to an empty
    function of the kernel's, and calls sdt_reloc_nop at each relocation readelf lists against them: each call
    becomes the disabled form (Capstone reads a NOP, or RISC-V's nop), the module returns what its C does, and an
    address that is not such a call is refused and left alone."""
    import tempfile

    import capstone

    from sdtgen.modlink import placed

    build_module(tmp_path, arch)
    obj = tmp_path / "module" / "src" / "mod.o"  # mod.c compiled, before any sdtgen step
    image = arch_kernel(arch).image
    relocs = [ln.split() for ln in run([cross_tool(arch, "readelf"), "-rW", str(obj)]).stdout.splitlines()]
    stubs = sorted({r[4] for r in relocs if len(r) > 4 and r[4].startswith("__dtrace_sdt_")})
    offsets = [int(r[0], 16) for r in relocs if len(r) > 4 and r[4].startswith("__dtrace_sdt_")
               and r[2] in ("R_X86_64_PLT32", "R_X86_64_PC32", "R_RISCV_CALL_PLT", "R_RISCV_CALL")]
    assert len(offsets) == 3
    s = booted_with_modules(image, io.StringIO())
    try:
        t = s.target
        empty = s.image.symbols["__dtrace_sdt_hk___boot"].value  # a stub of the kernel's: an empty function
        with tempfile.TemporaryDirectory() as tmp, placed(str(obj), t.image.arch, t.module_base, tmp,
                                                          kernel=str(image), relax=False,
                                                          define=dict.fromkeys(stubs, empty)) as out:
            from sdtgen.elf.reader import ElfFile

            with ElfFile(out) as elf:
                text = elf.section(".text")
                for seg in elf.segments:
                    if seg.type == 1 and seg.filesz:
                        t.machine.write(seg.vaddr, bytes(elf.data[seg.offset:seg.offset + seg.filesz]))
                work = elf.symbol_map()["hkm_work"].value
        hook = s.image.symbols["sdt_reloc_nop"].value
        x86 = arch == "x86_64"
        sites = [text.addr + off - (1 if x86 else 0) for off in offsets]
        results = [t.machine.call(hook, [a, 5 if x86 else 8, empty, 0]) for a in sites]
        written = [t.machine.read(a, 5 if x86 else 4) for a in sites]
        before = t.machine.read(work, 4)
        refused = t.machine.call(hook, [work, 5 if x86 else 8, empty, 0])
        after = t.machine.read(work, 4)
        value = t.machine.call(work, [3])
    finally:
        s.close()
    assert [r & 0xFFFFFFFF for r in results] == ([5] * 3 if x86 else [8] * 3)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64) if x86 else \
        capstone.Cs(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC)
    for code, a in zip(written, sites, strict=True):
        (insn,) = list(md.disasm(code, a))[:1]
        assert insn.mnemonic == "nop", (hex(a), code.hex(), insn.mnemonic)
    assert (refused & 0xFFFFFFFF) - (1 << 32) == VALUES["SDT_ERR_ARG"] and before == after
    assert value == 12  # hkm_work(3) as the C computes it: 1 + 4 + 7


def test_the_exhaustive_check_covers_load_while_arming_and_unload_while_trapping(tmp_path, kernel, arch_kernel):
    """`torture --exhaustive --module`: at every store sdt_module_unload makes to a site armed with the breakpoint
    or the branch, and every store sdt_module_load makes arming it again as the enabled spec says, another CPU
    started at every instruction boundary of the site (every landing of the store's bytes) runs the old
    instruction, the new one, or a breakpoint sdt_trap resolves. The naive protocol's runtime fails it."""
    ko = build_module(tmp_path, "x86_64")

    def check(image) -> dict:
        r = sdtgen("torture", str(image), "--module", str(ko), "--exhaustive", "--run", "hkm_work", "--arg", "3",
                   "--cpus", "1", "--json")
        return json.loads(r.stdout)

    safe = check(kernel.image)
    assert safe["passed"] and safe["checked"] > 0 and (safe["torn"], safe["faults"]) == (0, 0)
    assert safe["toggles"] == 4  # unload and load, with the spec armed by the breakpoint, then by branches
    naive = check(arch_kernel("x86_64", SDT_RUNTIME_CFLAGS="-DSDT_NAIVE_PROTOCOL").image)
    assert not naive["passed"] and naive["torn"] > 0


def test_a_script_unloads_and_loads_the_module_again(tmp_path, kernel):
    """The console's (and a script's) `unload NAME` and `module FILE`, the same session calls as the options."""
    ko = build_module(tmp_path, "x86_64")
    script = tmp_path / "cycle.sdt"
    script.write_text(f"enable hkm:drv::\nunload hkm\nrun hkm_work 1\nmodule {ko}\nrun hkm_work 1\n")
    r = sdtgen("boot", str(kernel.image), "--module", str(ko), "--script", str(script), "--json", check=True)
    events = [json.loads(x) for x in r.stdout.splitlines()]
    seen = [e["did"] if e["event"] == "module" else e.get("probe", "return") for e in events
            if e["event"] in ("module", "fire", "return")]
    assert seen == ["loaded", "unloaded", "return", "loaded", "hkm:drv:work:dev", "hkm:drv:work:done", "return"]


def test_a_trace_with_a_module_is_refused_before_anything_is_written(tmp_path, kernel):
    """The trace's CTF metadata is written at the start, without the module's probes: a reader could not read
    their events, so the two are refused together, in one line, and no trace is begun."""
    ko = build_module(tmp_path, "x86_64")
    r = sdtgen("boot", str(kernel.image), "--trace", str(tmp_path / "trace"), "--module", str(ko))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--trace with --module" in r.stderr
    assert not (tmp_path / "trace").exists()


def test_the_relocation_time_hook_refuses_an_address_or_length_it_cannot_use_without_reading_it(kernel):
    """sdt_reloc_nop reads ``length`` bytes at ``site`` only once it knows they can be an instruction: NULL, an
    empty length, one longer than any architecture's site (SDT_SITE_MAX, 16 bytes in sdt_arch.h) and a range
    that wraps past the top of the address space are each refused with the header's SDT_ERR_ARG, with no read
    (the emulator maps no page at 0 or at the top: a read there would fault the call), and no word is reported."""
    out = io.StringIO()
    s = booted_with_modules(kernel.image, out)
    try:
        t = s.target
        hook = s.image.symbols["sdt_reloc_nop"].value
        stub = s.image.symbols["__dtrace_sdt_hk___boot"].value
        text = s.image.symbols["sdt_reloc_nop"].value  # mapped code: only the length is wrong
        results = [t.machine.call(hook, [site, length, stub, 0]) for site, length in
                   [(0, 5), ((1 << 64) - 2, 5), (text, 0), (text, 17)]]
    finally:
        s.close()
    assert [(r & 0xFFFFFFFF) - (1 << 32) for r in results] == [VALUES["SDT_ERR_ARG"]] * 4
    assert not [x for x in out.getvalue().splitlines() if json.loads(x)["event"] == "warning"]
