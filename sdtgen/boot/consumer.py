"""The host as the runtime's consumer: closed packets read out of each CPU's ring in guest memory.

What sdt_consume/sdt_consume_done do in C, done by the host on the guest's memory, and only for a CPU
that is stopped (the one trapping to its notify hook, or every CPU once a run ended), so its writer
cannot race the read: packets from read_seq (which an overwriting writer advances itself past what it
overwrote) up to commit_seq, then read_seq moved past them. Field offsets come from sdtgen/layout.py.
"""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.boot.machine import Machine
from sdtgen.errors import SdtError
from sdtgen.layout import CPU
from sdtgen.trace.model import Lost

PacketFn = Callable[[int, bytes], None]


class Consumer:
    def __init__(self, machine: Machine, areas: list[int], on_packet: PacketFn) -> None:
        self.machine = machine
        self.areas = areas
        self.on_packet = on_packet
        arch = machine.arch
        self.order = "little" if arch.little else "big"
        self.off = CPU.offsets(arch.bits)
        self.counts = [Lost() for _ in areas]

    def _u64(self, area: int, field: str) -> int:
        return int.from_bytes(self.machine.read(area + self.off[field], 8), self.order)

    def consume(self, cpu: int) -> int:
        """Hand every closed, unread packet of ``cpu`` to ``on_packet``; how many."""
        area, read = self.areas[cpu], self._u64
        packets, size = read(area, "packets"), read(area, "packet_size")
        ring, commit, start = read(area, "ring"), read(area, "commit_seq"), read(area, "read_seq")
        written = read(area, "write_seq")
        if not (packets and size) or commit > written or start > commit:
            raise SdtError("", f"the ring of CPU {cpu} is corrupt (written {written}, closed {commit}, read {start})",
                           "the guest wrote over the runtime's per-CPU area")
        for seq in range(start, commit):
            self.on_packet(cpu, self.machine.read(ring + (seq % packets) * size, size))
        if commit > start:
            self.machine.write(area + self.off["read_seq"], commit.to_bytes(8, self.order))
        c = self.counts[cpu]
        c.discarded, c.overwritten = read(area, "discarded"), read(area, "overwritten")
        return commit - start

    def lost(self) -> dict[int, Lost]:
        """Each CPU's losses (every CPU, nothing lost included)."""
        return dict(enumerate(self.counts))

    @property
    def total_lost(self) -> int:
        return sum(c.total for c in self.counts)
