"""The host as the runtime's consumer: closed packets read out of each CPU's ring in guest memory.

What sdt_consume/sdt_consume_done do in C, done on the guest's memory by the host, for CPUs that are
stopped (the CPU that traps to its notify hook, or every CPU after a run): packets from read_seq (or,
once the writer lapped it, the oldest still in the ring) up to commit_seq, each copied and checked
not to have been reopened meanwhile, then read_seq advanced. Field offsets come from sdtgen/layout.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sdtgen.boot.machine import Machine
from sdtgen.errors import SdtError
from sdtgen.layout import CPU

PacketFn = Callable[[int, bytes], None]


@dataclass
class Counts:
    discarded: int = 0  # the runtime's count: ring full (discard), nested firings, too big
    overwritten: int = 0  # events of packets the writer overwrote before they were read

    @property
    def lost(self) -> int:
        return self.discarded + self.overwritten


class Consumer:
    def __init__(self, machine: Machine, areas: list[int], on_packet: PacketFn) -> None:
        self.machine = machine
        self.areas = areas
        self.on_packet = on_packet
        arch = machine.arch
        self.order = "little" if arch.little else "big"
        self.off = CPU.offsets(arch.bits)
        self.counts = [Counts() for _ in areas]

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
        start = max(start, written - packets)  # overwritten: the oldest still in the ring
        n = 0
        for seq in range(start, commit):
            data = self.machine.read(ring + (seq % packets) * size, size)
            if read(area, "write_seq") > seq + packets:  # reopened meanwhile (another CPU may be running)
                continue
            self.on_packet(cpu, data)
            n += 1
        if commit > start or read(area, "read_seq") != commit:
            self.machine.write(area + self.off["read_seq"], commit.to_bytes(8, self.order))
        c = self.counts[cpu]
        c.discarded, c.overwritten = read(area, "discarded"), read(area, "overwritten")
        return n

    def lost(self) -> dict[int, int]:
        return {cpu: c.lost for cpu, c in enumerate(self.counts) if c.lost}
