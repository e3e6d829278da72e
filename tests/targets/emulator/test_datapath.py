"""The data path: branch arming into guest recorders, per-CPU rings, timestamps, overflow, mode switches."""

from __future__ import annotations

import re

import pytest
import test_runtime
from booted import Booted
from helpers import ARCHES
from native_oracle import Call
from test_runtime import CALLS, comparable, firings, native_firings, returns

from sdtgen import arch as arches
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
    # every x86-64 site reaches its recorder: none fell back to the breakpoint
    assert {s.state for s in branch.session.target.runtime.sites} == {"branch"}


def test_armed_sites_call_the_recorder_and_disarmed_ones_are_the_nop_again(branch):
    s = branch.session
    cs = s.image.arch.disassembler()
    before = {x.addr: s.target.machine.read(x.addr, x.size) for x in s.target.runtime.sites}
    s.enable(":::")
    for site in s.target.runtime.sites:
        insn = next(cs.disasm(s.target.machine.read(site.addr, site.size), site.addr))
        want = {CALL: "call", COND: next(cs.disasm(before[site.addr], site.addr)).mnemonic}.get(site.form, "jmp")
        assert (insn.mnemonic, int(insn.op_str, 16)) == (want, site.probe.recorder)
        assert s.image.symbolize(site.probe.recorder) == "__sdt_rec_" + s.image.symbolize(site.probe.stub)
    s.disable(":::")
    assert {x.addr: s.target.machine.read(x.addr, x.size) for x in s.target.runtime.sites} == before


def test_every_firing_has_cpu_0_and_a_timestamp_that_never_goes_back(branch):
    branch.session.enable(":::")
    events = fires(branch.run(CALLS))
    assert events and all(e["cpu"] == 0 and isinstance(e["ts"], int) for e in events)
    ts = [e["ts"] for e in events]
    assert ts == sorted(ts) and ts[0] < ts[-1]


