"""Machines (docs/trace.md, "Machines"): a session given a machine name says which machine its trace comes from,
and puts the kernel's clock in the host's real time once, when it starts. The truth the correlation is held to
is never sdtgen's: a program's own CLOCK_REALTIME reading before each firing, the host's clock read around a call
in the emulator, a recording's packets sent at moments the test notes."""

from __future__ import annotations

import io
import socket
import time

import pytest
from serial_line import Packet, event, info
from wall_program import FIRED, LATE_NS, RATE_NS, build_wall, fired

from sdtgen.errors import SdtError
from sdtgen.image import Image
from sdtgen.session.machine import correlate
from sdtgen.session.reporter import Reporter
from sdtgen.session.session import Session
from sdtgen.session.starts import open_session
from sdtgen.targets import open_target
from sdtgen.trace.model import UNBOUNDED, check_machine_name, default_machine_name, machine_id, ticks_to_ns

EMULATED = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(em);
SDT_PROBE_DEFINE1(em, , , tick, "long");
long kmain(long v) { SDT_PROBE1(em, , , tick, v); return v; }
"""


@pytest.fixture(scope="module")
def wall(tmp_path_factory):
    return build_wall(tmp_path_factory.mktemp("wall"))


@pytest.mark.parametrize("name", ["a", "board-7", "qemu.x86_64_2", "x" * 64, "A.-_9"])
def test_a_machine_name_is_a_path_component_relayd_takes(name):
    assert check_machine_name(name) == name


@pytest.mark.parametrize(("name", "why"), [("", "is empty"), (".hidden", "starts with '.'"),
                                           ("a/b", "has a character other than"), ("a b", "has a character other"),
                                           ("é", "has a character other"), ("x" * 65, "is 65 characters")])
def test_anything_else_is_refused_in_one_line_naming_the_option(name, why):
    with pytest.raises(SdtError, match=f"^sdtgen: error: --machine .*{why}.*; give --machine a name") as e:
        check_machine_name(name, "--machine")
    assert "\n" not in str(e.value)


def test_the_default_name_is_the_hosts_then_the_kind_then_a_guests_architecture():
    host = socket.gethostname()
    assert default_machine_name("attach") == check_machine_name(f"{host}-attach")
    assert default_machine_name("qemu", "aarch64") == f"{host}-qemu-aarch64"
    assert machine_id("a") == machine_id("a") != machine_id("b") and 0 < machine_id("a") < 1 << 32


def test_the_narrowest_round_trip_is_kept_and_its_midpoint_is_the_kernels_reading():
    """Readings of a made-up clock pair: the second round trip (20 ns) is the narrowest."""
    host = iter([1000, 1100, 5000, 5020, 9000, 9050])
    kernel = iter([40, 4010, 8030])  # ticks of a 1 GHz clock
    m = correlate("m", lambda: next(kernel), 1_000_000_000, samples=3, now=lambda: next(host))
    assert (m.offset_ns, m.uncertainty_ns) == (5010 - 4010, 10)


def test_a_process_targets_events_fall_where_the_program_says_it_fired(wall):
    """Each firing carries the real time the program read just before it: the event's time in the host's real time
    (the correlation's offset plus its clock) is no earlier than that, less the correlation's uncertainty."""
    out = io.StringIO()
    s = open_session("process", str(wall), Reporter(as_json=True, out=out), machine="proc-a", timeout=60)
    try:
        s.enable(FIRED)
        for tag in range(4):
            s.run("wall_fire", [tag])
        s.drain()
    finally:
        s.close()
    m, hz = s.machine, s.last_target.booted.clock_hz
    assert (m.name, m.machine_id) == ("proc-a", machine_id("proc-a")) and m.uncertainty_ns > 0
    events = fired(out)
    assert [e["args"][0] for e in events] == [0, 1, 2, 3]
    for e in events:
        late = m.offset_ns + ticks_to_ns(e["ts"], hz) - e["args"][1]
        assert -m.uncertainty_ns - RATE_NS <= late <= m.uncertainty_ns + LATE_NS, (late, m)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_an_emulated_kernels_event_falls_between_the_hosts_readings_around_its_call(tmp_path, arch):
    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, arch, EMULATED, "em")
    out = io.StringIO()
    s = open_session("emulator", str(image), Reporter(as_json=True, out=out), machine="emu")
    try:
        s.enable("em:::tick")
        before = time.time_ns()
        s.run("kmain", [5])
        after = time.time_ns()
        s.drain()
    finally:
        s.close()
    m, hz = s.machine, s.last_target.booted.clock_hz
    [e] = fired(out)
    at = m.offset_ns + ticks_to_ns(e["ts"], hz)
    assert before - m.uncertainty_ns - RATE_NS <= at <= after + m.uncertainty_ns + RATE_NS, (before, at, after, m)


def test_a_recording_is_correlated_by_its_first_packets_arrival_an_upper_bound(tmp_path):
    """No command goes to a kernel that only streams: its first packet's end is put at the moment it arrived (the
    test notes when it handed the packet over), which bounds the offset from above; the trace opens with it."""
    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, "x86_64", EMULATED, "rc")
    with Image(str(image)) as im:
        key = next(p.key for p in im.probes() if p.spec == "em:::tick")
    hz = 1_000_000_000
    first = Packet(0, 1, [event(7_000_000, key, (1,))], 6_000_000, 8_000_000)
    second = Packet(0, 2, [event(9_000_000, key, (2,))], 8_500_000, 9_500_000)
    handed: list[int] = []

    def line():
        yield info(hz)
        handed.append(time.time_ns())
        yield first.sent()
        yield second.sent()
        handed.append(time.time_ns())

    trace = tmp_path / "trace"
    s = Session(str(image), Reporter(as_json=True, out=io.StringIO()),
                lambda host: open_target("listen", host, source=line()), trace=(str(trace), "ctf"), machine="rec")
    try:
        s.listen()
        s.finish_trace()
    finally:
        s.close()
    m = s.machine
    assert m.uncertainty_ns == UNBOUNDED and m.name == "rec"
    assert handed[0] - ticks_to_ns(first.end, hz) <= m.offset_ns <= handed[1] - ticks_to_ns(first.end, hz), m
    assert (trace / "metadata").is_file()


def test_a_recording_that_sent_no_packet_still_writes_its_trace_and_says_its_clock_is_not_correlated(tmp_path):
    from helpers import build_c_kernel

    image = build_c_kernel(tmp_path, "x86_64", EMULATED, "rc")
    trace = tmp_path / "trace"
    s = Session(str(image), Reporter(as_json=True, out=io.StringIO()),
                lambda host: open_target("listen", host, source=iter([info(1_000_000_000)])),
                trace=(str(trace), "ctf"), machine="silent")
    try:
        s.listen()
        s.finish_trace()
    finally:
        s.close()
    text = (trace / "metadata").read_text()
    assert '\thostname = "silent";' in text and "clock_offset_uncertainty_ns = -1;" in text
    assert "not correlated with the host's real time" in text
