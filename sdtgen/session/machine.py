"""Which machine a session traces, and where its kernel's clock stands against the host's real time
(docs/trace.md, "Machines").

Correlated once, when the session starts: a target that reads its clock on request (CLOCK: the control core's
`clock`, the emulator's clock routine) is read between two readings of the host's CLOCK_REALTIME, a few times,
and the narrowest round trip kept: the kernel's reading is put at its midpoint, within half of it (NTP's way,
with no assumption on which way the line is slower). A kernel that only streams (a recording) is asked nothing:
its first packet's end is put at the moment the packet arrived, an upper bound (it ended no later), how much
earlier unknown (Machine.uncertainty_ns UNBOUNDED).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sdtgen.trace.model import UNBOUNDED, Machine, check_machine_name, machine_id, ticks_to_ns

SAMPLES = 4  # round trips made; the narrowest is kept (a line busy with a packet widens one, not all)


def correlate(name: str, read: Callable[[], int], hz: int, samples: int = SAMPLES,
              now: Callable[[], int] = time.time_ns) -> Machine:
    """Machine ``name`` with its clock's offset: ``read()`` (the kernel clock's ticks, ``hz`` a second) between two
    readings of ``now()`` (the host's real time in ns), the narrowest of ``samples`` round trips."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        before = now()
        ticks = read()
        after = now()
        if after < before:  # the real-time clock was stepped meanwhile: this round trip says nothing
            continue
        half = (after - before + 1) // 2
        offset = before + (after - before) // 2 - ticks_to_ns(ticks, hz)
        if best is None or half < best[1]:
            best = (offset, half)
    if best is None:  # stepped every time (an NTP daemon slewing would not): the last reading, its span unknown
        return Machine(check_machine_name(name), machine_id(name), after - ticks_to_ns(ticks, hz), UNBOUNDED)
    return Machine(check_machine_name(name), machine_id(name), *best)


def from_arrival(name: str, end: int, hz: int, arrived: int) -> Machine:
    """Machine ``name`` correlated by a packet that ended at ``end`` ticks and arrived at ``arrived`` (the host's
    real time, ns): the offset is an upper bound."""
    return Machine(check_machine_name(name), machine_id(name), arrived - ticks_to_ns(end, hz), UNBOUNDED)


def unknown(name: str) -> Machine:
    """Machine ``name`` whose clock could not be correlated (a recording that sent no packet): offset 0, unbounded,
    which its trace's description says."""
    return Machine(check_machine_name(name), machine_id(name), 0, UNBOUNDED)

