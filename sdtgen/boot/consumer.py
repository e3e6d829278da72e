"""The host as the runtime's consumer: closed packets read out of each CPU's ring in guest memory.

What sdt_consume/sdt_consume_done do in C, done by the host on the guest's memory, and only for a CPU
that is stopped (the one trapping to its notify hook, or every CPU once a run ended), so its writer
cannot race the read: packets from read_seq (which an overwriting writer advances itself past what it
overwrote) up to commit_seq, then read_seq moved past them. Field offsets come from sdtgen/layout.py.

The host set each ring up (sdt_cpu_attach with the platform's addresses and sizes), so where a ring is
and how many packets of what size it holds are the host's, not what the guest's struct sdt_cpu says now;
its counters are the guest's, and believed only as far as the ring can hold: at most one ring's worth of
packets is read at a time, each checked against the packet number its slot should hold
(sdtgen.trace.streams), and counters that cannot be are said once and read no further.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sdtgen.boot.machine import Machine
from sdtgen.layout import CPU
from sdtgen.trace.model import Lost
from sdtgen.trace.streams import Streams

PacketFn = Callable[[int, bytes, int], None]  # (cpu, the packet, the number its slot holds)


@dataclass(frozen=True)
class Ring:
    area: int  # the CPU's struct sdt_cpu
    ring: int  # its packets
    packets: int
    packet_size: int


class Consumer:
    def __init__(self, machine: Machine, rings: list[Ring], on_packet: PacketFn, streams: Streams) -> None:
        self.machine = machine
        self.rings = rings
        self.on_packet = on_packet
        self.streams = streams
        arch = machine.arch
        self.order = "little" if arch.little else "big"
        self.off = CPU.offsets(arch.bits)
        self.counts = [Lost() for _ in rings]
        self._bad: set[int] = set()  # CPUs whose ring's counters were wrong when last read

    def _u64(self, area: int, field: str) -> int:
        return int.from_bytes(self.machine.read(area + self.off[field], 8), self.order)

    def consume(self, cpu: int) -> int:
        """Hand every closed, unread packet of ``cpu`` to ``on_packet`` (a ring's worth at most); how many."""
        r, read = self.rings[cpu], self._u64
        commit, start, written = read(r.area, "commit_seq"), read(r.area, "read_seq"), read(r.area, "write_seq")
        if start > commit or commit > written:
            self._damaged(cpu, f"{written} packets opened, {commit} closed, {start} read; nothing more is read from "
                          "it until they agree")
            start = commit
        elif commit - start > r.packets:
            self._damaged(cpu, f"{commit - start} packets closed and unread, more than its {r.packets}; only the last "
                          f"{r.packets} are read")
            start = commit - r.packets
        else:
            self._bad.discard(cpu)
        for seq in range(start, commit):
            self.on_packet(cpu, self.machine.read(r.ring + (seq % r.packets) * r.packet_size, r.packet_size), seq + 1)
        if commit > start:
            self.machine.write(r.area + self.off["read_seq"], commit.to_bytes(8, self.order))
        self.counts[cpu] = self.streams.lost(cpu, read(r.area, "discarded"), read(r.area, "overwritten"))
        return commit - start

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
