"""A kernel that panics, or hangs, in the middle of a run on QEMU: the host reads every CPU's ring out of the
machine's RAM (docs/post-mortem.md), and the trace it writes holds each CPU's events up to the panic, each CPU's
last event the native run's last, and opens in babeltrace2. Bytes of a packet damaged in memory make that packet
counted and left out, never trusted; an event a recorder was writing (nesting) is cut.

The kernel: the fixture's own C with fixtures/qemu/panic/panic.c, whose panic_after(ticks, cpus) runs sched_run(ticks)
on every CPU and then panics on each (fixtures/qemu/platform.c's platform_panic: a `panic` line, the CPU stopped)."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURE, ROOT, SDTGEN, run
from post_mortem_read import bt2_rows, events_by_cpu, native_firings
from qemu_helpers import ALL, EVERY

from sdtgen.layout import CPU, EVENT, PACKET
from sdtgen.transport.salvage import salvage

PANIC_SRC = ROOT / "fixtures" / "qemu" / "panic" / "panic.c"
# The breakpoint protocol's architecture and one-store patches; `make qemu` (SDTGEN_QEMU_ALL=1) all four.
ARCHES = EVERY if ALL else ("x86_64", "riscv64")
CPUS = 2



@pytest.fixture(scope="module")
def panicking(qemu_kernel):
    """The fixture kernel with panic.c, built once per architecture."""
    sources = " ".join([*(str(p) for p in sorted(FIXTURE.glob("*.c"))), str(PANIC_SRC)])
    return lambda arch: qemu_kernel(arch, KERNEL_SRCS=sources)


def firings(cpu) -> list[tuple[str, list]]:
    """A CpuSalvage's events as the native run prints them."""
    return [(e.probe, list(e.args)) for e in cpu.events]


