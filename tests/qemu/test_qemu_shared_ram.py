"""The shared transport: QEMU's RAM is a file the host maps too, the kernel says where each CPU's ring is
(`shared on`), and the host reads closed packets there while the kernel runs, claiming each as
sdt_consume_done does. The line carries commands and replies only. Checked against the native run of the
fixture's C source, and against babeltrace2 reading the trace the packets went to."""

from __future__ import annotations

import subprocess
import time

import pytest
from helpers import need_tool
from native_oracle import Call
from qemu_helpers import Qemu, qemu_json
from test_qemu_firings import PURE, native, ours, run_args

from sdtgen.trace.model import Lost

RUNS = 12  # runs of one call, each under half a ring: together many times the ring
BUFFER = 16 << 10  # bytes a CPU's ring holds: 8 packets of 2 KiB
TICKS = 40  # sched_run(TICKS): ~40 events of ~40 bytes, under half the ring



@pytest.mark.parametrize("arch", ["riscv64", "x86_64"])
def test_packets_are_read_in_memory_and_claimed_so_the_ring_is_reused_with_nothing_lost(qemu_kernel, native_exe,
                                                                                         arch):
    image = qemu_kernel(arch)
    q = Qemu(image, cpus=4, arm="branch", buffer_size=BUFFER)
    target = q.session.target
    try:
        assert target.ram is not None  # the fixture platform says where its rings are (sdt_control_ops.phys)
        q.session.enable("hk:sched:run:")
        q.events()
        expected = native(native_exe, [Call("sched_run", (TICKS,))])
        for _ in range(RUNS):
            q.session.run("sched_run:long", [TICKS])
            events = q.events()
            for cpu in range(4):
                assert ours(image, events, cpu) == expected, f"CPU {cpu}"
        assert q.session.target.lost() == {cpu: Lost(0, 0) for cpu in range(4)}
        assert target.packets.kept == 0  # no packet came on the line
        packets = RUNS * 4 * sum(1 for p, _ in expected[0]) * 40 // 2048
        assert target.consumer.dropped == 0 and packets > 4 * 8  # the rings went round several times
    finally:
        q.close()


def test_a_trace_written_from_shared_memory_opens_in_babeltrace2_with_every_event(qemu_kernel, native_exe, tmp_path):
    need_tool("babeltrace2", "babeltrace2")
    image = qemu_kernel("riscv64")
    trace = tmp_path / "trace"
    events = qemu_json(image, "--cpus", "4", "--arm", "branch", "--enable", ":::", "--trace", trace,
                       *run_args(PURE))
    expected = native(native_exe, PURE)
    for cpu in range(4):
        assert ours(image, events, cpu) == expected
    out = subprocess.run(["babeltrace2", str(trace)], capture_output=True, text=True, check=True).stdout
    assert len(out.splitlines()) == 4 * len(expected[0])


def test_the_serial_transport_still_carries_every_packet_on_the_line(qemu_kernel, native_exe):
    image = qemu_kernel("riscv64")
    events = qemu_json(image, "--transport", "serial", "--cpus", "4", "--arm", "branch", "--enable", ":::",
                       *run_args(PURE))
    expected = native(native_exe, PURE)
    for cpu in range(4):
        assert ours(image, events, cpu) == expected


def test_shared_off_puts_the_packets_back_on_the_line(qemu_kernel):
    image = qemu_kernel("riscv64")
    q = Qemu(image, cpus=1, transport="shared")
    try:
        target = q.session.target
        target.command("shared off", "shared")  # what the host says when it cannot use the rings it was told of
        target.poll = None
        q.session.enable("hk:proc:exit:")
        q.events()
        q.session.run("proc_exit:void", [5])
        assert [e["args"] for e in q.events() if e["event"] == "fire"] == [[5]]
        assert target.packets.kept >= 1  # they came on the line
    finally:
        q.close()


def test_with_overwrite_each_packet_is_read_whole_or_counted_overwritten_never_both(qemu_kernel, native_exe,
                                                                                   monkeypatch):
    """The writer overwrites unread packets while the host reads them: what reaches the host is the native
    run's events in order with gaps, and what did not is exactly what the kernel counts overwritten. A slow
    host (a millisecond after each copy, before its claim) makes the writer win many of the races."""
    from sdtgen.transport.shared_ram import SharedRam

    copy = SharedRam.read

    def slow_copy(self, addr, size):
        data = copy(self, addr, size)
        if size > 64:  # a packet, not a counter
            time.sleep(0.001)
        return data

    monkeypatch.setattr(SharedRam, "read", slow_copy)
    image = qemu_kernel("riscv64")
    ticks = 100_000  # ~4 MB of events a vCPU through a 16 KiB ring, for tens of milliseconds
    q = Qemu(image, cpus=4, arm="branch", buffer_size=BUFFER, overflow="overwrite")
    try:
        q.session.enable("hk:sched:run:tick")
        q.events()
        q.session.run("sched_run:long", [ticks])
        q.session.drain()
        events = q.events()
        lost = q.session.lost()
        damaged = q.session.damaged
        raced = q.session.target.consumer.dropped
    finally:
        q.close()
    (expected, _) = native(native_exe, [Call("sched_run", (ticks,))])
    assert damaged == 0 and raced > 0  # copies the writer overwrote before their claim: dropped, not handed on
    assert all(x.overwritten > 0 for x in lost.values())  # the ring went round faster than the host read it
    for cpu in range(4):
        got = ours(image, events, cpu)[0]
        assert got, f"CPU {cpu}: nothing read"
        assert len(got) + lost[cpu].overwritten == len(expected) and lost[cpu].discarded == 0, f"CPU {cpu}"
        it = iter(expected)
        assert all(e in it for e in got), f"CPU {cpu}: not the native run's events in order"
