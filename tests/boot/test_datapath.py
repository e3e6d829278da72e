"""The data path: branch arming into guest recorders, per-CPU rings, timestamps, overflow, mode switches."""

from __future__ import annotations

import pytest
import test_runtime
from booted import Booted
from native_oracle import Call
from test_runtime import CALLS, comparable, firings, native_firings, returns

from sdtgen.arch.base import CALL, COND

same = test_runtime.same  # the fixture comparing firings with the native run's


@pytest.fixture
def branch(kernel):
    b = Booted(kernel.image, arm="branch")
    b.events()
    yield b
    b.session.close()


def fires(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "fire"]


def test_branch_mode_firings_equal_the_native_run(branch, native, same):
    branch.session.enable(":::")
    emulated = branch.run(CALLS)
    expected = native(CALLS)
    same(emulated, expected, ":::")
    assert comparable(returns(emulated), CALLS) == comparable(returns(expected), CALLS)
    assert not branch.session.runtime.trapped  # every x86-64 site reaches its recorder


def test_armed_sites_call_the_recorder_and_disarmed_ones_are_the_nop_again(branch):
    s = branch.session
    cs = s.image.arch.disassembler()
    recorders = s.runtime.data.recorders
    before = {a: s.machine.read(a, site.length) for a, site in s.runtime.sites.items()}
    s.enable(":::")
    for addr, site in s.runtime.sites.items():
        insn = next(cs.disasm(s.machine.read(addr, site.length), addr))
        want = {CALL: "call", COND: site.original and next(cs.disasm(site.original, addr)).mnemonic}.get(
            site.form, "jmp")
        assert (insn.mnemonic, int(insn.op_str, 16)) == (want, recorders[site.probe.stub])
    s.disable(":::")
    assert {a: s.machine.read(a, site.length) for a, site in s.runtime.sites.items()} == before


def test_every_firing_has_cpu_0_and_a_timestamp_that_never_goes_back(branch):
    branch.session.enable(":::")
    events = fires(branch.run(CALLS))
    assert events and all(e["cpu"] == 0 and isinstance(e["ts"], int) for e in events)
    ts = [e["ts"] for e in events]
    assert ts == sorted(ts) and ts[0] < ts[-1]


