"""Packets off the serial line: each held until its verdict, then handed on whole (or dropped).

The kernel sends a packet as it stands in its ring, then its verdict, both under the line's lock: keep it,
or drop it because the CPU's writer reused its slot while it was on the line (sdt_serial.c). So one packet
at most waits for its verdict: memory holds one frame's payload, bytes that came, whatever CPU numbers and
sizes the line claims. Only kept packets reach the consumers (the event decoder of
`sdtgen qemu`, the recording of `sdtgen record`), as their content came: a consumer checks the rest,
their CPU numbers included (sdtgen.trace.streams).
"""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.layout import PACKET
from sdtgen.plaindata import record
from sdtgen.transport.frames import PACKET as PACKET_FRAME
from sdtgen.transport.frames import VERDICT, Frame, FrameError, verdict

Consumer = Callable[[int, bytes], None]  # (cpu, the packet's content as it came)

_HEAD = PACKET.struct(64)  # the fields read here are fixed-width: the same on every architecture
_CPU, _SEQ = PACKET.names().index("cpu_id"), PACKET.names().index("packet_seq_num")


@record
class PacketSink:
    consumers: list[Consumer]
    on_problem: Callable[[str], None] | None = None  # told what each stray or damaged frame was, as it is counted
    kept: int = 0
    dropped: int = 0  # packets the writer overwrote while they were sent
    stray: int = 0  # packets without their verdict (or verdicts without their packet): the line lost a frame
    damaged: int = 0  # packet or verdict frames too short for what they are (the CRC held: the kernel sent them)
    _pending: tuple[int, int, bytes] | None = None  # (cpu, packet_seq_num, the packet)
    _refused: bool = False  # the last packet frame was damaged: the verdict that follows is its own

    def frame(self, f: Frame) -> bool:
        """Take a packet or verdict frame; False for any other frame."""
        if f.type == PACKET_FRAME:
            if self._pending is not None:
                self._stray("its verdict never came: another packet frame came first")
            self._pending, self._refused = None, False
            if len(f.payload) < _HEAD.size:
                self.damaged += 1
                self._say(f"a packet frame of {len(f.payload)} bytes, shorter than a packet's header")
                self._refused = True
                return True
            head = _HEAD.unpack_from(f.payload)
            self._pending = (head[_CPU], head[_SEQ], f.payload)
            return True
        if f.type != VERDICT:
            return False
        try:
            v = verdict(f)
        except FrameError as e:
            self.damaged += 1  # the pending packet waits on: its own verdict may come yet
            self._say(str(e))
            return True
        if self._pending is None:
            if not self._refused:  # a damaged packet's verdict was counted with it
                self.stray += 1
                self._say(f"a verdict of CPU {v.cpu}'s packet {v.seq} with no packet before it")
            self._refused = False
            return True
        cpu, seq, packet = self._pending
        if v.cpu != cpu:  # another CPU's verdict: the line lost this packet's and the other's packet
            self._stray(f"a verdict of CPU {v.cpu}'s packet came for it")
            return True
        self._pending = None
        if v.seq != seq or not v.keep:  # torn while sent (its header changed), or overwritten meanwhile
            self.dropped += 1
            return True
        self.kept += 1
        for consume in self.consumers:
            consume(cpu, packet)
        return True

    def close(self) -> None:
        """The line ended: a packet still waiting for its verdict is stray."""
        if self._pending is not None:
            self._stray("the line ended before its verdict")
            self._pending = None

    def _stray(self, why: str) -> None:
        """The pending packet counted stray, and said."""
        cpu, seq, packet = self._pending
        self.stray += 1
        self._say(f"a packet frame of {len(packet)} bytes (CPU {cpu}, packet {seq}) whose verdict never came: {why}")

    def _say(self, what: str) -> None:
        if self.on_problem is not None:
            self.on_problem(what)
