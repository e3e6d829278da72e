"""Snapshots of a flight recorder while its CPUs record (docs/sessions.md, "Snapshots"), on the hosted platform and
the real CPU, under AddressSanitizer (tests/runtime/hosted/snapshot.c): three threads, each a CPU, fire tick(i, cpu)
for i = 0, 1, 2, ... in order, which is the native run's truth. A snapshot of each CPU holds the last N packets its
writer closed and the open packet's events, in time order: its events are exactly the last ones the thread fired
(CPU by CPU, read by this test out of the snapshot block with the host's packet decoder). Taken while the threads go
on firing, every snapshot is one unbroken run of what a thread fired, and a packet the writer lapped while it was
copied is dropped and counted, never kept torn. A snapshot never waits: one interrupted on its CPU by a handler that
snapshots again is refused and counted. Refusals (memory short, bad N, no area, not open) change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, need_tool, run
from probe_source import called_probes
from programs import FakeProbe, compile_for

from sdtgen.event_format import event_format
from sdtgen.layout import PACKET as PACKET_LAYOUT
from sdtgen.layout import SNAPSHOT, VALUES
from sdtgen.probes import probe_key
from sdtgen.trace.packets import Decoder

HERE = Path(__file__).resolve().parent
NCPU, PACKET, RING_PACKETS, SNAP_PACKETS, QUIET, AFTER = 3, 1024, 8, 4, 2000, 77
HEAD = VALUES["SDT_SNAPSHOT_HEAD"]
TICK, TRIGGER_AT = "ss:snap:run:tick", 1500
# every firing recorded; CPU 0's firing with arg0 TRIGGER_AT snapshots the session the program runs in
TRIGGER = f"ss::: {{}}\nss::: /arg0 == {TRIGGER_AT} && arg1 == 0/ {{ snapshot(); }}"


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("snapshot")
    gcc = need_tool("gcc", "gcc")
    run(["make", "-C", str(ROOT / "fixtures" / "process"), f"O={out}", f"SDTGEN={SDTGEN}",
         f"KERNEL_SRCS={HERE / 'hosted' / 'snapshot.c'}", "KERNEL_CFLAGS=", "PROGRAM_SRCS=", "EXE=snapshot",
         f"CC={gcc} -fsanitize=address -fno-omit-frame-pointer"])
    d = out / "run"
    d.mkdir()
    (program,) = compile_for(TRIGGER, [FakeProbe(*TICK.split(":"), tick().args, probe_key(tick().symbol))]).programs
    (d / "program").write_bytes(program.code)
    proc = run([str(out / "snapshot"), str(d), str(d / "program")], timeout=300)  # ASan's report fails the run
    return {x["call"]: x for x in map(json.loads, proc.stdout.splitlines())}, d


def tick():
    (p,) = [p for p in called_probes(HERE / "hosted") if p.spec == TICK]
    return p


def decoder() -> Decoder:
    p = tick()
    return Decoder([event_format(probe_key(p.symbol), p.spec, p.args, 64)], 64, stream=1)


def block(d: Path, name: str, cpu: int) -> tuple[dict, list[tuple[int, int]], int]:
    """CPU ``cpu``'s block of snapshot ``name``: its head, its events' (arg0, arg1) oldest first (each packet's number
    checked to follow the one before it, from the head's first_seq), and what the thread had fired by then."""
    raw = (d / f"{name}_{cpu}").read_bytes()
    st = SNAPSHOT.struct(64)
    head = dict(zip(SNAPSHOT.names(), st.unpack_from(raw), strict=True))
    assert head["magic"] == VALUES["SDT_SNAPSHOT_MAGIC"] and head["cpu"] == cpu and not head["seq"] % 2, head
    dec, events = decoder(), []
    for k in range(head["packets"]):
        packet, evs = dec.events(raw[HEAD + k * PACKET:HEAD + (k + 1) * PACKET])
        assert (packet.seq, packet.cpu) == (head["first_seq"] + k + 1, cpu), (name, cpu, k)
        events += [tuple(e.args) for e in evs]
    fired = int.from_bytes((d / f"fired_{name}_{cpu}").read_bytes(), "little")
    assert PACKET_LAYOUT.size(64) < HEAD
    return head, events, fired


def test_a_quiet_snapshot_holds_each_cpus_last_packets_exactly_the_last_firings(ran):
    lines, d = ran
    assert lines["open_flight"]["returned"] == 1 and lines["enable_flight"]["returned"] == 2  # tick and wide
    assert lines["quiet"]["returned"] == NCPU * (SNAP_PACKETS + 1)
    for cpu in range(NCPU):
        head, events, fired = block(d, "quiet", cpu)
        assert fired == QUIET
        assert (head["packets"], head["open"], head["lapped"], head["cut"]) == (SNAP_PACKETS + 1, 1, 0, 0)
        assert events == [(i, cpu) for i in range(fired - len(events), fired)], cpu
        assert len(events) > SNAP_PACKETS * 20  # four whole packets of them, and some of the open one
        assert head["overwritten"] > 0  # the ring went round many times before: a flight recorder's


def test_recording_goes_on_after_a_snapshot(ran):
    lines, d = ran
    assert lines["after"]["returned"] == NCPU * (SNAP_PACKETS + 1)
    for cpu in range(NCPU):
        head, events, fired = block(d, "after", cpu)
        assert fired == QUIET + AFTER and head["seq"] == 4  # the second snapshot
        assert events == [(i, cpu) for i in range(fired - len(events), fired)], cpu


@pytest.mark.parametrize("name", ["run", "lapped"])
def test_a_snapshot_taken_while_cpus_record_is_one_unbroken_run_of_their_firings(ran, name):
    lines, d = ran
    lapped, kept = 0, 0
    for cpu in range(NCPU):
        head, events, fired = block(d, name, cpu)
        first = events[0][0] if events else 0
        assert events == [(i, cpu) for i in range(first, first + len(events))], (name, cpu)
        assert not events or events[-1][0] < fired
        lapped += head["lapped"]
        kept += len(events)
    assert kept  # a CPU's packets may all have been lapped while they were copied, not every CPU's
    if name == "lapped":
        assert lapped > 0
        assert lines["run_lapped"]["returned"] >= lapped and lines["run_lapped"]["unchanged"] == 1
    assert lines["run_snapshots"]["unchanged"] == 1 and "run_refused" not in lines


def test_a_cpus_snapshot_taken_anywhere_inside_its_recorders_keeps_only_events_it_fired(ran):
    """A thread records events of two sizes into a ring that laps many times and snapshots its own CPU from inside
    the recorder (at its read of the clock, as an interrupt or a panic there would; and from signal handlers): the
    copy of its open packet holds only events the thread fired, in order, never a header left in the slot by its
    last lap (a recorder stores an event's header before the offset that claims it)."""
    said, _ = ran
    assert said["interrupted"]["returned"] > 1000 and said["interrupted_wrong"]["returned"] == 0
    assert said["interrupted"]["unchanged"] == 1


def test_a_snapshot_never_waits_a_second_one_on_its_cpu_is_refused_and_counted(ran):
    lines, _ = ran
    assert lines["busy_seen"]["returned"] >= 1 and lines["busy_seen"]["unchanged"] == 1
    assert lines["busy_other"]["returned"] == 0
    assert lines["close_flight"]["returned"] == 2  # the sites of tick and wide it alone kept
    assert lines["closed_flight"]["returned"] == VALUES["SDT_ERR_SESSION"]


def test_refusals_say_why_and_change_nothing(ran):
    lines, _ = ran
    need, plain = lines["bytes"]["returned"], lines["bytes"]["unchanged"]
    assert need - plain == NCPU * (HEAD + 4 * PACKET)  # 3 closed packets and the open one, each CPU
    for call, error in {"memory_short": "SDT_ERR_MEMORY", "too_many": "SDT_ERR_ARG", "wraps": "SDT_ERR_ARG",
                        "no_area": "SDT_ERR_ARG", "default": "SDT_ERR_ARG", "null": "SDT_ERR_SESSION",
                        "closed": "SDT_ERR_SESSION"}.items():
        assert lines[call] == {"call": call, "returned": VALUES[error], "unchanged": 1}, call


def test_the_host_reads_a_snapshot_as_the_post_mortem_reads_a_ring_and_trusts_no_damaged_packet(ran):
    """The host's reader of snapshot blocks (sdtgen/transport/salvage.py's snapshot, the post-mortem's checks) on the
    blocks the runtime wrote: every event the test decoded itself; a packet whose magic is damaged, and a block
    whose seq says it was being written, are counted and left out, the rest kept."""
    from sdtgen.transport.salvage import snapshot

    _, d = ran
    base, size = 0x10000, HEAD + (SNAP_PACKETS + 1) * PACKET
    memory = bytearray(b"".join((d / f"quiet_{cpu}").read_bytes() for cpu in range(NCPU)))
    blocks = tuple(base + cpu * size for cpu in range(NCPU))

    def read(addr: int, n: int) -> bytes:
        return bytes(memory[addr - base:addr - base + n])

    def got():
        dec = decoder()
        dec.stream = 0  # the reader writes every session's packets as stream 0
        return snapshot(read, blocks, SNAP_PACKETS, PACKET, dec, 10**9, 64, True, 1)

    whole = got()
    assert whole.distrusted == 0
    for cpu in range(NCPU):
        assert [tuple(e.args) for e in whole.cpus[cpu].events] == block(d, "quiet", cpu)[1]
    memory[size + HEAD + 2 * PACKET] ^= 0xFF  # CPU 1's third packet's magic
    memory[2 * size + SNAPSHOT.offset("seq", 64)] |= 1  # CPU 2's block being written
    damaged = got()
    assert damaged.distrusted == 2 and "magic" in " ".join(damaged.why) and "being written" in " ".join(damaged.why)
    assert [tuple(e.args) for e in damaged.cpus[0].events] == block(d, "quiet", 0)[1]
    assert 2 not in damaged.cpus
    kept = [tuple(e.args) for e in damaged.cpus[1].events]
    assert kept and len(kept) < len(block(d, "quiet", 1)[1]) and set(kept) <= set(block(d, "quiet", 1)[1])


def test_a_probes_firing_with_a_predicate_snapshots_its_session(ran):
    """D's snapshot() in the session's program: CPU 0's firing with arg0 1500 took the one snapshot, before its own
    event was written, so CPU 0's block ends with the firing before it; the others hold an unbroken run of theirs.
    In a session without a snapshot area the same action is a program error, counted once."""
    lines, d = ran
    assert [lines[k]["returned"] for k in ("trigger_open", "trigger_enable", "bare_open", "bare_enable")] == \
        [1, 1, 2, 1]
    assert lines["trigger_snapshots"] == {"call": "trigger_snapshots", "returned": 1, "unchanged": 1}
    assert lines["bare_errors"] == {"call": "bare_errors", "returned": 1, "unchanged": 1}
    head, events, _ = block(d, "trigger", 0)
    assert head["seq"] == 2 and head["packets"] == SNAP_PACKETS + 1 and head["lapped"] == 0
    assert events == [(i, 0) for i in range(TRIGGER_AT - len(events), TRIGGER_AT)]
    for cpu in range(1, NCPU):
        _, events, _ = block(d, "trigger", cpu)
        first = events[0][0] if events else 0
        assert events == [(i, cpu) for i in range(first, first + len(events))], cpu


def test_a_snapshot_taken_while_the_host_reads_one_is_said_never_mixed_in(ran):
    """A kernel running on may snapshot again while the host reads (through `read`, one piece at a time): a block
    that changed under the reader (the runtime's second snapshot, after_K, in place of the first, quiet_K, once its
    head was read) is left out and said; blocks of two snapshots (CPU 2's of the second) are said."""
    from sdtgen.transport.salvage import snapshot

    _, d = ran
    base, size = 0x10000, HEAD + (SNAP_PACKETS + 1) * PACKET
    first = b"".join((d / f"quiet_{cpu}").read_bytes() for cpu in range(NCPU))
    later = b"".join((d / f"after_{cpu}").read_bytes() for cpu in range(NCPU))
    blocks = tuple(base + cpu * size for cpu in range(NCPU))

    def got(read):
        dec = decoder()
        dec.stream = 0
        return snapshot(read, blocks, SNAP_PACKETS, PACKET, dec, 10**9, 64, True, 1)

    memory = bytearray(first)

    def read_while_snapshotted(addr: int, n: int) -> bytes:
        out = bytes(memory[addr - base:addr - base + n])
        if addr == base:  # CPU 0's head read: the kernel takes its next snapshot now
            memory[:] = later
        return out

    rewritten = got(read_while_snapshotted)
    assert rewritten.distrusted == 1 and "written again while it was read" in rewritten.why[0]
    assert 0 not in rewritten.cpus and sorted(rewritten.cpus) == [1, 2]

    mixed = bytearray(first[:2 * size] + later[2 * size:])
    two = got(lambda addr, n: bytes(mixed[addr - base:addr - base + n]))
    assert two.distrusted == 1 and "different snapshots" in two.why[0]
