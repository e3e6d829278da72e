"""A recorded run to write as a trace: the fixture kernel's real firings (trap mode, every probe armed)
plus probes of our own for what it does not exercise. CPUs and timestamps are assigned here until the
guest recorder provides them.

``expected`` is the test's own reading of each C type, independent of sdtgen.trace.argtypes: what a
reader must show for every argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from booted import Booted
from native_oracle import Call
from sdtgen.trace.merge import merge_cpus

from sdtgen.trace import TraceEvent, TraceMeta, TraceProbe

CALLS = [Call("kmain", (1,)), Call("vfs_lookup_id", (2,)), Call("sched_switch", (7, -8, 3, 1, -5000, 0x40)),
         Call("kmem_alloc", (1 << 20,)), Call("kmem_alloc", (-1,)), Call("proc_exec", (1,)), Call("proc_exit", (-42,)),
         Call("sched_run", (3,))]
CPUS = 4  # CPU 3 records nothing and loses events
LOST = {1: 5, 3: 2}
HZ = 2_400_000_000  # ticks a second of the made-up guest clock
# No empty string: babeltrace2 2.0.4 (Debian's) shows an empty string field as the value of an earlier
# event (fixed upstream, review.lttng.org/c/babeltrace/+/4528); test_ctf checks the bytes CTF defines instead.
STRINGS = ['he said "hi"', "two\nlines", "naïve ☃ 日本", "back\\slash", "x", None]
WIDE = ("int", "unsigned int", "long", "unsigned long", "int64_t", "void *")
WIDE_VALUES = [(-1, 0xFFFFFFFF, -(1 << 63), (1 << 64) - 1, -2, 0xFFFF_8000_0000_1000),
               (0x7FFFFFFF, 0, (1 << 63) - 1, 0, 1 << 40, 0), (-(1 << 31), 1 << 31, -1, 1 << 63, 5, 8)]

# (signed, bits) of each integer type these probes declare; strings are str.
INTEGERS = {"int": (True, 32), "unsigned int": (False, 32), "long": (True, 64), "unsigned long": (False, 64),
            "int64_t": (True, 64), "void *": (False, 64), "struct kobj *": (False, 64)}
POINTERS = {"void *", "struct kobj *"}


@dataclass
class Recorded:
    meta: TraceMeta
    events: list[TraceEvent]  # merged in timestamp order

    def probe(self, event: TraceEvent) -> TraceProbe:
        return next(p for p in self.meta.probes if p.id == event.probe_id)

    def on_cpu(self, cpu: int) -> list[TraceEvent]:
        return [e for e in self.events if e.cpu == cpu]


def expected(probe: TraceProbe, value, unreadable="<unreadable>"):
    """What a reader must show for ``value`` of ``probe``'s argument types: C's conversion to each type."""
    out = []
    for ctype, v in zip(probe.arg_types, value, strict=True):
        if ctype.replace(" ", "") in ("char*", "constchar*"):
            out.append(unreadable if v is None else v)
        else:
            signed, bits = INTEGERS[ctype]
            v %= 1 << bits
            out.append(v - (1 << bits) if signed and v >= 1 << (bits - 1) else v)
    return out


@pytest.fixture(scope="session")
def recorded(kernel) -> Recorded:
    b = Booted(kernel.image)
    try:
        b.events()
        b.session.enable("hk:::")
        b.events()
        fires = [e for e in b.run(CALLS) if e["event"] == "fire"]
        table = b.session.runtime.probes
    finally:
        b.session.close()
    probes = [TraceProbe(p.id, p.provider, p.module, p.function, p.name, p.args) for p in table]
    by_spec = {p.spec: p for p in probes}
    assert len(fires) > 20 and {len(by_spec[f["probe"]].arg_types) for f in fires} >= {0, 1, 2, 6}
    assert "" not in [a for f in fires for a in f["args"]]  # babeltrace2 2.0.4 misreads those (above)
    strings = TraceProbe(max(by_spec[s].id for s in by_spec) + 1, "tt", "str", "copy", "quoted",
                         ("const char *", "char *"))
    wide = TraceProbe(strings.id + 1, "tt", "int", "wide", "six", WIDE)
    never = TraceProbe(strings.id + 2, "tt", "", "", "never", ("int",))  # declared, never fires
    records = [(by_spec[f["probe"]].id, tuple(f["args"])) for f in fires]
    records += [(strings.id, (s, STRINGS[-1 - i])) for i, s in enumerate(STRINGS)]
    records += [(wide.id, v) for v in WIDE_VALUES]
    # Round-robin over CPUs 0-2; two events share each timestamp so ties happen across CPUs.
    streams: dict[int, list[TraceEvent]] = {cpu: [] for cpu in range(CPUS)}
    for i, (pid, args) in enumerate(records):
        streams[i % 3].append(TraceEvent(pid, i % 3, 1_000 + 37 * (i // 2), args))
    meta = TraceMeta("x86_64", "tsc", HZ, CPUS, (*probes, strings, wide, never), dict(LOST))
    return Recorded(meta, merge_cpus(streams))
