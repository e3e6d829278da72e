"""The host as the runtime's consumer: closed packets read out of each CPU's ring in the machine's memory.

What sdt_consume/sdt_consume_done do in C, done by the host on the guest's memory: packets from read_seq
up to commit_seq, each copied and then claimed (read_seq moved from its number to the next, unless the
writer moved it first: an overwriting writer claims the oldest unread packet itself before it reuses the
slot, and counts it). A claim that fails drops the copy, which the writer may have been rewriting. So one
piece of code serves a stopped machine (the emulated boot: a CPU trapping to its notify hook, or every
CPU once a run ended) and a running one (QEMU's RAM mapped shared, sdtgen/transport/shared_ram.py). Field
offsets come from sdtgen/layout.py.

Where a ring is and how many packets of what size it holds are the host's (it set the ring up, or the
kernel said so once), not what the guest's struct sdt_cpu says now; its counters are the guest's, and
believed only as far as the ring can hold: at most one ring's worth of packets is read at a time, each
checked against the packet number its slot should hold (sdtgen.trace.streams), and counters that cannot
be are said once and read no further.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sdtgen.layout import CPU, PACKET
from sdtgen.plaindata import record
from sdtgen.trace.model import Lost
from sdtgen.trace.streams import Streams

# Packets a writer may close between two reads of its ring, at most: 2^32 of at least 1 KiB are 4 TiB, which no CPU
# records between two polls. Counters further apart are damage, not a ring that went round that often.
MAX_AHEAD = 1 << 32
PacketFn = Callable[[int, bytes, int], None]  # (cpu, the packet, the number its slot holds)


def events_in(data: bytes, bits: int, little: bool) -> int:
    """The events a packet's header says it holds (0 for bytes too short to be a packet): what a host that lets a
    session's packets go (torture --keep, the torture's own session) still counts."""
    st = PACKET.struct(bits, little)
    if len(data) < st.size:
        return 0
    return dict(zip(PACKET.names(), st.unpack(bytes(data[:st.size])), strict=True))["events"]


class Memory(Protocol):
    """The machine's memory as the consumer needs it."""

    stopped: bool  # no CPU writes it while the consumer reads (a claim cannot fail but on damage)
    order: str  # "little" or "big": the machine's byte order

    def read(self, addr: int, size: int) -> bytes: ...

    def write(self, addr: int, data: bytes) -> None: ...

    def load(self, addr: int, width: int) -> int: ...

    def claim(self, addr: int, expect: int, width: int) -> bool:
        """Move the word at ``addr`` from ``expect`` to ``expect + 1``, unless it is no longer ``expect``."""
        ...


class StoppedMemory:
    """A machine whose CPUs are stopped while the host reads (the emulator's Machine)."""

    stopped = True

    def __init__(self, machine, little: bool) -> None:
        self.machine = machine
        self.order = "little" if little else "big"
        self.read, self.write = machine.read, machine.write

    def load(self, addr: int, width: int) -> int:
        return int.from_bytes(self.machine.read(addr, width), self.order)

    def claim(self, addr: int, expect: int, width: int) -> bool:
        if self.load(addr, width) != expect:
            return False
        self.machine.write(addr, ((expect + 1) & ((1 << (8 * width)) - 1)).to_bytes(width, self.order))
        return True


@record(frozen=True)
class Ring:
    area: int  # the CPU's struct sdt_cpu
    ring: int  # its packets
    packets: int
    packet_size: int


class Consumer:
    def __init__(self, memory: Memory, bits: int, rings: list[Ring], on_packet: PacketFn, streams: Streams) -> None:
        self.memory = memory
        self.rings = rings
        self.on_packet = on_packet
        self.streams = streams
        self.width = bits // 8  # a sequence number is a word: claimed at its width, read as its u64 field
        self.off = CPU.offsets(bits)
        self.counts = [Lost() for _ in rings]
        self.dropped = 0  # copies whose claim failed: the writer overwrote them meanwhile (and counted them)
        self._bad: set[int] = set()  # CPUs whose ring's counters were wrong when last read

    def _u64(self, area: int, field: str) -> int:
        return self.memory.load(area + self.off[field], 8)

    def consume(self, cpu: int) -> int:
        """Hand every closed, unread packet of ``cpu`` to ``on_packet`` (a ring's worth at most); how many.
        Read in the order the writer moves them (read_seq <= commit_seq <= write_seq at every instant)."""
        r, read, mem = self.rings[cpu], self._u64, self.memory
        start = read(r.area, "read_seq")
        commit = read(r.area, "commit_seq")
        written = read(r.area, "write_seq")
        if start > commit or commit > written or commit - start > MAX_AHEAD:
            self._damaged(cpu, f"{written} packets opened, {commit} closed, {start} read; nothing more is read from "
                          "it until they agree")
            start = commit
        elif commit - start > r.packets:
            if not mem.stopped:  # a running writer overwrote the oldest meanwhile: their claims fail
                start = commit - r.packets
            else:
                self._damaged(cpu, f"{commit - start} packets closed and unread, more than its {r.packets}; only the "
                              f"last {r.packets} are read")
                start = commit - r.packets
                mem.write(r.area + self.off["read_seq"], start.to_bytes(8, mem.order))
        else:
            self._bad.discard(cpu)
        handed, seq, where = 0, start, r.area + self.off["read_seq"]
        while seq < commit:
            data = mem.read(r.ring + (seq % r.packets) * r.packet_size, r.packet_size)
            if mem.claim(where, seq, self.width):
                self.on_packet(cpu, data, seq + 1)
                handed += 1
                seq += 1
            else:
                self.dropped += 1
                seq = max(seq + 1, read(r.area, "read_seq"))
        if mem.stopped:  # a running writer's counters run ahead of packets closed before them and not read yet
            self.counts[cpu] = self.streams.lost(cpu, read(r.area, "discarded"), read(r.area, "overwritten"))
        return handed

    def _damaged(self, cpu: int, what: str) -> None:
        """Counted once each time the ring's counters go wrong, however often they are read so."""
        if cpu not in self._bad:
            self._bad.add(cpu)
            self.streams.damage(cpu, f"the ring of CPU {cpu} is damaged: {what}")

    def lost(self) -> dict[int, Lost]:
        """Each CPU's losses (every CPU, nothing lost included)."""
        return dict(enumerate(self.counts))

    @property
    def total_lost(self) -> int:
        return sum(c.total for c in self.counts)
