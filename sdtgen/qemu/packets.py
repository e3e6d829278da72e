"""Packets off the serial line: each held until its verdict, then handed on whole (or dropped).

The kernel sends a packet as it stands in its ring, then a verdict: keep it, or drop it because the
CPU's writer reused its slot while it was on the line (sdt_serial.c). Only kept packets reach the
consumers: the event decoder of `sdtgen qemu`, the stream files of `sdtgen record`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sdtgen.layout import PACKET
from sdtgen.qemu.frames import MAX_PAYLOAD, VERDICT, Frame, verdict
from sdtgen.qemu.frames import PACKET as PACKET_FRAME

Consumer = Callable[[int, bytes], None]  # (cpu, the packet: its content, zeros to its packet_size)


@dataclass
class PacketSink:
    consumers: list[Consumer]
    kept: int = 0
    dropped: int = 0  # packets the writer overwrote while they were sent
    stray: int = 0  # packets without their verdict (or verdicts without their packet): the line lost a frame
    _pending: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # cpu -> (seq, packet)

    def frame(self, f: Frame) -> bool:
        """Take a packet or verdict frame; False for any other frame."""
        if f.type == PACKET_FRAME:
            cpu, seq, size = self._header(f.payload)
            if cpu in self._pending:
                self.stray += 1
            # The line carries the content; the packet as it stands in the ring (and in a CTF stream) has its size.
            self._pending[cpu] = (seq, f.payload + bytes(max(0, size - len(f.payload))))
            return True
        if f.type != VERDICT:
            return False
        v = verdict(f)
        seq, packet = self._pending.pop(v.cpu, (None, b""))
        if seq != v.seq:  # torn while sent (its header changed), or the packet frame was lost
            self.stray += seq is None
            self.dropped += seq is not None
            return True
        if not v.keep:
            self.dropped += 1
            return True
        self.kept += 1
        for consume in self.consumers:
            consume(v.cpu, packet)
        return True

    def _header(self, data: bytes) -> tuple[int, int, int]:
        """The packet's CPU, number and size in bytes (no more than a frame can carry)."""
        head = PACKET.struct(64)  # the same on every architecture: fixed-width fields
        if len(data) < head.size:
            return -1, -1, 0
        fields = dict(zip(PACKET.names(), head.unpack_from(data), strict=True))
        return fields["cpu_id"], fields["packet_seq_num"], min(fields["packet_size"] // 8, MAX_PAYLOAD)
