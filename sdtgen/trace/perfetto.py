"""A Perfetto protobuf trace: one track per CPU, an instant TrackEvent per event, arguments as debug annotations.

The few messages are encoded here by hand (the protobuf wire format is varints and length-prefixed
fields), so writing needs no protobuf runtime; the tests read every file back with Perfetto's own
protos. Field numbers are those of perfetto_trace.proto.

Time: TracePacket timestamps are nanoseconds of the trace's default clock, ``ticks * 10**9 // hz`` of
the guest clock (model.ticks_to_ns). A CPU whose ring buffer lost events gets a counter track under
its own, ``CPU n lost events``, holding the count from its first event's time.
"""

from __future__ import annotations

import os

from sdtgen.atomic import Staged
from sdtgen.trace.argtypes import UNREADABLE, ArgType, arg_type
from sdtgen.trace.model import Lost, TraceMeta, TraceProbe, ticks_to_ns
from sdtgen.trace.packets import Event, Packet

SEQUENCE = 0x5D7  # trusted_packet_sequence_id of every packet: one writer, one sequence
LOST_TRACKS = 1 << 32  # counter track uuids: this plus the CPU's track uuid

# Field numbers (perfetto_trace.proto), each as its tag byte(s) with the wire type.
_VARINT, _BYTES = 0, 2
TRACE_PACKET = 1
PACKET_TIMESTAMP, PACKET_SEQUENCE, PACKET_TRACK_EVENT, PACKET_TRACK_DESCRIPTOR = 8, 10, 11, 60
TRACK_UUID, TRACK_NAME, TRACK_PARENT, TRACK_COUNTER = 1, 2, 5, 8
EVENT_ANNOTATIONS, EVENT_TYPE, EVENT_TRACK, EVENT_CATEGORIES, EVENT_NAME, EVENT_COUNTER = 4, 9, 11, 22, 23, 30
TYPE_INSTANT, TYPE_COUNTER = 3, 4
ANNOTATION_UINT, ANNOTATION_INT, ANNOTATION_STRING, ANNOTATION_POINTER, ANNOTATION_NAME = 3, 4, 6, 7, 10


_SMALL = [bytes((i,)) for i in range(128)]


def varint(n: int) -> bytes:
    if 0 <= n < 128:
        return _SMALL[n]
    n &= (1 << 64) - 1  # int64: a negative value is its two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def number(field: int, n: int) -> bytes:
    return tag(field, _VARINT) + varint(n)


def message(field: int, body: bytes) -> bytes:
    """A length-delimited field: a string, bytes or an embedded message."""
    return tag(field, _BYTES) + varint(len(body)) + body


def text(field: int, s: str) -> bytes:
    return message(field, s.encode("utf-8", "replace"))


def cpu_track(cpu: int) -> int:
    return cpu + 1  # track uuids are any non-zero 64-bit number unique in the trace


class PerfettoSink:
    """A Perfetto trace file, each event encoded as its packet comes; the lost counts close it."""

    def __init__(self, path: str | os.PathLike[str], meta: TraceMeta, bits: int) -> None:
        self.meta = meta
        self.out = Staged(path, "Perfetto trace")
        self.f = open(self.out.path(), "wb")  # noqa: SIM115 (closed in finish or abort)
        self.first: dict[int, int] = {}
        self.encoders = {p.spec: _event_encoder(p, bits) for p in meta.probes}
        self.tracks: dict[int, bytes] = {}
        self.ts_tag, self.seq = tag(PACKET_TIMESTAMP, _VARINT), number(PACKET_SEQUENCE, SEQUENCE)
        self.packet_tag, self.event_tag = tag(TRACE_PACKET, _BYTES), tag(PACKET_TRACK_EVENT, _BYTES)

    def _packet(self, body: bytes) -> None:
        self.f.write(message(TRACE_PACKET, body + self.seq))

    def _track(self, cpu: int) -> bytes:
        """The CPU's track, described before its first event."""
        t = self.tracks.get(cpu)
        if t is None:
            self._packet(message(PACKET_TRACK_DESCRIPTOR, number(TRACK_UUID, cpu_track(cpu))
                                 + text(TRACK_NAME, f"CPU {cpu}")))
            t = self.tracks[cpu] = number(EVENT_TRACK, cpu_track(cpu))
        return t

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        hz, out = self.meta.clock_hz, []
        track = self._track(cpu)
        for e in events or ():
            self.first.setdefault(e.cpu, e.ts)
            body = self.encoders[e.probe](e) + track
            p = self.ts_tag + varint(ticks_to_ns(e.ts, hz)) + self.event_tag + varint(len(body)) + body + self.seq
            out.append(self.packet_tag + varint(len(p)) + p)
        self.f.write(b"".join(out))

    def finish(self, lost: dict[int, Lost]) -> None:
        """A counter track under each CPU that lost events, holding the count from its first event's time."""
        for cpu, counts in sorted(lost.items()):
            n = counts.total
            if not n:
                continue
            self._track(cpu)
            self._packet(message(PACKET_TRACK_DESCRIPTOR, number(TRACK_UUID, LOST_TRACKS + cpu_track(cpu))
                                 + number(TRACK_PARENT, cpu_track(cpu)) + text(TRACK_NAME, f"CPU {cpu} lost events")
                                 + message(TRACK_COUNTER, b"")))
            self._packet(number(PACKET_TIMESTAMP, ticks_to_ns(self.first.get(cpu, 0), self.meta.clock_hz))
                         + message(PACKET_TRACK_EVENT, number(EVENT_TYPE, TYPE_COUNTER)
                                   + number(EVENT_TRACK, LOST_TRACKS + cpu_track(cpu)) + number(EVENT_COUNTER, n)))
        self.f.close()
        self.out.commit()

    def abort(self) -> None:
        self.f.close()
        self.out.discard()


def _event_encoder(probe: TraceProbe, bits: int):
    """The TrackEvent fields of one probe's event but its track: the fixed part made once."""
    head = number(EVENT_TYPE, TYPE_INSTANT) + text(EVENT_NAME, probe.spec) + text(EVENT_CATEGORIES, probe.provider)
    fields = [(text(ANNOTATION_NAME, f"arg{i}"), t, tag(_value_field(t), _BYTES if t.kind == "str" else _VARINT))
              for i, t in enumerate(arg_type(a, bits) for a in probe.arg_types)]
    annotations_tag = tag(EVENT_ANNOTATIONS, _BYTES)

    def encode_event(e: Event) -> bytes:
        if len(e.args) != len(fields):
            raise ValueError(f"event {e!r}: {len(fields)} arguments expected")
        out = [head]
        for (name, t, value_tag), v in zip(fields, e.args, strict=True):
            v = t.value(v, repr(e))
            if t.kind == "str":
                b = (UNREADABLE if v is None else v).encode("utf-8", "replace")
                a = name + value_tag + varint(len(b)) + b
            else:
                a = name + value_tag + varint(v)
            out.append(annotations_tag + varint(len(a)) + a)
        return b"".join(out)

    return encode_event


def _value_field(t: ArgType) -> int:
    if t.kind == "str":
        return ANNOTATION_STRING
    return ANNOTATION_POINTER if t.hex else ANNOTATION_INT if t.kind == "int" else ANNOTATION_UINT