def test_trap_mode_records_through_the_same_packets(booted):
    booted.session.enable("hk:sched:run:tick")
    events = fires(booted.run([Call("sched_run", (3,))]))
    assert [e["args"] for e in events] == [[0, 1], [1, 3], [2, 8]]
    assert all(e["cpu"] == 0 and isinstance(e["ts"], int) for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def states(s) -> dict[str, str]:
    return {x.probe.spec: x.state for x in s.target.runtime.sites}


def test_switching_modes_between_runs_never_leaves_stale_code(booted, native, same):
    """Arm with traps, run, switch to branches, run, disarm, run, arm mixed: each run is the native truth."""
    s = booted.session
    expected = native(CALLS)
    disabled = {x.addr: s.target.machine.read(x.addr, x.size) for x in s.target.runtime.sites}
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
    s.set_arm("trap")
    s.enable("hk:sched::")  # traps
    s.set_arm("branch")  # the sched probes are rearmed with branches
    assert states(s)["hk:sched:run:tick"] == "branch"
    s.enable("hk:vfs::")  # branches
    s.disable("hk:sched::")
    s.mode = "trap"  # the session arms with traps from now on, without rearming what is armed
    s.enable("hk:sched::")  # traps, the vfs probes stay branches: a mixed arming
    armed = {p: st for p, st in states(s).items() if st != "off"}
    assert {armed["hk:sched:run:tick"], armed["hk:vfs:lookup:entry"]} == {"trap", "branch"}
    same(booted.run(CALLS), expected, "hk:sched::", "hk:vfs::")
    s.disable(":::")
    assert firings(booted.run(CALLS)) == []
    assert {x.addr: s.target.machine.read(x.addr, x.size) for x in s.target.runtime.sites} == disabled


# Runs that overflow a 2-packet ring of 1 KiB packets: tick records are 32 bytes (30 fill a packet), the
# vfs ones carry strings of several lengths, kmain mixes every size.
CASES = [(Call("sched_run", (80,)), 2048), (Call("sched_run", (200,)), 4096), (Call("kmain", (70,)), 2048)]


def overflow_run(kernel, policy: str, size: int, calls: list[Call]):
    b = Booted(kernel.image, arm="branch", buffer_size=size, overflow=policy, stream=False)
    b.session.enable(":::")
    return b


@pytest.mark.parametrize("policy", ["drop", "overwrite"])
@pytest.mark.parametrize(("call", "size"), CASES)
def test_overflow_loses_exactly_what_it_reports(kernel, native, policy, size, call):
    """Read only when the run ends: shown plus lost equals what fired natively; drop keeps the oldest,
    overwrite the newest."""
    expected = native_firings(native([call]), ":::")
    b = overflow_run(kernel, policy, size, [call])
    try:
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


def test_a_stream_that_keeps_up_loses_nothing_from_the_smallest_ring(kernel, native):
    """--overflow drop reads each packet as it closes: a run of thousands of records through 2 KiB."""
    call = Call("sched_run", (3000,))
    b = Booted(kernel.image, arm="branch", buffer_size=2048)
    try:
        b.session.enable(":::")
        shown = firings(b.run([call]))
        b.session.stats()
        (stats,) = [e for e in b.events() if e["event"] == "stats"]
    finally:
        b.session.close()
    assert stats["lost"] == 0 and shown == native_firings(native([call]), ":::")


def test_records_that_fill_a_packet_to_its_last_byte_are_all_kept(kernel):
    """A packet of 1 KiB holds its 64-byte header and exactly 30 tick records: 60 fill the ring to its last
    byte and every one is kept; the 61st is the first one dropped."""
    for n, lost in ((30, 0), (60, 0), (61, 1)):
        b = overflow_run(kernel, "drop", 2048, [])
        try:
            shown = fires(b.run([Call("sched_run", (n,))]))
            b.session.stats()
            (stats,) = [e for e in b.events() if e["event"] == "stats"]
        finally:
            b.session.close()
        assert (len(shown), stats["lost"]) == (n - lost, lost), n
        assert [e["args"][0] for e in shown] == list(range(n - lost))


def test_a_drop_ring_records_again_once_it_was_read(kernel, native):
    b = overflow_run(kernel, "drop", 2048, [])
    try:
        first = firings(b.run([Call("sched_run", (100,))]))
        second = firings(b.run([Call("sched_run", (5,))]))
    finally:
        b.session.close()
    assert len(first) == 60 and second == native_firings(native([Call("sched_run", (5,))]), ":::")


@pytest.mark.parametrize("policy", ["drop", "overwrite"])
def test_overflow_stays_exact_run_after_run(kernel, native, policy):
    """Runs start wherever the last one left the ring; each one's shown plus lost is what it fired."""
    calls = [Call("vfs_lookup_id", (2,)), *[Call("proc_exit", (0,))] * 3, Call("sched_run", (90,)),
             Call("vfs_lookup_id", (2,)), Call("sched_run", (3,)), Call("kmain", (40,)), Call("vfs_lookup_id", (1,))]
    b = overflow_run(kernel, policy, 2048, [])
    try:
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


# What a ring holds, from the trace format (docs/trace.md): packets of an eighth of --buffer-size, at least 1 KiB,
# each its 64-byte header then records 8-byte aligned; a tick record is the 16-byte event header and its two
# arguments, a register-sized word each.
PACKET, PACKET_HEADER, EVENT_HEADER = 1024, 64, 16


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize(("ticks", "size"), [(200, 2048), (333, 4096)])
def test_overwrite_keeps_exactly_the_newest_packets_and_counts_the_rest_lost(kernel, arch_kernel, native, arch,
                                                                               ticks, size):
    """Read only when the run ends, an overwriting ring of P packets holds the run's last P packets (the last one
    as far as it filled): exactly the native run's last firings, arguments and all; lost is the rest."""
    word = arches.by_name(arch).bits // 8
    per_packet = (PACKET - PACKET_HEADER) // -(-(EVENT_HEADER + 2 * word) // 8 * 8)
    fired = native_firings(native([Call("sched_run", (ticks,))]), "hk:sched:run:tick")
    newest = (len(fired) - 1) // per_packet  # the packet the last firing went to
    kept = fired[per_packet * max(0, newest - size // PACKET + 1):]
    image = kernel.image if arch == "x86_64" else arch_kernel(arch).image
    b = Booted(image, arm="branch", buffer_size=size, overflow="overwrite", stream=False)
    try:
        b.session.enable("hk:sched:run:tick")
        shown = firings(b.run([Call("sched_run", (ticks,))]))
        b.session.stats()
        (stats,) = [e for e in b.events() if e["event"] == "stats"]
    finally:
        b.session.close()
    assert 0 < len(kept) < len(fired)  # the run overflows the ring
    assert shown == kept
    assert stats["lost"] == len(fired) - len(kept)


def _has_pointer(args: list) -> bool:
    return any(isinstance(a, int) and a > 1 << 40 for a in args)  # a kernel address differs from the native one


def test_bad_buffer_sizes_and_modes_are_one_line_and_exit_2(kernel):
    from helpers import sdtgen

    for argv, what in ((["--buffer-size", "1000"], "is not a power of two from 2048 to 67108864"),
                       (["--buffer-size", "1024"], "is not a power of two"),
                       (["--buffer-size", str(128 << 20)], "is not a power of two"),
                       (["--arm", "branch", "--no-patch"], "cannot arm with branches: nothing is patched")):
        proc = sdtgen("boot", kernel.image, *argv)
        assert proc.returncode == 2 and what in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""  # refused before anything ran


def test_too_many_cpus_for_their_buffers_is_refused_before_anything_runs(kernel):
    from helpers import sdtgen

    for cpus, size in ((64, 64 << 20), (63, 32 << 20)):
        proc = sdtgen("boot", kernel.image, "--cpus", str(cpus), "--buffer-size", str(size), "--run", "kmain")
        assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1
        assert "give fewer --cpus or a smaller --buffer-size" in proc.stderr and "Traceback" not in proc.stderr


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
        # The calls are 6 bytes; GNU ld made the tail `jmp *GOT` a 5-byte jmp and a NOP, and only the jmp is
        # the site: the NOP after it may be a branch target, so it is never written.
        assert sorted((x.form, x.length, x.size) for x in s.target.runtime.sites) == [("call", 6, 6), ("tail", 6, 5)]
        (tail,) = [x for x in s.target.runtime.sites if x.form == "tail"]
        s.enable("gt:::")
        cs = s.image.arch.disassembler()
        for x in s.target.runtime.sites:
            (insn,) = cs.disasm(s.target.machine.read(x.addr, x.size), x.addr)  # one instruction: returns past the site
            assert insn.mnemonic in ("call", "jmp") and insn.size == x.size
        assert s.target.machine.read(tail.addr + 5, 1) == b"\x90"
        assert s.run("kmain", [5]) == 22
        assert [(e["probe"], e["args"]) for e in fires(b.events())] == [
            ("gt:got:twice:entry", [5, "got"]), ("gt:got:twice:entry", [6, "got"]), ("gt:got:twice:last", [22])]
    finally:
        s.close()


@pytest.mark.parametrize("schedule", ["seeded", "parallel"])
def test_each_cpu_records_into_its_own_ring_and_the_drain_merges_them_by_timestamp(kernel, native, schedule):
    """Three CPUs run sched_run at once: each record carries its CPU, each CPU's records are the native run's,
    and the merged stream is in timestamp order, not ring by ring."""
    b = Booted(kernel.image, arm="branch", cpus=3, schedule=schedule)
    try:
        b.session.enable("hk:sched:run:tick")
        fired = fires(b.run([Call("sched_run", (40,))]))
    finally:
        b.session.close()
    expected = [a for _, a in native_firings(native([Call("sched_run", (40,))]), "hk:sched:run:tick")]
    for cpu in range(3):
        assert [e["args"] for e in fired if e["cpu"] == cpu] == expected
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


def test_an_image_without_the_runtime_or_the_table_is_one_line(tmp_path):
    """The stubs and table alone (the runtime left out of the final link), or the runtime without a table."""
    from helpers import compile_c, compile_runtime, final_script, partial_link, run, sdtgen

    partial = partial_link(tmp_path, "kernel", compile_c(tmp_path, "got", GOT_SOURCE))
    stubs, table = tmp_path / "stubs.c", tmp_path / "table.S"
    sdtgen("gen", partial, "--stubs", stubs, "--table", table, check=True)
    stubs_o, table_o, *runtime_os = compile_runtime(tmp_path, "k", stubs, table)  # the runtime's sources, its port
    script = str(final_script(tmp_path / "final.ld"))
    without_runtime = tmp_path / "noruntime.elf"
    # The recorders call into the runtime: left undefined (a kernel could link them weakly), the image links.
    run(["ld", "-T", script, "--unresolved-symbols=ignore-all", "-o", str(without_runtime), str(partial),
         str(stubs_o), str(table_o)])
    proc = sdtgen("boot", without_runtime)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and proc.stdout == ""
    assert "does not link the sdtgen runtime" in proc.stderr and "runtime-dir" in proc.stderr
    without_table = tmp_path / "notable.elf"
    run(["ld", "-T", script, "--unresolved-symbols=ignore-all", "-o", str(without_table), str(partial),
         str(stubs_o), *map(str, runtime_os)])
    proc = sdtgen("boot", without_table)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and proc.stdout == ""
    assert "set_sdt_sites_set" in proc.stderr


def test_an_image_linked_without_the_stubs_object_is_one_line_before_anything_runs(tmp_path):
    """A link that let the undefined stubs pass resolves them to 0: sites that call address 0, which sdt_init
    would patch and the first armed firing would fault at. Refused, naming the stubs object, exit 2."""
    from helpers import compile_c, compile_runtime, final_script, partial_link, readelf_symbols, run, sdtgen

    partial = partial_link(tmp_path, "kernel", compile_c(tmp_path, "got", GOT_SOURCE))
    stubs, table = tmp_path / "stubs.c", tmp_path / "table.S"
    sdtgen("gen", partial, "--stubs", stubs, "--table", table, check=True)
    _, table_o, *runtime_os = compile_runtime(tmp_path, "k", stubs, table)
    image = tmp_path / "nostubs.elf"
    run(["ld", "-T", str(final_script(tmp_path / "final.ld")), "--unresolved-symbols=ignore-all", "-o", str(image),
         str(partial), str(table_o), *map(str, runtime_os)])
    assert not [row for row in readelf_symbols(image) if row[5].startswith("__dtrace_sdt_")]
    to_zero = re.findall(r"\t(call|jmp)\s+0 <", run(["objdump", "-d", str(image)]).stdout)
    assert sorted(to_zero) == ["call", "jmp"]  # the two probe sites, a call and a tail jump, go to address 0
    proc = sdtgen("boot", image, "--enable", "gt:::", "--run", "kmain", "--arg", "1")
    assert proc.returncode == 2 and proc.stdout == ""  # not even patched
    (line,) = proc.stderr.splitlines()
    assert re.fullmatch(rf"{re.escape(str(image))}: error: set_sdt_probes_set\+0x0: the stub of probe "
                        r"gt:got:twice:(entry|last) is at 0x0, outside the image's code \(and 1 more probe\): the "
                        r"stubs object `sdtgen gen` wrote was not linked; link the \*_sdt_stubs.o its --stubs output "
                        r"compiles to \(the Makefile fragment does\)", line), line


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


def test_a_string_that_ends_at_the_last_mapped_byte_is_copied_without_reading_past_it(tmp_path):
    """Three bytes and no NUL at the very end of the image's last page (past its bss, before a page nothing
    maps): the recorder copies them and stops where readable memory ends (one byte further would fault)."""
    from helpers import compile_c, final_link, partial_link

    image = final_link(tmp_path, partial_link(tmp_path, "kernel", compile_c(tmp_path, "nf", NOFAULT_SOURCE)))
    for arm in ("branch", "trap"):
        b = Booted(image, arm=arm)
        try:
            m = b.session.target.machine
            region = m.region_at(b.session.image.symbols["_end"].value)
            end = region.vaddr + region.size
            assert m.region_at(end) is None  # nothing mapped after it
            m.write(end - 3, b"abc")
            b.session.enable("nf:::")
            assert b.session.run("kmain:ulong", [end - 3]) == end - 2
            assert [e["args"] for e in fires(b.events())] == [["abc", end - 3 - (1 << 64)]]  # a long
        finally:
            b.session.close()


@pytest.mark.parametrize("arm", ["branch", "trap"])
def test_quiet_stats_count_every_firing_of_the_native_run(kernel, native, arm):
    """-q shows nothing, so the host counts each packet's events by probe without decoding them (a packet of
    one probe's events, a loop's, counted at once): the stats still hold exactly the native run's firings."""
    import json
    from collections import Counter

    from helpers import sdtgen

    calls = [Call("kmain", (70,)), Call("sched_run", (3000,)), Call("sched_switch", (7, 8, 3, 1, 5000, 0x40))]
    argv = [a for c in calls for a in ("--run", c.function, *(x for v in c.args for x in ("--arg", str(v))))]
    proc = sdtgen("boot", kernel.image, "--arm", arm, "--enable", ":::", "-q", "--json", "--buffer-size", "2048",
                  *argv)
    assert proc.returncode == 0, proc.stderr
    (stats,) = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "stats"]
    assert stats["lost"] == 0 and not any('"fire"' in ln for ln in proc.stdout.splitlines())
    assert stats["hits"] == dict(Counter(p for p, _ in native_firings(native(calls), ":::")))


def test_an_overwriting_ring_that_wrapped_while_streamed_is_not_damaged_and_loses_only_what_it_counts(kernel, native):
    """`boot --buffer-size 2048 --overflow overwrite --enable hk::: --run kmain --arg 40`: the ring of two packets goes
    round many times while the host reads it at each notify; nothing is damaged (exit 0, no warning), the firings shown
    are the native run's in its order with whole packets left out, and lost counts exactly the rest."""
    import json

    from helpers import sdtgen

    proc = sdtgen("boot", kernel.image, "--buffer-size", "2048", "--overflow", "overwrite", "--enable", "hk:::",
                  "--run", "kmain", "--arg", "40", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    (stats,) = [e for e in events if e["event"] == "stats"]
    shown = firings(events)
    expected = native_firings(native([Call("kmain", (40,))]), "hk:::")
    assert "damaged" not in stats and stats["lost"] > 0
    assert len(shown) + stats["lost"] == len(expected)
    def same(f, e) -> bool:  # a kernel pointer differs from the native one; every other argument is the same
        return f[0] == e[0] and (f[1] == e[1] or _has_pointer(f[1]))

    it = iter(expected)
    assert all(any(same(f, e) for e in it) for f in shown), "the firings shown are the native run's, in its order"
