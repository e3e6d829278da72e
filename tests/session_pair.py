"""Two sessions at once on one kernel, as the session tests of the process target and of QEMU run them: a kernel-side
session opened first on the kernel's own line (as a kernel opens its flight recorder), read by name and decoded by
its id; the host's `--session` with a predicate; and the native run's firings each must equal its own filter of
(tests/native_oracle.py)."""

from __future__ import annotations

import io
import json

from native_oracle import Call, data_symbolizer, run_native

from sdtgen.event_format import event_format
from sdtgen.layout import parse_reply
from sdtgen.targets.base import OwnSession
from sdtgen.trace.packets import Decoder
from sdtgen.transport.geometry import packet_size_for

RING = 1 << 16
CALLS = [Call("kmain", (2,)), Call("sched_run", (5,)), Call("sched_switch", (7, 8, 3, 1, 5000, 0x40)),
         Call("kmem_alloc", (100,)), Call("proc_exec", (5,)), Call("proc_exit", (42,))]
LATER = [Call("sched_run", (3,)), Call("kmem_alloc", (1 << 20,))]  # after the host's session closed
HOST_SPEC = "hk:sched:run:tick /arg0 >= 2/"  # the host's: one provider's probe, a predicate
POINTERS = {"hk:lib:ref:acquire": 0}  # a struct pointer: compared as the object it points at


def host_wants(probe: str, args: list) -> bool:
    return probe == "hk:sched:run:tick" and args[0] >= 2


def own(tables: int = 64 << 10) -> OwnSession:
    return OwnSession("host", RING, packet_size_for(RING), "drop", tables)


class Firings:
    """Firings as (probe, args) of one build: integers as 64-bit patterns (the native harness prints wide types
    unsigned), a pointer as the data symbol it points into (two builds place data apart)."""

    def __init__(self, binary, bias: int = 0) -> None:
        self.symbolize, self.bias, self.mask = data_symbolizer(binary), bias, (1 << 64) - 1

    def __call__(self, probe: str, args) -> tuple[str, list]:
        out = [a & self.mask if isinstance(a, int) else a for a in args]
        if probe in POINTERS:
            k = POINTERS[probe]
            out[k] = self.symbolize(out[k] - self.bias)
        return probe, out


def native(exe, calls: list[Call]) -> list[tuple[str, list]]:
    f = Firings(exe)
    return [f(e["probe"], e["args"]) for e in run_native(exe, calls) if "probe" in e]


def command(target, text: str) -> list[str]:
    """A line the kernel's own side sends on its line."""
    return target.command(text, text)


def run_calls(session, calls: list[Call]) -> None:
    for c in calls:
        session.run(c.function, list(c.args))


class KernelSession:
    """The kernel-side session ``name``: opened on the line with ``spec`` enabled (None: one the kernel opened at
    boot, found by name), its packets read by name (docs/sessions.md) and decoded by its id."""

    def __init__(self, session, name: str, spec: str | None, policy: int = 0) -> None:
        self.session, self.name = session, name
        t = session.target
        if spec is None:
            self.id = next(x.id for x in t.sessions() if x.name == name)
        else:
            line = command(t, f"session open {name} {RING:x} {packet_size_for(RING):x} {policy:x}")[-1]
            self.id = int(parse_reply("", line)[1]["count"])
            command(t, f"@{name} enable branch {spec}")
        arch = session.image.arch
        self.decoder = Decoder([event_format(p.key, p.spec, p.args, arch.bits, arch.little)
                                for p in session.image.probes() if p.key], arch.bits, arch.little, stream=self.id)
        self.events: list = []

    def read(self, firings: Firings) -> list[tuple[str, list]]:
        def take(cpu: int, data: bytes, *seq: int) -> bool:
            self.events += self.decoder.events(bytes(data))[1]
            return True

        self.session.target.read_session(self.name, take)
        return [firings(e.probe, e.args) for e in sorted(self.events, key=lambda e: (e.ts, e.cpu))]

    def lost(self) -> list[tuple[int, int]]:
        lines = command(self.session.target, f"@{self.name} stats")[:-1]
        return [(v["discarded"], v["overwritten"]) for v in (parse_reply("stats", x)[1] for x in lines)]


def host_firings(out: io.StringIO, firings: Firings) -> list[tuple[str, list]]:
    return [firings(e["probe"], e["args"]) for e in map(json.loads, out.getvalue().splitlines())
            if e.get("event") == "fire"]


def both_sessions(session, out: io.StringIO, firings: Firings) -> tuple[list, list, list]:
    """The kernel's session of every probe and the host's with HOST_SPEC at once over CALLS, the host's closed, then
    LATER in the kernel's alone: (the host's firings, the kernel session's, what the kernel session lost per CPU)."""
    kern = KernelSession(session, "kern", ":::")
    session.enable(HOST_SPEC)
    run_calls(session, CALLS[:3])
    session.drain()  # each session read while both record: what is read once is not read again
    kern.read(firings)
    run_calls(session, CALLS[3:])
    session.drain()
    session.target.close_own()  # the host leaves; the kernel's session records on
    run_calls(session, LATER)
    return host_firings(out, firings), kern.read(firings), kern.lost()


def check_both(exe, mine: list, theirs: list, lost: list) -> None:
    everything = native(exe, CALLS + LATER)
    assert len(everything) > 20
    assert theirs == everything  # every probe, the firings after the host's session closed included
    assert lost and set(lost) == {(0, 0)}
    assert mine == [f for f in native(exe, CALLS) if host_wants(*f)]
    assert 0 < len(mine) < len([f for f in everything if f[0] == "hk:sched:run:tick"])  # the predicate filtered
