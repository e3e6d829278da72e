"""Every architecture end to end: the fixture builds, checks and boots, and fires as on x86-64."""

from __future__ import annotations

import io
import json

import pytest
from helpers import OTHER_ARCHES, run, sdtgen

from sdtgen.boot.session import BootSession, Reporter
from sdtgen.matrix import boot_trace

CALLS = (("kmain", (1,)), ("kmain", (3,)), ("sched_switch", (7, 8, 3, 1, 5000, 0x40)), ("sched_run", (0,)),
         ("vfs_lookup_id:int", (2,)), ("kmem_alloc", (1 << 20,)), ("proc_exec:int", (9,)), ("proc_exec:int", (0,)),
         ("proc_exit:void", (42,)))


@pytest.fixture(scope="module")
def x86_trace(kernel):
    return boot_trace(kernel.image, CALLS)


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_fixture_builds_and_checks(arch_kernel, arch):
    k = arch_kernel(arch)
    proc = sdtgen("check", k.partial, k.image)
    assert proc.returncode == 0, proc.stderr
    assert "21 sites" in proc.stdout and "21 stable" in proc.stdout
    assert json.loads(sdtgen("scan", k.partial, "--json").stdout)["arch"] == arch


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_firings_and_results_equal_x86_64(arch_kernel, arch, x86_trace):
    trace = boot_trace(arch_kernel(arch).image, CALLS)
    assert trace == x86_trace
    fired = {e[1] for e in trace if e[0] == "fire"}
    assert {"hk:sched:switch:six", "hk:vfs:lookup:entry", "hk:proc:exit:done"} <= fired  # six args, strings, tail
    six = next(e for e in trace if e[0] == "fire" and e[1] == "hk:sched:switch:six" and e[2][0] == 7)
    assert six[2] == [7, 8, 3, 1, 5000, 0x40]
    assert ("return", "proc_exec", -2) in trace


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_tail_site_disarmed_returns_and_armed_fires(arch_kernel, arch):
    buf = io.StringIO()
    s = BootSession(str(arch_kernel(arch).image), Reporter(as_json=True, out=buf))
    try:
        (site,) = [x for x in s.runtime.sites.values() if x.probe.spec == "hk:proc:exit:done"]
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
    s = BootSession(str(k.image), Reporter(out=io.StringIO()))
    try:
        lengths = sorted({(x.form, x.length) for x in s.runtime.sites.values()})
        assert lengths == [("call", 4), ("tail", 2)]  # jal, and c.j: relaxed by the final link
        cs = s.image.arch.disassembler()
        for x in s.runtime.sites.values():
            insns = list(cs.disasm(s.machine.read(x.addr, x.length), x.addr))
            assert [i.mnemonic for i in insns] == (["nop"] if x.form == "call" else ["c.jr"])
    finally:
        s.close()


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
    s = BootSession(str(k.image), Reporter(out=io.StringIO()))
    try:
        assert {x.length for x in s.runtime.sites.values()} == {8}
        assert s.run("kmain:long", [1]) == 36185
    finally:
        s.close()
