"""Each CPU's stream of packets, checked before anything uses it: the one place the host believes what a guest
wrote into its rings or what came over a line (the emulated boot's consumer, `sdtgen qemu` and `sdtgen record`
all read their packets through it).

A packet is taken only as the trace readers take it (babeltrace2 for CTF, Perfetto): its header against the
ring it came from (its CPU, the number the ring's slot holds, the ring's packet size) and against its CPU's
packet before it (a number that grows, a beginning no earlier than that packet's end, a discarded count that
never falls), its events as Decoder.events checks them (known ids, exact sizes, ended strings, times in
order inside the packet), and every time and count within what the readers can hold. A packet that is not
is left out and counted, and the first damage of each CPU is said once: a guest that writes over its own
ring gets a trace that opens, with what could be believed, never one its reader refuses.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

from sdtgen.plaindata import record
from sdtgen.trace.model import Lost
from sdtgen.trace.packets import MIN_PACKET, Decoder, Event, Packet, PacketError

# babeltrace2 2.0 refuses a time of 2^63 ns or more from its clock's origin (Perfetto's is a uint64 of ns): a
# time is believed up to 2^62 ns, 146 years of a clock that starts at boot.
MAX_NS = 1 << 62
# babeltrace2 aborts on a discarded count of 2^64-1 and reads a count that falls as 2^64 - n events lost;
# Perfetto's counter value is an int64: each count is believed up to 2^62, so a CPU's total stays an int64.
MAX_COUNT = 1 << 62
MAX_HZ = (1 << 63) - 1  # babeltrace2 refuses a clock of 2^64-1 Hz; 0 Hz is no clock


def clock_problem(hz: int) -> str | None:
    """What is wrong with a clock rate a kernel gave, or None when a trace can declare it."""
    if 1 <= hz <= MAX_HZ:
        return None
    return f"a clock of {hz} Hz (the rate must be from 1 to {MAX_HZ})"


class Read(NamedTuple):
    """One packet taken: its header, its events (None when only counted), how many of each probe, the last."""

    packet: Packet
    events: list[Event] | None
    counts: dict[str, int]
    last: str | None


@record
class _Cpu:
    seq: int = 0  # the last packet's number (the runtime numbers them from 1)
    end: int = 0  # the last packet's end
    discarded: int = 0  # the last discarded count believed (a packet's, or the area's)
    overwritten: int = 0
    size: int = 0  # the CPU's packet size, from its first packet when no ring said it
    damaged: int = 0


class Streams:
    """The packets of CPUs 0..``cpus`` - 1, each checked against its ring and the packet of its CPU before it.

    ``packet_size``: the bytes of every ring's packets, when the host set the rings up; else each CPU's first
    packet says it, a power of two from SDT_MIN_PACKET to ``max_packet``. ``on_damage``: told once a CPU, the
    first time something of it is damaged."""

    def __init__(self, decoder: Decoder, clock_hz: int, cpus: int, packet_size: int | None = None,
                 on_damage: Callable[[str], None] | None = None, max_packet: int | None = None) -> None:
        problem = clock_problem(clock_hz)
        if problem is not None:
            raise ValueError(problem)
        self.decoder = decoder
        self.cpus = cpus
        self.packet_size = packet_size
        self.max_packet = max_packet
        self.max_ticks = MAX_NS * clock_hz // 1_000_000_000  # the latest time a reader can hold
        self.on_damage = on_damage
        self.damaged = 0  # packets left out, and counts or rings found damaged
        self._cpus: dict[int, _Cpu] = {}
        self._other = _Cpu()  # the damage of CPU numbers past the kernel's, said once for all of them
        self._lock = threading.Lock()  # the emulated boot's CPUs read their own rings on their own threads

    def read(self, cpu: int, data: bytes | memoryview, events: bool = True, seq: int | None = None) -> Read | None:
        """The packet ``data`` (at least its content) from ``cpu``'s ring, whose slot holds packet number ``seq``
        when the ring says so; its events decoded, or only counted (``events`` False). None when it is damaged:
        it is left out and counted."""
        try:
            self._header(cpu, data, seq)
            if events:
                p, evs = self.decoder.events(data)
                counts, last = Counter(e.probe for e in evs), evs[-1].probe if evs else None
            else:
                evs = None
                p, counts, last = self.decoder.counts(data)
        except PacketError as e:
            self.damage(cpu, f"a damaged packet left out: {e}")
            return None
        st = self._cpus[cpu]
        st.seq, st.end, st.discarded, st.size = p.seq, p.end, p.discarded, p.size
        return Read(p, evs, counts, last)

    def _header(self, cpu: int, data: bytes | memoryview, seq: int | None) -> Packet:
        p = self.decoder.packet(data)
        if not 0 <= cpu < self.cpus:
            raise PacketError(f"packet {p.seq} of CPU {cpu}, which is not one of the kernel's {self.cpus}")
        st = self._cpus.setdefault(cpu, _Cpu())
        where = f"packet {p.seq} of CPU {cpu}"
        if p.cpu != cpu:
            raise PacketError(f"{where} says it is CPU {p.cpu}'s")
        if seq is not None and p.seq != seq:
            raise PacketError(f"the ring of CPU {cpu} holds packet {p.seq} where packet {seq} should be")
        size = self.packet_size or st.size
        if size and p.size != size:
            raise PacketError(f"{where} has {p.size} bytes, not the {size} of its ring's packets")
        if p.size < MIN_PACKET or p.size & (p.size - 1) or (self.max_packet and p.size > self.max_packet):
            raise PacketError(f"{where} has {p.size} bytes, not a power of two from {MIN_PACKET}"
                              + (f" to {self.max_packet}" if self.max_packet else ""))
        if not st.seq < p.seq <= MAX_COUNT:
            raise PacketError(f"{where} comes after packet {st.seq}" if p.seq <= st.seq else
                              f"{where}: its number is past {MAX_COUNT}")
        if p.begin < st.end:
            raise PacketError(f"{where} begins ({p.begin}) before the packet before it ended ({st.end})")
        if p.end > self.max_ticks:
            raise PacketError(f"{where} ends at {p.end} ticks, past what a trace can hold at its clock's rate")
        if not st.discarded <= p.discarded <= MAX_COUNT:
            raise PacketError(f"{where} says {p.discarded} events were discarded, after {st.discarded} before it")
        return p

    def lost(self, cpu: int, discarded: int, overwritten: int) -> Lost:
        """``cpu``'s lost counts as its area says them now, believed when they did not fall and a reader can hold
        them (else the last believed, and the damage said)."""
        st = self._cpus.setdefault(cpu, _Cpu())
        if st.discarded <= discarded <= MAX_COUNT and st.overwritten <= overwritten <= MAX_COUNT:
            st.discarded, st.overwritten = discarded, overwritten
        else:
            self.damage(cpu, f"the lost counts of CPU {cpu} ({discarded} discarded, {overwritten} overwritten) are "
                        f"damaged: {st.discarded} and {st.overwritten} are kept")
        return Lost(st.discarded, st.overwritten)

    def last_seq(self, cpu: int) -> int:
        """The number of the last packet of ``cpu`` taken (0: none yet)."""
        st = self._cpus.get(cpu)
        return st.seq if st is not None else 0

    def last_lost(self) -> dict[int, Lost]:
        """Each CPU's lost counts: the last believed, no fewer discarded than its last packet said."""
        return {cpu: Lost(st.discarded, st.overwritten) for cpu, st in sorted(self._cpus.items())}

    def damage(self, cpu: int, what: str) -> None:
        """Something of ``cpu`` was damaged: counted, and said the first time for that CPU."""
        with self._lock:
            self.damaged += 1
            st = self._cpus.setdefault(cpu, _Cpu()) if 0 <= cpu < self.cpus else self._other
            st.damaged += 1
            first = st.damaged == 1
        if first and self.on_damage is not None:
            whose = f"CPU {cpu}'s" if 0 <= cpu < self.cpus else "CPUs the kernel does not have"
            self.on_damage(f"{what} (further damage to {whose} packets is only counted)")