def test_trap_mode_records_through_the_same_buffers(booted):
    booted.session.enable("hk:sched:run:tick")
    events = fires(booted.run([Call("sched_run", (3,))]))
    assert [e["args"] for e in events] == [[0, 1], [1, 3], [2, 8]]
    assert all(e["cpu"] == 0 and isinstance(e["ts"], int) for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def test_switching_modes_between_runs_never_leaves_stale_code(booted, native, same):
    """Arm with traps, run, switch to branches, run, disarm, run, rearm mixed: each run is the native truth."""
    s = booted.session
    expected = native(CALLS)
    assert firings(booted.run(CALLS)) == []  # every site translated as its NOP
    s.set_arm("branch")
    s.enable(":::")
    same(booted.run(CALLS), expected, ":::")
    s.set_arm("trap")
    same(booted.run(CALLS), expected, ":::")
    s.set_arm("branch")
    same(booted.run(CALLS), expected, ":::")
    s.disable(":::")
    assert firings(booted.run(CALLS)) == []
    s.enable("hk:sched::")  # branches
    s.set_arm("trap")
    s.enable("hk:vfs::")  # traps; the sched probes were rearmed with traps too
    assert s.runtime.trapped == s.runtime.armed
    s.runtime.set_mode("branch", rearm=False)
    s.enable(":::")  # the sched and vfs probes stay traps, the rest branch: a mixed arming
    assert s.runtime.trapped and s.runtime.armed - s.runtime.trapped
    same(booted.run(CALLS), expected, ":::")
    s.disable(":::")
    assert firings(booted.run(CALLS)) == []
    assert all(s.machine.read(a, x.length) == x.disabled for a, x in s.runtime.sites.items())


# vfs_lookup_id(2) mixes 3-slot string records with 1-slot ones: a drop buffer left with a slot or two must
# still drop the smaller records after a larger one it could not keep. Every case overflows its buffer.
CASES = [(Call(f, a), size) for f, a in (("kmain", (3,)), ("sched_run", (40,))) for size in (256, 512, 1024)]
CASES += [(Call("vfs_lookup_id", (2,)), 256), (Call("vfs_lookup_id", (2,)), 512)]


@pytest.mark.parametrize("policy", ["drop", "overwrite"])
@pytest.mark.parametrize(("call", "size"), CASES)
def test_overflow_loses_exactly_what_it_reports(kernel, native, policy, size, call):
    """Shown plus lost equals what fired natively; drop keeps the oldest run, overwrite the newest."""
    expected = native_firings(native([call]), ":::")
    b = Booted(kernel.image, arm="branch", buffer_size=size, overflow=policy)
    try:
        b.session.enable(":::")
        shown = firings(b.run([call]))
        b.session.stats()
        (stats,) = [e for e in b.events() if e["event"] == "stats"]
    finally:
        b.session.close()
    assert stats["lost"] > 0 and len(shown) > 0  # the buffer holds some of the run, not all
    assert len(shown) + stats["lost"] == len(expected)
    kept = expected[:len(shown)] if policy == "drop" else expected[len(expected) - len(shown):]
    assert [p for p, _ in shown] == [p for p, _ in kept]
    assert all(a == x for (_, a), (_, x) in zip(shown, kept, strict=True) if not _has_pointer(a))


@pytest.mark.parametrize("policy", ["drop", "overwrite"])
def test_overflow_stays_exact_run_after_run_when_records_nearly_fill_the_ring(kernel, native, policy):
    """Records of strings take most of a 256-byte ring, and runs start wherever the last one left the head:
    a record that only an empty ring can hold, after padding, is where counting went wrong."""
    calls = [Call("vfs_lookup_id", (2,)), *[Call("proc_exit", (0,))] * 3, Call("vfs_lookup_id", (2,)),
             Call("sched_run", (3,)), Call("vfs_lookup_id", (1,))]
    b = Booted(kernel.image, arm="branch", buffer_size=256, overflow=policy)
    try:
        b.session.enable(":::")
        lost_before = 0
        for call in calls:
            expected = native_firings(native([call]), ":::")
            shown = firings(b.run([call]))
            b.session.stats()
            (stats,) = [e for e in b.events() if e["event"] == "stats"]
            lost, lost_before = stats["lost"] - lost_before, stats["lost"]
            assert len(shown) + lost == len(expected), call
            kept = expected[:len(shown)] if policy == "drop" else expected[len(expected) - len(shown):]
            assert [p for p, _ in shown] == [p for p, _ in kept], call
    finally:
        b.session.close()


def _has_pointer(args: list) -> bool:
    return any(isinstance(a, int) and a > 1 << 40 for a in args)  # a kernel address differs from the native one


def test_bad_buffer_sizes_and_modes_are_one_line_and_exit_2(kernel):
    from helpers import sdtgen

    for argv, what in ((["--buffer-size", "1000"], "is not a power of two from 256 to 67108864"),
                       (["--buffer-size", "128"], "is not a power of two"),
                       (["--buffer-size", str(128 << 20)], "is not a power of two"),
                       (["--arm", "branch", "--no-patch"], "cannot arm with branches: nothing is patched")):
        proc = sdtgen("boot", kernel.image, *argv)
        assert proc.returncode == 2 and what in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


GOT_SOURCE = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(gt);
SDT_PROBE_DEFINE2(gt, got, twice, entry, "long", "const char *");
SDT_PROBE_DEFINE1(gt, got, twice, last, "long");
__attribute__((noinline)) long twice(long x)
{
	SDT_PROBE2(gt, got, twice, entry, x, "got");
	return 2 * x;
}
__attribute__((noinline)) void last(long x) { SDT_PROBE1(gt, got, twice, last, x); }
long kmain(long x) { long y = twice(x) + twice(x + 1); last(y); return y; }
"""


def test_six_byte_got_sites_branch_with_one_six_byte_call(tmp_path):
    """gcc -fPIC -fno-plt calls probes through the GOT; GNU ld relaxes them to 6-byte `addr32 call`s."""
    from helpers import compile_c, final_link, partial_link

    obj = compile_c(tmp_path, "got", GOT_SOURCE, "-mcmodel=small", "-fPIC", "-fno-plt")
    image = final_link(tmp_path, partial_link(tmp_path, "kernel", obj))
    b = Booted(image, arm="branch")
    try:
        s = b.session
        assert {x.length for x in s.runtime.sites.values()} == {6}
        s.enable("gt:::")
        cs = s.image.arch.disassembler()
        for a in s.runtime.sites:
            (insn,) = cs.disasm(s.machine.read(a, 6), a)  # one instruction: it returns past the site
            assert insn.mnemonic in ("call", "jmp") and insn.size == 6
        assert s.run("kmain", [5]) == 22
        assert [(e["probe"], e["args"]) for e in fires(b.events())] == [
            ("gt:got:twice:entry", [5, "got"]), ("gt:got:twice:entry", [6, "got"]), ("gt:got:twice:last", [22])]
    finally:
        s.close()


def test_each_cpu_records_into_its_own_ring_and_the_drain_merges_them_by_timestamp(kernel):
    """Two rings, the per-CPU register pointed at one then the other between calls (as two CPUs would be):
    each record carries its CPU, and the merged stream is in timestamp order, not ring by ring."""
    b = Booted(kernel.image, arm="branch", cpus=2)
    try:
        s = b.session
        s.enable("hk:sched:run:tick")
        rings, func = s.runtime.data.rings, s.image.symbols["sched_run"].value
        for cpu, n in ((0, 1), (1, 2), (0, 3), (1, 1)):
            s.image.arch.set_cpu_pointer(s.machine.uc, rings.control(cpu))
            s.machine.call(func, [n])
        s.drain()
        fired = fires(b.events())
    finally:
        s.close()
    assert [(e["cpu"], e["args"][0]) for e in fired] == [(0, 0), (1, 0), (1, 1), (0, 0), (0, 1), (0, 2), (1, 0)]
    assert [e["ts"] for e in fired] == sorted(e["ts"] for e in fired)


def test_a_script_switches_arming_modes_and_every_run_fires_the_same(kernel, tmp_path, native):
    from helpers import sdtgen

    script = tmp_path / "modes.sdt"
    script.write_text("enable hk:sched::\nrun sched_run 3\narm branch\nrun sched_run 3\narm trap\nrun sched_run 3\n"
                      "arm branch\ndisable :::\nrun sched_run 3\n")
    proc = sdtgen("boot", kernel.image, "--script", script, "--json")
    assert proc.returncode == 0, proc.stderr
    import json

    events = [json.loads(x) for x in proc.stdout.splitlines()]
    runs, current = [], []
    for e in events:
        if e["event"] == "fire":
            current.append((e["probe"], e["args"]))
        elif e["event"] == "return":
            runs.append(current)
            current = []
    expected = native_firings(native([Call("sched_run", (3,))]), "hk:sched::")
    assert runs == [expected, expected, expected, []]
    (stats,) = [e for e in events if e["event"] == "stats"]
    assert stats == {"event": "stats", "hits": {"hk:sched:run:tick": 9}, "lost": 0}


def test_an_image_without_recorders_fires_through_the_host_and_refuses_branches(tmp_path):
    """Stubs from an sdtgen before the data path: trap mode decodes at the trap (no cpu, no ts)."""
    from helpers import compile_c, final_script, partial_link, run, sdtgen

    partial = partial_link(tmp_path, "kernel", compile_c(tmp_path, "got", GOT_SOURCE))
    stubs, table = tmp_path / "stubs.c", tmp_path / "table.S"
    sdtgen("gen", partial, "--stubs", stubs, "--table", table, check=True)
    text = stubs.read_text()
    stubs.write_text(text[:text.index("/*\n * The data path")])  # the empty stubs only
    for src in (stubs, table):
        run(["gcc", "-O2", "-ffreestanding", "-fno-pic", "-c", "-o", str(src.with_suffix(".o")), str(src)])
    image = tmp_path / "old.elf"
    run(["ld", "-T", str(final_script(tmp_path / "final.ld")), "-o", str(image), str(partial),
         str(stubs.with_suffix(".o")), str(table.with_suffix(".o"))])
    b = Booted(image)
    try:
        b.session.enable("gt:::")
        assert b.session.run("kmain", [5]) == 22
        assert [(e["probe"], e["args"], e["cpu"], e["ts"]) for e in fires(b.events())] == [
            ("gt:got:twice:entry", [5, "got"], None, None), ("gt:got:twice:entry", [6, "got"], None, None),
            ("gt:got:twice:last", [22], None, None)]
    finally:
        b.session.close()
    proc = sdtgen("boot", image, "--arm", "branch")
    assert proc.returncode == 2 and "has no recorders" in proc.stderr and len(proc.stderr.splitlines()) == 1


NOFAULT_SOURCE = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(nf);
SDT_PROBE_DEFINE2(nf, str, show, arg, "const char *", "long");
static const char hello[] = "hello";
__attribute__((noinline)) long show(long p)
{
	SDT_PROBE2(nf, str, show, arg, (const char *)p, p);
	return p + 1;
}
long kmain(long p) { return show(p ? p : (long)hello); }
"""


@pytest.mark.parametrize("arm", ["branch", "trap"])
def test_a_string_the_guest_cannot_read_is_unreadable_and_the_kernel_runs_on(tmp_path, arm):
    """A probe never faults the kernel it traces: an unmapped pointer records as unreadable (as a null does)."""
    from helpers import compile_c, final_link, partial_link, run

    image = final_link(tmp_path, partial_link(tmp_path, "kernel", compile_c(tmp_path, "nf", NOFAULT_SOURCE)))
    loads = [line.split() for line in run(["readelf", "-lW", str(image)]).stdout.splitlines()
             if line.strip().startswith("LOAD")]
    unmapped = [0x1234, 0xdead0000]  # below and far from the kernel: in no PT_LOAD readelf shows
    assert not any(int(f[2], 16) <= a < int(f[2], 16) + int(f[5], 16) for f in loads for a in unmapped)
    b = Booted(image, arm=arm)
    try:
        b.session.enable("nf:::")
        b.session.run("kmain", [0])  # a readable string: hello
        for p in unmapped:
            assert b.session.run("kmain", [p]) == p + 1  # the C: show returns its argument plus one
        shown = [(e["args"][0], e["args"][1]) for e in fires(b.events())]
        assert shown[0][0] == "hello" and [s for s, _ in shown[1:]] == [None, None]
        assert [a for _, a in shown[1:]] == unmapped
    finally:
        b.session.close()
