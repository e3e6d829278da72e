"""The runtime's packets, read on the host: headers, and events decoded by each probe's declared types.

A packet is what a CPU's ring holds and what a CTF stream file holds (sdtgen/layout.py: PACKET, then
EVENTs). Every consumer (the emulated boot, the Linux process, a serial line) hands packets here; where
an event's arguments are and what each value is come from the event format (sdtgen/event_format.py), which
the recorders and every trace writer read too.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable, Iterator
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

from sdtgen.event_format import EventFormat, align, event_format
from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.plaindata import record, replace
from sdtgen.trace.model import CONTEXTS, Task

MAGIC = VALUES["SDT_PACKET_MAGIC"]
MIN_PACKET = VALUES["SDT_MIN_PACKET"]
TASK_KEY = VALUES["SDT_TASK_KEY"]  # a task event's: no probe's
TASK_TYPES = ("unsigned long", "unsigned long", "char *")  # its id, its context, its name (the runtime's say_task)


class PacketError(ValueError):
    """A packet that is not one: the message says what is wrong."""


class Event(NamedTuple):
    """One recorded firing: what every output is made of."""

    ts: int
    cpu: int
    probe: str
    args: tuple[int | str | None, ...]  # a str is the string copied at the firing; None: NULL or unreadable
    task: Task | None  # what its packet's last task event before it said; None: no task said (docs/runtime.md)


@record(frozen=True)
class Packet:
    cpu: int
    seq: int
    begin: int
    end: int
    content: int  # bytes holding data, header included
    size: int  # bytes of the packet
    discarded: int  # the CPU's running count of discarded events when it closed
    events: int
    used: int = 0  # where the last event's fields end: the content a reader reads (content until events are read)


def _run_of(f: EventFormat, header: int) -> tuple[struct.Struct, struct.Struct]:
    """For a packet of one probe's events only (no strings), each ``stride`` bytes apart: (the timestamps, the
    arguments) of every event, read by ``iter_unpack`` (``header`` is the event header's size)."""
    pad = (-f.size) % 8
    order = f.words.format[0]
    return (struct.Struct(f"{order}Q{f.size + pad - 8}x"),
            struct.Struct(f"{order}{header}x{f.words.format[1:]}{pad}x"))


class Decoder:
    """Packets of one architecture into events, by each probe's key."""

    def __init__(self, formats: Iterable[EventFormat], bits: int, little: bool = True, stream: int = 0) -> None:
        """``stream``: the session whose packets these are (docs/sessions.md: a packet's stream_id is its session's
        id; 0, the default session); a packet of another is refused."""
        self.formats = {f.key: f for f in formats}
        self.stream = stream
        if TASK_KEY in self.formats:
            raise ValueError(f"key {TASK_KEY:#x} is the task event's, no probe's")
        self.task = event_format(TASK_KEY, "task", TASK_TYPES, bits, little)
        self.bits = bits
        self.little = little
        self.header = PACKET.struct(bits, little)
        self.native = little == (sys.byteorder == "little")  # the packets' words read as this machine's
        self.event = EVENT.struct(bits, little)
        self._runs: dict[int, tuple[struct.Struct, struct.Struct]] = {}

    def add(self, formats: Iterable[EventFormat]) -> None:
        """Formats of probes that came later (a module loaded): their events decoded from now on (a key a module
        loaded before had is decoded by its new format)."""
        for f in formats:
            self.formats[f.key] = f
            self._runs.pop(f.key, None)
    def packet(self, data: bytes | memoryview, where: str = "") -> Packet:
        """The header of the packet ``data`` starts with (``data`` holds at least its content); PacketError when it
        is not one a trace reader can read: its magic, stream, sizes or times out of place."""
        if len(data) < self.header.size:
            raise PacketError(f"{where}a packet of {len(data)} bytes is shorter than its header")
        magic, stream, begin, end, content_bits, size_bits, seq, discarded, cpu, events = self.header.unpack_from(data)
        content, size = content_bits // 8, size_bits // 8
        if magic != MAGIC:
            raise PacketError(f"{where}packet magic {magic:#x} is not {MAGIC:#x}")
        if stream != self.stream:
            raise PacketError(f"{where}packet {seq} of CPU {cpu}: stream id {stream}, not {self.stream}")
        if content_bits % 8 or size_bits % 64 or not self.header.size <= content <= size:
            raise PacketError(f"{where}packet {seq} of CPU {cpu}: its sizes (content {content_bits} bits, packet "
                              f"{size_bits} bits) are not a packet's")
        if content > len(data):
            raise PacketError(f"{where}packet {seq} of CPU {cpu}: its content ({content} bytes) runs past the "
                              f"{len(data)} bytes it came in")
        if end < begin:
            raise PacketError(f"{where}packet {seq} of CPU {cpu} ends ({end}) before it begins ({begin})")
        return Packet(cpu, seq, begin, end, content, size, discarded, events, content)

    def events(self, data: bytes | memoryview, where: str = "") -> tuple[Packet, list[Event]]:
        """A packet's header (``used`` filled in) and its events, in the order they were written; PacketError for
        a packet a trace reader would refuse: an event of no probe's id, or longer than its fields (past their
        8-byte alignment), a string without its end, times out of order, content past the last event's padding."""
        p = self.packet(data, where)
        task, at = self._leading_task(data, p, where)
        one = self._one_probe(data, p, where, at)
        if one is None:
            events, n, used = self._each(data, p, where)
        else:
            f, n, body, times, used = one
            events = self._run(p, f, body, times, task)
        return self._counted(p, n, used, where), events

    def counts(self, data: bytes | memoryview, where: str = "") -> tuple[Packet, dict[str, int], str | None]:
        """A packet's header (``used`` filled in), how many events of each probe it holds and the last one's probe:
        what a consumer that shows no event needs (a packet of one probe's events is counted without reading
        them), checked as ``events`` checks it."""
        p = self.packet(data, where)
        _, at = self._leading_task(data, p, where)
        one = self._one_probe(data, p, where, at)
        if one is not None:
            f, n, _, _, used = one
            return self._counted(p, n, used, where), {f.spec: n}, f.spec
        p, events = self.events(data, where)
        counts: dict[str, int] = {}
        for e in events:
            counts[e.probe] = counts.get(e.probe, 0) + 1
        return p, counts, events[-1].probe if events else None

    def event_ends(self, data: bytes | memoryview, end: int) -> list[int]:
        """Where each event after the packet header ends, up to byte ``end`` or the first that is not one of this
        image's (an id no probe has, a size below its header's or its fields', past its fields' padding, or past
        ``end``): how a packet whose content no header says yet (one still open in a ring) is framed. Whether the
        events are whole is for ``events`` to say."""
        out: list[int] = []
        at, head = self.header.size, self.event.size
        while at + head <= end:
            _, key, size, _ = self.event.unpack_from(data, at)
            f = self.task if key == TASK_KEY else self.formats.get(key)  # a task event frames as any other
            if f is None or size < max(head, f.size) or at + size > end or (not f.strings and size > (f.size + 7) & ~7):
                break
            out.append(at + size)
            at = (at + size + 7) & ~7  # events start 8-aligned
        return out

    @staticmethod
    def _counted(p: Packet, n: int, used: int, where: str) -> Packet:
        if n != p.events:
            raise PacketError(f"{where}packet {p.seq} of CPU {p.cpu} holds {n} events, not the {p.events} its header "
                              "says")
        return p if used == p.used else replace(p, used=used)

    def _leading_task(self, data: bytes | memoryview, p: Packet, where: str) -> tuple[Task | None, int]:
        """The task event a packet of a kernel with the task hook starts with, and where the event after it
        starts; (None, the first event's place) for a packet that starts otherwise."""
        at, head = self.header.size, self.event.size
        if p.content - at < head or self.event.unpack_from(data, at)[1] != TASK_KEY:
            return None, at
        _, _, size, unreadable = self.event.unpack_from(data, at)
        task, _ = self._task(data, at, p, size, unreadable, where)
        return task, (at + size + 7) & ~7

    def _task(self, data, at: int, p: Packet, size: int, unreadable: int, where: str) -> tuple[Task, int]:
        """The task event at ``at``: what it says, and the size of its fields."""
        here = f"{where}packet {p.seq} of CPU {p.cpu}: task event at byte {at}"
        (tid, context, name), fields = self._args(self.task, data, at + self.event.size,
                                                  min(at + size, p.content), unreadable, f"{here}: ")
        if at + fields > p.content or not fields <= size <= (fields + 7) & ~7:
            raise PacketError(f"{here} has size {size}")
        if context not in CONTEXTS:
            raise PacketError(f"{here} says context {context}, which is none of the runtime's "
                              f"({', '.join(f'{v} {n}' for v, n in CONTEXTS.items())})")
        return Task(tid, CONTEXTS[context], name), fields

    def _one_probe(self, data: bytes | memoryview, p: Packet, where: str,
                   at: int) -> tuple[EventFormat, int, memoryview, list[int], int] | None:
        """(the probe, how many events, their bytes, their times, where the last one's fields end) for a packet that
        holds from ``at`` on one probe's events only, all without strings (a probe firing in a loop), their times in
        order; None for any other packet (and for anything amiss but the times: the event by event read says
        what)."""
        end, head = p.content, self.event.size
        if end - at < head:
            return None
        _, key, size, unreadable = self.event.unpack_from(data, at)
        f = self.formats.get(key)
        if f is None or f.strings or unreadable:
            return None
        stride = (f.size + 7) & ~7
        n = (end - at - f.size) // stride + 1
        last = at + (n - 1) * stride
        if not f.size <= size <= stride or n < 1 or not last + f.size <= end <= last + size:
            return None
        if at + n * stride <= len(data):
            body = memoryview(data)[at:at + n * stride]
        else:  # the content only, which may end before the last event's padding
            body = memoryview(bytes(data[at:end]).ljust(n * stride, b"\0"))
        # Every event's id, size and unreadable bits (the header's second word) the same as the first's.
        if bytes(body.cast("Q")[1::stride // 8]) != bytes(body[8:head]) * n:
            return None
        if self.native:  # every event's first word, read at once
            times = body.cast("Q")[::stride // 8].tolist()
        else:
            times = list(map(_first, self._runs_of(f)[0].iter_unpack(body)))
        if times[0] < p.begin or times[-1] > p.end or times != sorted(times):
            self._times(times, p, where)
        return f, n, body, times, last + f.size

    def _runs_of(self, f: EventFormat) -> tuple[struct.Struct, struct.Struct]:
        runs = self._runs.get(f.key)
        if runs is None:
            runs = self._runs[f.key] = _run_of(f, self.event.size)
        return runs

    def _run(self, p: Packet, f: EventFormat, body: memoryview, times: list[int], task: Task | None) -> list[Event]:
        """The events of a packet of one probe's events, read at once."""
        args = self._runs_of(f)[1]
        return list(map(_new, repeat(Event), zip(times, repeat(p.cpu), repeat(f.spec), args.iter_unpack(body),
                                                  repeat(task))))

    @staticmethod
    def _times(times: list[int], p: Packet, where: str) -> None:
        """PacketError for the first time out of order: each event's no earlier than the one before it (or the
        packet's beginning), the last no later than the packet's end: a trace reader takes them only so."""
        last = p.begin
        for k, ts in enumerate(times):
            if ts < last:
                raise PacketError(f"{where}packet {p.seq} of CPU {p.cpu}: event {k}'s time {ts} is before "
                                  f"{'the packet begins' if k == 0 else 'the one before it'} ({last})")
            last = ts
        if last > p.end:
            raise PacketError(f"{where}packet {p.seq} of CPU {p.cpu}: its last event's time {last} is after the "
                              f"packet ends ({p.end})")

    def _each(self, data: bytes | memoryview, p: Packet, where: str) -> tuple[list[Event], int, int]:
        """The events one by one, how many (the packet's count: its firings, not its task events) and where the
        last one's fields end. A reader finds each event by its fields (the next at the next multiple of 8) and
        stops where the content ends: so an event's size may be its fields' and their padding to 8 bytes, no
        more, and the content must end in the last event's padding. A task event says the task of the events
        after it."""
        out: list[Event] = []
        task: Task | None = None
        times = []
        at, end = self.header.size, p.content
        used = at
        head = self.event.size
        unpack = self.event.unpack_from
        formats = self.formats
        while at < end:
            here = f"{where}packet {p.seq} of CPU {p.cpu}: event at byte {at}"
            if at + head > end:
                raise PacketError(f"{here} runs past its content")
            ts, key, size, unreadable = unpack(data, at)
            f = formats.get(key)
            if f is None and key == TASK_KEY:
                task, fields = self._task(data, at, p, size, unreadable, where)
                times.append(ts)
                used = at + fields
                at = (at + size + 7) & ~7
                continue
            if f is None:
                raise PacketError(f"{here} has id {key:#x}, which is no probe's of the image")
            if not f.strings:
                fields = f.size
                args = f.words.unpack_from(data, at + head) if at + fields <= end else None
            else:
                args, fields = self._args(f, data, at + head, min(at + size, end), unreadable, f"{here}: ")
            if at + fields > end or not fields <= size <= (fields + 7) & ~7:
                raise PacketError(f"{here} has size {size}")
            out.append(_new(Event, (ts, p.cpu, f.spec, args, task)))
            times.append(ts)
            used = at + fields
            at = (at + size + 7) & ~7  # events start 8-aligned
        if times and (times[0] < p.begin or times[-1] > p.end or times != sorted(times)):
            self._times(times, p, where)
        return out, len(out), used

    def _args(self, f: EventFormat, data, at: int, end: int, unreadable: int, where: str) -> tuple[tuple, int]:
        """The arguments of an event with strings (its leading integers at ``at``, then the rest in the probe's
        order up to ``end`` at most: each string to its NUL, each integer a word at the next multiple of its
        size), and the size of its fields: the header, the arguments and what was skipped before them."""
        args: list = [None] * len(f.types)
        for k, value in zip(f.lead, f.words.unpack_from(data, at), strict=True):
            args[k] = value
        base = at + f.words.size
        chars = bytes(data[base:end])
        pos = 0
        for k, read in zip(f.rest, f.later, strict=True):
            if read is None:
                stop = chars.find(b"\0", pos)
                if stop < 0:
                    raise PacketError(f"{where}string argument {k} of {f.spec} has no end")
                args[k] = None if unreadable >> k & 1 else chars[pos:stop].decode("utf-8", "replace")
                pos = stop + 1
            else:
                pos = align(base + pos, f.word) - base
                if pos + f.word > len(chars):
                    raise PacketError(f"{where}integer argument {k} of {f.spec} runs past its event")
                (args[k],) = read.unpack_from(chars, pos)
                pos += f.word
        return tuple(args), f.size + pos


_new = tuple.__new__  # an Event from its fields' tuple, without a Python-level __new__ per event
_first = itemgetter(0)


def split(stream: bytes, decoder: Decoder, where: str = "") -> Iterator[bytes]:
    """The packets of a stream (a CTF stream file, or what a consumer copied), each whole."""
    at = 0
    while at < len(stream):
        p = decoder.packet(memoryview(stream)[at:], where)
        if at + p.size > len(stream):
            raise PacketError(f"{where}packet {p.seq} of CPU {p.cpu} ({p.size} bytes) runs past the stream's end")
        yield stream[at:at + p.size]
        at += p.size
