"""The shared transport: QEMU's RAM is a file the host maps too, the kernel says where each CPU's ring is
(`shared on`), and the host reads closed packets there while the kernel runs, claiming each as
sdt_consume_done does. The line carries commands and replies only. Checked against the native run of the
fixture's C source, and against babeltrace2 reading the trace the packets went to."""

from __future__ import annotations

import subprocess

import pytest
from helpers import need_tool
from native_oracle import Call, build_fixture_native
from qemu_helpers import Qemu, qemu_json
from test_qemu_firings import PURE, native, ours, run_args

from sdtgen.trace.model import Lost

RUNS = 12  # runs of one call, each under half a ring: together many times the ring
BUFFER = 16 << 10  # bytes a CPU's ring holds: 8 packets of 2 KiB
TICKS = 40  # sched_run(TICKS): ~40 events of ~40 bytes, under half the ring


@pytest.fixture(scope="module")
def native_exe(tmp_path_factory):
    return build_fixture_native(tmp_path_factory.mktemp("native"))


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
