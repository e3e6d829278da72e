"""A QEMU guest as a machine (docs/trace.md, "Machines"): its kernel answers `clock` through its control core (a
64-bit value on i386 too), and the correlation puts its events inside the host's real-time readings around the
call that fired them."""

from __future__ import annotations

import time

import pytest
from qemu_helpers import ARCHES, Qemu
from wall_program import RATE_NS

from sdtgen.trace.model import ticks_to_ns

PROBE = "hk:kern:main:done"


@pytest.mark.parametrize("arch", ARCHES)
def test_a_guests_event_falls_between_the_hosts_readings_around_its_call(qemu_kernel, arch):
    q = Qemu(qemu_kernel(arch), machine=f"guest-{arch}", timeout=120)
    try:
        s = q.session
        m, hz = s.machine, s.target.booted.clock_hz
        assert m.name == f"guest-{arch}" and m.uncertainty_ns > 0
        s.enable(PROBE)
        before = time.time_ns()
        s.run("kmain", [1])
        after = time.time_ns()
        s.drain()
        fired = [e for e in q.events() if e["event"] == "fire" and e["probe"] == PROBE]
    finally:
        q.close()
    assert fired
    for e in fired:
        at = m.offset_ns + ticks_to_ns(e["ts"], hz)
        assert before - m.uncertainty_ns - RATE_NS <= at <= after + m.uncertainty_ns + RATE_NS, (before, at, after, m)
