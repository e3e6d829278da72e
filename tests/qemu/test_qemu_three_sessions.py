"""Three sessions at once on QEMU with two vCPUs (x86-64 and AArch64; `make qemu`, SDTGEN_QEMU_ALL=1: all four
architectures): a flight recorder of every probe with `overwrite` and a streaming session of the scheduler with a
predicate, both opened on the kernel's line as a kernel's own code or another host would open them, and the host's
`--session` aggregating beside them, on the same sites. Each holds exactly its own filter of the native run's firings
on each vCPU (tests/native_oracle.py), and the streaming session closing in the middle takes nothing from the two
that record on (docs/sessions.md)."""

from __future__ import annotations

import pytest
from filtered_session import TABLES, FilteredSession
from native_oracle import Call
from qemu_helpers import ALL, EVERY, Qemu
from session_pair import RING, Firings, KernelSession, command, native

from sdtgen.layout import VALUES
from sdtgen.targets.base import OwnSession
from sdtgen.transport.geometry import packet_size_for

ARCHES = EVERY if ALL else ("x86_64", "aarch64")
CPUS = 2
# (the call, the vCPU it runs on: None, every one at once): while all three record, then with the streaming session
# closed. Calls that change the kernel's data (reference counts, the allocator) run on CPU 0 alone, so each vCPU's
# firings are the native run of the calls it made, in their order.
CALLS = [(Call("kmain", (2,)), 0), (Call("sched_run", (5,)), None), (Call("sched_switch", (7, 1, 3, 1, 5000, 64)), 0),
         (Call("kmem_alloc", (100,)), 0), (Call("sched_run", (3,)), None),
         (Call("sched_switch", (1, 7, 2, 0, 10, 0)), 0)]
LATER = [(Call("sched_run", (4,)), None), (Call("kmem_alloc", (1 << 20,)), 0)]
STREAM = "hk:sched:run:tick, hk:sched:switch:six /arg0 >= 2/"  # the scheduler (one subsystem), a predicate
AGGREGATE = "hk:sched:: { @n[probename] = count(); }\nhk:mem:: { @n[probename] = count(); }"


def stream_wants(probe: str, args: list) -> bool:
    return probe.startswith("hk:sched:") and bool(args) and args[0] >= 2


def run_on(session, calls: list) -> None:
    for c, cpu in calls:
        session.run(c.function, list(c.args), cpu=cpu)


def native_on(exe, calls: list, cpu: int) -> list[tuple[str, list]]:
    """The native run of the calls vCPU ``cpu`` made."""
    return native(exe, [c for c, on in calls if on in (None, cpu)])


def by_cpu(ks: KernelSession, firings: Firings) -> dict[int, list]:
    out: dict[int, list] = {}
    for e in sorted(ks.events, key=lambda e: (e.ts, e.cpu)):
        out.setdefault(e.cpu, []).append(firings(e.probe, e.args))
    return out



@pytest.mark.parametrize("arch", ARCHES)
def test_three_sessions_at_once_each_hold_their_own_filter_of_the_native_run(qemu_kernel, native_exe, arch):
    image = qemu_kernel(arch)
    q = Qemu(image, own=OwnSession("agg", RING, packet_size_for(RING), "drop", TABLES), cpus=CPUS)
    s = q.session
    try:
        firings = Firings(image)
        flight = KernelSession(s, "flight", ":::", VALUES["SDT_OVERWRITE"])
        stream = FilteredSession(s, "eng", STREAM)
        s.aggregate(AGGREGATE)
        run_on(s, CALLS)
        s.drain()
        flight.read(firings)  # read while all three record: what is read once is not read again
        stream.read(firings)
        listed = {x.name: x for x in s.sessions()}
        stream_lost = stream.lost()
        command(s.target, "session close eng")  # the streaming host leaves; its sites stay armed for the others
        run_on(s, LATER)
        flight.read(firings)
        flight_lost = flight.lost()
        s.printa()
        after = [x.name for x in s.sessions()]
    finally:
        q.close()
    assert list(listed) == ["default", "agg", "flight", "eng"] and after == ["default", "agg", "flight"]
    assert listed["flight"].policy == "overwrite" and listed["eng"].policy == "drop"
    everything = {cpu: native_on(native_exe, CALLS + LATER, cpu) for cpu in range(CPUS)}
    assert by_cpu(flight, firings) == everything  # every probe, nothing lost
    assert flight_lost == [(0, 0)] * CPUS and stream_lost == [(0, 0)] * CPUS
    want = {cpu: [f for f in native_on(native_exe, CALLS, cpu) if stream_wants(*f)] for cpu in range(CPUS)}
    assert 0 < len(want[1]) < len([f for f in everything[1] if f[0].startswith("hk:sched:")])  # the predicate filtered
    assert by_cpu(stream, firings) == want
    [printed] = [e for e in q.events() if e["event"] == "aggregations"]
    assert printed["session"] == "agg"
    counts: dict[str, int] = {}
    for probe, _ in (f for cpu in range(CPUS) for f in everything[cpu]):
        if probe.startswith(("hk:sched:", "hk:mem:")):
            name = probe.rsplit(":", 1)[1]
            counts[name] = counts.get(name, 0) + 1
    assert {r["keys"][0]: r["value"] for r in printed["aggregations"][0]["rows"]} == counts
