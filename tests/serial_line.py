"""A serial line's bytes, written here from docs/runtime.md ("The serial transport") and the layout's packets:
frames with zlib's CRCs, the info frame, packets and their verdicts. What the tests of the host's reader and of
`sdtgen record` feed them, good or damaged on purpose."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from sdtgen.layout import EVENT, PACKET, VALUES

SYNC = b"\xa5\x5aSD"
HEADER = struct.Struct("<4sBBHI")
P, V, T, I = (ord(c) for c in "PVTI")  # noqa: E741 (the frame types' own letters)
HEAD, EV = PACKET.struct(64, True), EVENT.struct(64, True)


def encode(kind: int, payload: bytes, length: int | None = None, check: int | None = None) -> bytes:
    """A frame: sync, type, 0, the header's check, the length, the payload, the CRC (a false ``length`` or
    ``check`` makes a header that is not one)."""
    n = len(payload) if length is None else length
    good = zlib.crc32(bytes((kind, 0)) + n.to_bytes(4, "little")) & 0xFFFF
    head = HEADER.pack(SYNC, kind, 0, good if check is None else check, n)
    return head + payload + zlib.crc32(head[4:] + payload).to_bytes(4, "little")


def info(hz: int, bits: int = 64) -> bytes:
    return encode(I, struct.pack("<QII", hz, bits, 0))


def text(line: str) -> bytes:
    return encode(T, line.encode())


def verdict(seq: int, cpu: int, keep: bool = True) -> bytes:
    return encode(V, struct.pack("<QII", seq, cpu, keep))


def event(ts: int, key: int, words: tuple[int, ...] = (), strings: tuple[bytes, ...] = ()) -> bytes:
    """An event as the recorders write it: header, then each integer as a word, then each string with its NUL."""
    body = b"".join(w.to_bytes(8, "little") for w in words) + b"".join(s + b"\0" for s in strings)
    return EV.pack(ts, key, EV.size + len(body), 0) + body


@dataclass
class Packet:
    cpu: int
    seq: int
    events: list[bytes] = field(default_factory=list)
    begin: int = 0
    end: int = 0
    discarded: int = 0
    size: int = 1024  # bytes of the ring's packets
    stream: int = 0

    def content(self) -> bytes:
        """The packet as it stands in its ring, up to its content's end (events 8-aligned)."""
        body = b""
        for e in self.events:
            body += bytes(-len(body) % 8) + e
        return HEAD.pack(VALUES["SDT_PACKET_MAGIC"], self.stream, self.begin, self.end, (HEAD.size + len(body)) * 8,
                         self.size * 8, self.seq, self.discarded, self.cpu, len(self.events)) + body

    def sent(self, keep: bool = True) -> bytes:
        """The packet's frame and its verdict, as sdt_serial_drain sends them."""
        return encode(P, self.content()) + verdict(self.seq, self.cpu, keep)
