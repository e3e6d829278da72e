"""The serial transport's frames, read on the host (the writer is sdtgen/runtime/sdt_serial.c).

A frame is ``sync | type | 0 | check | length | payload | crc`` (docs/runtime.md, "The serial
transport"). The reader takes bytes as they arrive, in pieces of any size, and gives back frames and
the console bytes between them. After garbage it finds its place again: it looks for the sync and
believes a header only when its 16-bit check holds and its length is no more than a packet's; a frame
whose CRC fails is skipped whole and counted. Its buffer holds at most one frame, of bytes that came.
"""

from __future__ import annotations

import struct
import zlib

from sdtgen.layout import FRAME_HEADER, VALUES
from sdtgen.layout import INFO as INFO_LAYOUT
from sdtgen.layout import VERDICT as VERDICT_LAYOUT
from sdtgen.plaindata import record

# Every frame's fields are little-endian, whatever the kernel's architecture (sdt_serial.c writes them so).
SYNC = VALUES["SDT_FRAME_SYNC"].to_bytes(4, "little")
PACKET, VERDICT, TEXT, INFO = (VALUES[f"SDT_FRAME_{t}"] for t in ("PACKET", "VERDICT", "TEXT", "INFO"))
TABLES = VALUES["SDT_FRAME_TABLES"]  # a CPU's frozen aggregation half (the control core's `take`)
HEADER = FRAME_HEADER.struct(64)  # sync, type, zero, check, length
TRAILER = struct.Struct("<I")  # the CRC-32
_CHECKED = FRAME_HEADER.offset("type", 64)  # the CRC covers the header from its type on, then the payload
VERDICT_BODY = VERDICT_LAYOUT.struct(64)  # packet_seq_num, cpu, keep
INFO_BODY = INFO_LAYOUT.struct(64)  # clock_hz, bits of a word, 0
# The largest packet the transport carries (a ring's packets are powers of two from 1 KiB; sdtgen's platforms
# use at most 64 KiB): a packet frame of a larger packet is damage, not one to pad out.
MAX_PACKET = 1 << 20
MAX_PAYLOAD = MAX_PACKET  # the longest frame is a packet: a longer length is not a header, and swallows nothing


class FrameError(ValueError):
    """A frame whose CRC held but whose payload is not what its type carries (the kernel sent it so)."""


@record(frozen=True)
class Frame:
    type: int
    payload: bytes


@record(frozen=True)
class Console:
    """Bytes the kernel wrote outside any frame (early boot output, a panic message)."""

    data: bytes


@record(frozen=True)
class Verdict:
    seq: int  # the packet's packet_seq_num
    cpu: int
    keep: bool


@record(frozen=True)
class Info:
    clock_hz: int
    bits: int


def header_check(kind: int, length: int) -> int:
    return zlib.crc32(bytes((kind, 0)) + struct.pack("<I", length)) & 0xFFFF


def verdict(frame: Frame) -> Verdict:
    if len(frame.payload) != VERDICT_BODY.size:
        raise FrameError(f"a verdict frame of {len(frame.payload)} bytes, not {VERDICT_BODY.size}")
    seq, cpu, keep = VERDICT_BODY.unpack(frame.payload)
    return Verdict(seq, cpu, keep != 0)


def info(frame: Frame) -> Info:
    if len(frame.payload) != INFO_BODY.size:
        raise FrameError(f"an info frame of {len(frame.payload)} bytes, not {INFO_BODY.size}")
    hz, bits, _ = INFO_BODY.unpack(frame.payload)
    return Info(hz, bits)


class FrameReader:
    """Bytes in, frames and console bytes out, in the order they came."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.corrupt = 0  # frames skipped because their CRC failed
        self.frames = 0

    def feed(self, data: bytes) -> list[Frame | Console]:
        self._buf += data
        out: list[Frame | Console] = []
        buf = self._buf
        at = 0
        while True:
            start = buf.find(SYNC, at)
            if start < 0:
                keep = _sync_prefix(buf, at)  # the sync may be arriving in pieces
                _console(out, buf[at:len(buf) - keep])
                at = len(buf) - keep
                break
            _console(out, buf[at:start])
            at = start
            if len(buf) - start < HEADER.size:
                break
            _, kind, zero, check, length = HEADER.unpack_from(buf, start)
            if zero or length > MAX_PAYLOAD or check != header_check(kind, length):
                _console(out, buf[start:start + 1])  # not a header: the byte is the console's
                at = start + 1
                continue
            end = start + HEADER.size + length + TRAILER.size
            if len(buf) < end:
                break
            body = bytes(buf[start + HEADER.size:end - TRAILER.size])
            (crc,) = TRAILER.unpack_from(buf, end - TRAILER.size)
            at = end
            if crc != zlib.crc32(body, zlib.crc32(buf[start + _CHECKED:start + HEADER.size])):
                self.corrupt += 1
                continue
            self.frames += 1
            out.append(Frame(kind, body))
        del buf[:at]
        return _merged(out)

    def close(self) -> list[Frame | Console]:
        """The end of the stream: whatever is left was console output (or a frame cut short)."""
        out = [Console(bytes(self._buf))] if self._buf else []
        self._buf.clear()
        return out


def _sync_prefix(buf: bytearray, at: int) -> int:
    """How many bytes at the end of ``buf`` (after ``at``) could be the start of a sync."""
    for n in range(min(len(SYNC) - 1, len(buf) - at), 0, -1):
        if buf.endswith(SYNC[:n]):
            return n
    return 0


def _console(out: list, data) -> None:
    if data:
        out.append(Console(bytes(data)))


def _merged(items: list[Frame | Console]) -> list[Frame | Console]:
    """Adjacent console pieces as one."""
    out: list[Frame | Console] = []
    for item in items:
        if isinstance(item, Console) and out and isinstance(out[-1], Console):
            out[-1] = Console(out[-1].data + item.data)
        else:
            out.append(item)
    return out
