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

from sdtgen.atomic import write_atomic
from sdtgen.trace.argtypes import UNREADABLE, ArgType, probe_types
from sdtgen.trace.model import TraceEvent, TraceMeta, TraceProbe, ticks_to_ns

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


def encode(meta: TraceMeta, events: list[TraceEvent]) -> bytes:
    out = []

    def packet(body: bytes) -> None:
        out.append(message(TRACE_PACKET, body + number(PACKET_SEQUENCE, SEQUENCE)))

    first: dict[int, int] = {}
    for e in events:
        first.setdefault(e.cpu, e.ts)
    lost = {cpu: n for cpu, n in sorted(meta.lost.items()) if n and 0 <= cpu < meta.cpus}
    for cpu in range(meta.cpus):  # every track is described before the first event on it
        packet(message(PACKET_TRACK_DESCRIPTOR, number(TRACK_UUID, cpu_track(cpu)) + text(TRACK_NAME, f"CPU {cpu}")))
    for cpu in lost:
        packet(message(PACKET_TRACK_DESCRIPTOR, number(TRACK_UUID, LOST_TRACKS + cpu_track(cpu))
                       + number(TRACK_PARENT, cpu_track(cpu)) + text(TRACK_NAME, f"CPU {cpu} lost events")
                       + message(TRACK_COUNTER, b"")))
    for cpu, n in lost.items():
        packet(number(PACKET_TIMESTAMP, ticks_to_ns(first.get(cpu, 0), meta.clock_hz))
               + message(PACKET_TRACK_EVENT, number(EVENT_TYPE, TYPE_COUNTER)
                         + number(EVENT_TRACK, LOST_TRACKS + cpu_track(cpu)) + number(EVENT_COUNTER, n)))
    encoders = {p.id: _event_encoder(p, meta.arch) for p in meta.probes}
    tracks = {cpu: number(EVENT_TRACK, cpu_track(cpu)) for cpu in range(meta.cpus)}
    hz, ts_tag, seq = meta.clock_hz, tag(PACKET_TIMESTAMP, _VARINT), number(PACKET_SEQUENCE, SEQUENCE)
    packet_tag, event_tag = tag(TRACE_PACKET, _BYTES), tag(PACKET_TRACK_EVENT, _BYTES)
    for e in events:
        try:
            body = encoders[e.probe_id](e) + tracks[e.cpu]
        except KeyError:
            raise ValueError(f"event {e!r}: no such probe id or CPU in the trace") from None
        p = ts_tag + varint(ticks_to_ns(e.ts, hz)) + event_tag + varint(len(body)) + body + seq
        out.append(packet_tag + varint(len(p)) + p)
    return b"".join(out)


def _event_encoder(probe: TraceProbe, arch: str):
    """The TrackEvent fields of one probe's event but its track: the fixed part made once."""
    head = number(EVENT_TYPE, TYPE_INSTANT) + text(EVENT_NAME, probe.spec) + text(EVENT_CATEGORIES, probe.provider)
    fields = [(text(ANNOTATION_NAME, f"arg{i}"), t, tag(_value_field(t), _BYTES if t.kind == "str" else _VARINT))
              for i, t in enumerate(probe_types(probe.arg_types, arch))]
    annotations_tag = tag(EVENT_ANNOTATIONS, _BYTES)

    def encode_event(e: TraceEvent) -> bytes:
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


def write_perfetto(path: str | os.PathLike[str], meta: TraceMeta, events: list[TraceEvent]) -> None:
    write_atomic(path, encode(meta, events))
