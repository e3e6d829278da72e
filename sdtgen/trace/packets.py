"""The runtime's packets, read on the host: headers, and events decoded by each probe's declared types.

A packet is what a CPU's ring holds and what a CTF stream file holds (sdtgen/layout.py: PACKET, then
EVENTs). Every consumer (the emulated boot, the Linux process, a serial line) hands packets here; the
event layout is the recorder's (sdtgen/recorder.py: integers, then strings) and each argument's value
is what its C type makes of the register (sdtgen/trace/argtypes.py), the one interpretation every output
shares.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.recorder import event_layout
from sdtgen.trace.argtypes import ArgType, arg_type

MAGIC = VALUES["SDT_PACKET_MAGIC"]


class PacketError(ValueError):
    """A packet that is not one: the message says what is wrong."""


class Event(NamedTuple):
    """One recorded firing: what every output is made of."""

    ts: int
    cpu: int
    probe: str
    args: tuple[int | str | None, ...]  # a str is the string copied at the firing; None: NULL or unreadable


@dataclass(frozen=True)
class Packet:
    cpu: int
    seq: int
    begin: int
    end: int
    content: int  # bytes holding data, header included
    size: int  # bytes of the packet
    discarded: int  # the CPU's running count of discarded events when it closed
    events: int


@dataclass(frozen=True)
class EventFormat:
    """How to decode one probe's events."""

    key: int
    spec: str
    types: tuple[str, ...]
    argtypes: tuple[ArgType, ...]
    ints: tuple[int, ...]  # argument numbers stored as words, in order
    strings: tuple[int, ...]  # argument numbers copied as strings, in order
    words: struct.Struct  # the integers after the header


def event_format(key: int, spec: str, types: tuple[str, ...], bits: int, little: bool = True) -> EventFormat:
    lay = event_layout(types, bits)
    code = "I" if bits == 32 else "Q"
    words = struct.Struct(("<" if little else ">") + code * len(lay.ints))
    return EventFormat(key, spec, types, tuple(arg_type(t, bits) for t in types), lay.ints, lay.strings, words)


class Decoder:
    """Packets of one architecture into events, by each probe's key."""

    def __init__(self, formats: Iterable[EventFormat], bits: int, little: bool = True) -> None:
        self.formats = {f.key: f for f in formats}
        self.bits = bits
        self.little = little
        self.header = PACKET.struct(bits, little)
        self.event = EVENT.struct(bits, little)
        self.unknown = 0  # events of keys no format names (skipped by their size)

    def packet(self, data: bytes | memoryview, where: str = "") -> Packet:
        """The header of the packet ``data`` starts with; PacketError when it is not a packet."""
        if len(data) < self.header.size:
            raise PacketError(f"{where}a packet of {len(data)} bytes is shorter than its header")
        magic, _stream, begin, end, content, size, seq, discarded, cpu, events = self.header.unpack_from(data)
        content //= 8
        size //= 8
        if magic != MAGIC:
            raise PacketError(f"{where}packet magic {magic:#x} is not {MAGIC:#x}")
        if not self.header.size <= content <= size <= len(data):
            raise PacketError(f"{where}packet sizes (content {content}, packet {size} bytes) do not fit its "
                              f"{len(data)} bytes")
        return Packet(cpu, seq, begin, end, content, size, discarded, events)

    def events(self, data: bytes | memoryview, where: str = "") -> tuple[Packet, list[Event]]:
        """A packet's header and its events, in the order they were written."""
        p = self.packet(data, where)
        out: list[Event] = []
        at, end = self.header.size, p.content
        unpack = self.event.unpack_from
        while at < end:
            if at + self.event.size > end:
                raise PacketError(f"{where}packet {p.seq} of CPU {p.cpu}: an event at byte {at} runs past its content")
            ts, key, size, unreadable = unpack(data, at)
            if size < self.event.size or at + size > end:
                raise PacketError(f"{where}packet {p.seq} of CPU {p.cpu}: event at byte {at} has size {size}")
            f = self.formats.get(key)
            if f is None:
                self.unknown += 1
            else:
                out.append(Event(ts, p.cpu, f.spec, self._args(f, data, at + self.event.size, at + size, unreadable)))
            at = (at + size + 7) & ~7  # events start 8-aligned
        return p, out

    def _args(self, f: EventFormat, data, at: int, end: int, unreadable: int) -> tuple:
        args: list = [None] * len(f.types)
        for k, raw in zip(f.ints, f.words.unpack_from(data, at), strict=True):
            args[k] = f.argtypes[k].value(raw, f.spec)
        at += f.words.size
        for k in f.strings:
            stop = bytes(data[at:end]).find(b"\0")
            if stop < 0:
                raise PacketError(f"string argument {k} of {f.spec} has no end")
            args[k] = None if unreadable >> k & 1 else bytes(data[at:at + stop]).decode("utf-8", "replace")
            at += stop + 1
        return tuple(args)


def split(stream: bytes, decoder: Decoder, where: str = "") -> Iterator[bytes]:
    """The packets of a stream (a CTF stream file, or what a consumer copied), each whole."""
    at = 0
    while at < len(stream):
        p = decoder.packet(memoryview(stream)[at:], where)
        yield stream[at:at + p.size]
        at += p.size