def qemu(image, *args: str) -> tuple[int, list[dict], str]:
    proc = run([SDTGEN, "qemu", str(image), "--json", "--cpus", str(CPUS), *map(str, args)], check=False, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


@pytest.mark.parametrize("arch", ARCHES)
def test_a_panic_leaves_each_cpus_events_up_to_it_in_a_trace_babeltrace2_opens(arch, panicking, native_exe, tmp_path):
    ticks = 100  # several packets of 1 KiB a CPU: closed ones the host read, closed ones it did not, the open one
    pm, trace = tmp_path / "pm", tmp_path / "trace"
    rc, events, _ = qemu(panicking(arch), "--buffer-size", "8192", "--enable", "hk:sched::", "--run", "panic_after",
                         "--arg", ticks, "--arg", CPUS, "--post-mortem", pm, "--trace", trace)
    assert rc == 1
    (said,) = [e for e in events if e["event"] == "post-mortem"]
    assert "stopped on an exception outside any call" in said["why"] and said["trace"] == str(pm)
    assert said["distrusted"] == 0 and set(said["cpus"]) == {str(k) for k in range(CPUS)}
    native = native_firings(native_exe, ticks)
    salvaged = events_by_cpu(bt2_rows(pm))
    assert sorted(salvaged) == list(range(CPUS))
    for cpu in range(CPUS):
        assert salvaged[cpu] == native, f"CPU {cpu}"  # every event since the enabling, the ring holds them all
        assert salvaged[cpu][-1] == native[-1] == ("hk:sched:run:tick", [ticks - 1, native[-1][1][1]])
        assert said["cpus"][str(cpu)]["events"] == ticks
        # The session's own output and --trace end where the kernel did: the tail no consumer read is in them too.
        assert [(e["probe"], e["args"]) for e in events if e["event"] == "fire" and e["cpu"] == cpu] == native
    assert events_by_cpu(bt2_rows(trace)) == salvaged


def test_an_overwriting_ring_gives_the_newest_events_up_to_the_panic(panicking, native_exe, tmp_path):
    """--overflow overwrite: the ring holds its newest packets, so the post-mortem is the native run's last events."""
    ticks = 1000  # far more than 8 packets of 1 KiB hold
    rc, _, _ = qemu(panicking("x86_64"), "--buffer-size", "8192", "--overflow", "overwrite", "--enable",
                         "hk:sched::", "--run", "panic_after", "--arg", ticks, "--arg", CPUS, "--post-mortem",
                         tmp_path / "pm", "-q")
    assert rc == 1
    native = native_firings(native_exe, ticks)
    salvaged = events_by_cpu(bt2_rows(tmp_path / "pm"))
    for cpu in range(CPUS):
        got = salvaged[cpu]
        assert 100 < len(got) < ticks and got == native[-len(got):], f"CPU {cpu}: {len(got)} events"


def test_a_kernel_the_timeout_gives_up_on_is_read_as_it_hangs(panicking, native_exe, tmp_path):
    ticks = 40
    rc, events, _ = qemu(panicking("x86_64"), "--enable", "hk:sched::", "--run", "hang_after", "--arg", ticks,
                         "--timeout", "3", "--post-mortem", tmp_path / "pm")
    assert rc == 1
    (said,) = [e for e in events if e["event"] == "post-mortem"]
    assert "hang_after: did not return" in said["why"], said
    native = native_firings(native_exe, ticks)
    assert events_by_cpu(bt2_rows(tmp_path / "pm")) == {cpu: native for cpu in range(CPUS)}


def test_a_machine_that_ends_is_read_in_the_ram_the_host_still_maps(panicking, native_exe, tmp_path):
    ticks = 60
    rc, events, _ = qemu(panicking("x86_64"), "--enable", "hk:sched::", "--run", "die_after", "--arg", ticks, "--arg",
                         CPUS, "--post-mortem", tmp_path / "pm")
    assert rc == 1
    (said,) = [e for e in events if e["event"] == "post-mortem"]
    assert "QEMU" in said["why"], said
    native = native_firings(native_exe, ticks)
    assert events_by_cpu(bt2_rows(tmp_path / "pm")) == {cpu: native for cpu in range(CPUS)}


def native_of(native_exe, call: str, arg: int, provider: str) -> list[tuple[str, list]]:
    from native import Call, run_native

    return [(e["probe"], e["args"]) for e in run_native(native_exe, [Call(call, (arg,))])
            if "probe" in e and e["probe"].startswith(provider)]


@pytest.mark.parametrize("transport", ["shared", "serial"])
def test_each_session_is_read_into_its_own_trace_found_by_the_registry(transport, panicking, native_exe, tmp_path):
    """The kernel opens its own flight recorder (panic.c's flight_open: session "flight", the scheduler's probes,
    overwrite) beside the host's default session (the vfs probes): after the panic each session's trace holds its own
    filter of the native run. On the serial transport no RAM is shared and the kernel never said where its areas
    are: QEMU saves the RAM (pmemsave) and the runtime's registry, sdt_session_table, says where every session is."""
    ticks = 50
    rc, events, _ = qemu(panicking("x86_64"), "--transport", transport, "--run", "flight_open:long", "--arg", CPUS,
                         "--cpu", "0", "--enable", "hk:vfs::", "--run", "vfs_lookup_id", "--arg", "1",
                         "--run", "panic_after", "--arg", ticks, "--arg", CPUS, "--post-mortem", tmp_path / "pm")
    assert rc == 1
    (opened,) = [e for e in events if e["event"] == "return" and e["symbol"] == "flight_open"]
    assert opened["value"] == 1  # the first session after the default one
    said = {e["session"]: e for e in events if e["event"] == "post-mortem"}
    assert sorted(said) == ["default", "flight"] and said["flight"]["trace"] == f"{tmp_path / 'pm'}-flight"
    assert all(e["distrusted"] == 0 for e in said.values()), said
    vfs, sched = native_of(native_exe, "vfs_lookup_id", 1, "hk:vfs:"), native_firings(native_exe, ticks)
    assert vfs and events_by_cpu(bt2_rows(tmp_path / "pm")) == {cpu: vfs for cpu in range(CPUS)}
    assert events_by_cpu(bt2_rows(tmp_path / "pm-flight")) == {cpu: sched for cpu in range(CPUS)}


def test_a_damaged_packet_is_counted_never_trusted_and_an_event_in_flight_is_cut(panicking, native_exe, tmp_path):
    """After the panic, in the machine's RAM: bytes of a closed packet overwritten, an event of an open packet made
    no probe's, and a recorder said to be writing (nesting): the salvage leaves the packet out, counted with why, cuts
    the open packet at the event that does not parse, and cuts the other open packet's last event."""
    import io

    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session
    from sdtgen.targets.base import Halted

    ticks = 100
    image = panicking("x86_64")
    session = open_session("qemu", str(image), Reporter(as_json=True, out=io.StringIO()), cpus=CPUS,
                           buffer_size=8192)
    try:
        session.enable("hk:sched::")
        with pytest.raises(Halted):
            session.run("panic_after", [ticks, CPUS])
        target, arch = session.target, session.image.arch
        rings = target.rings()
        native = native_firings(native_exe, ticks)

        def salvaged():
            return salvage(rings, session.decoder, target.booted.clock_hz, arch.bits, arch.little)

        whole = salvaged()
        assert whole.distrusted == 0 and [firings(whole.cpus[k]) for k in range(CPUS)] == [native] * CPUS
        # CPU 1's first packet: its magic overwritten.
        ring = target.consumer.rings[1].ring
        assert target.consumer.rings[1].packet_size == 1024  # 8192 bytes a ring, 8 packets
        first = whole.cpus[1].packets[0][1]
        assert first.packet.seq == 1 and 0 < len(first.events) < ticks
        target.ram.write(ring + PACKET.offset("magic", arch.bits), b"\xde\xad\xbe\xef")
        # CPU 1's open packet: an event in its middle given an id no probe has, so it and those after it are cut.
        open_events = len(whole.cpus[1].packets[-1][1].events)
        bad = open_events // 2
        area1 = target.consumer.rings[1].area
        current, ring_virt = (int.from_bytes(target.ram.read(area1 + CPU.offset(f, arch.bits), 8), "little")
                              for f in ("current", "ring"))
        at = ring + (current - ring_virt) + PACKET.size(arch.bits) + bad * 32  # each tick event: 32 bytes
        target.ram.write(at + EVENT.offset("id", arch.bits), b"\xff\xff\xff\xff")
        # CPU 0: a recorder writing its last event.
        area = target.consumer.rings[0].area
        target.ram.write(area + CPU.offset("nesting", arch.bits), (1).to_bytes(8, "little"))
        got = salvaged()
        assert got.distrusted == 1 and "magic 0xefbeadde" in got.why[0], got.why
        assert firings(got.cpus[1]) == native[len(first.events):ticks - open_events + bad]
        assert got.cpus[1].cut == open_events - bad and not got.cpus[1].in_flight
        assert got.cpus[0].in_flight and got.cpus[0].cut == 1
        assert firings(got.cpus[0]) == native[:-1]
    finally:
        session.close()


def test_a_registry_that_does_not_check_is_said_and_its_session_not_read(panicking, tmp_path):
    """The flight recorder's struct sdt_session damaged in RAM after the panic (its magic): one warning says so,
    its rings are not read, and the default session's still are."""
    import io

    from sdtgen.layout import REGISTRY, SESSION
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session
    from sdtgen.targets.base import Halted

    out = io.StringIO()
    session = open_session("qemu", str(panicking("x86_64")), Reporter(as_json=True, out=out), cpus=CPUS)
    try:
        assert session.run("flight_open:long", [CPUS], cpu=0) == 1
        session.enable("hk:sched::")
        with pytest.raises(Halted):
            session.run("panic_after", [20, CPUS])
        target, bits = session.target, session.image.arch.bits
        rings = target.rings()
        table = rings.registry
        flight = int.from_bytes(target.ram.read(table + REGISTRY.offset("sessions", bits) + 8, 8), "little")
        target.ram.write(rings.kernel(flight) + SESSION.offset("magic", bits), b"\0\0\0\0")
        session.salvaged = None  # read again, as the damage left it
        session.post_mortem("again", final=False)
    finally:
        session.close()
    said = [json.loads(x) for x in out.getvalue().splitlines()]
    warnings = [e["text"] for e in said if e["event"] == "warning" and "sdt_session" in e["text"]]
    assert len(warnings) == 1 and "session 1's struct sdt_session" in warnings[0] and "damaged" in warnings[0]
    again = [e for e in said if e["event"] == "post-mortem" and e["why"] == "again"]
    assert [e["session"] for e in again] == ["default"] and again[0]["cpus"]["0"]["events"] == 20


def test_the_hosts_own_session_is_read_after_a_panic_as_any_other(panicking, native_exe, tmp_path):
    """--session with --post-mortem: the host's own session's rings, read out of the panicked machine, are its own
    filter of the native run, none distrusted (its packets carry its session's id, the post-mortem's trace one
    stream)."""
    ticks = 50
    rc, events, err = qemu(panicking("x86_64"), "--session", "mine", "--buffer-size", "65536", "--enable",
                           "hk:sched::", "--run", "panic_after", "--arg", ticks, "--arg", CPUS, "--post-mortem",
                           tmp_path / "pm")
    assert rc == 1, err
    said = {e["session"]: e for e in events if e["event"] == "post-mortem"}
    assert "mine" in said and all(e["distrusted"] == 0 for e in said.values()), said
    native = native_firings(native_exe, ticks)
    assert events_by_cpu(bt2_rows(tmp_path / "pm-mine")) == {cpu: native for cpu in range(CPUS)}
