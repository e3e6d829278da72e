"""CTF 1.8, the format LTTng writes: a TSDL ``metadata`` file and one stream file per CPU.

The runtime's packets are CTF packets as they stand (sdtgen/layout.py: PACKET, EVENT), so a stream
file is the CPU's packets copied one after another; this module writes the metadata that describes
them, from the event format (sdtgen/event_format.py), and the files. The recorders store a probe's
arguments in its order, so a reader, which shows fields in the order the metadata declares them, prints
`{ arg0 = "usr/lib", arg1 = 3 }` as the probe was declared; `gen --ctf-metadata` writes the same text
for a kernel that copies its packets out itself. Each stream opens with an empty packet of sequence
number 0 and discarded count 0 (the runtime numbers its packets from 1) and closes with an empty one
carrying the CPU's final count: a reader then reports every discarded event exactly, where it
happened (events_discarded is a running count it reads as a difference), and a packet overwritten
unread as a gap in the sequence.

An event: the header (timestamp, id = the probe's key) and context (size, the unreadable-string bits),
8-byte aligned; then the arguments in the probe's order, each integer a register-sized word aligned to its
size, each string NUL-ended.

Tasks (docs/runtime.md, Task context): a kernel with the task hook starts every packet with a task event and
says each change, which a reader shows as `sdt:task` events. So that every event says its task by itself, as
LTTng's `vtid` context does, the trace of such a kernel (known by its first event: a task event) carries one
more event context field, ``tid`` (the task the packet's last task event said; 2^64 - 1 where none was said):
each packet is written with the field put after each event's header, its sizes in the header grown to hold it.
The runtime's packets as they stand (a process's own stream files, `gen --ctf-metadata`) have no such field;
runtime_stream() gives a stream of such a trace back as the runtime's packets (has_task_context() says which).
"""

from __future__ import annotations

import errno
import os
import platform
import re
from collections import OrderedDict
from pathlib import Path
from typing import BinaryIO

from sdtgen.atomic import Staged
from sdtgen.errors import SdtError, printable
from sdtgen.event_format import ArgType, event_format
from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.trace.model import CONTEXTS, Lost, TraceMeta
from sdtgen.trace.packets import Event, Packet

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TASK_EVENT = "sdt:task"  # the task event's name in the metadata
_CONTENT = PACKET.offset("content_size", 64)  # the same on every architecture: the header's fields are fixed-width
_PACKET_SIZE = PACKET.offset("packet_size", 64)
_EVENT = EVENT.struct(64)  # timestamp, id, size, unreadable: fixed-width too (its size is the same either order)
NO_TASK = (1 << 64) - 1  # the tid field of an event before its packet said any task


def is_ctf_trace(directory: Path) -> bool:
    """A directory this writer made: a CTF 1.8 ``metadata`` file and stream files, nothing else."""
    names = [p.name for p in directory.iterdir()]
    if "metadata" not in names or not all(n == "metadata" or re.fullmatch(r"stream_\d+", n) for n in names):
        return False
    try:
        with open(directory / "metadata", "rb") as f:
            return f.read(13) == b"/* CTF 1.8 */"
    except OSError:  # a directory named metadata, unreadable...: not ours
        return False


def metadata(meta: TraceMeta, bits: int, recorded_here: bool = True, tasks: bool = True,
             task_context: bool = False) -> str:
    """The TSDL text describing the runtime's packets and every probe's events (with this machine's name,
    ``recorded_here``, when the trace is recorded here, not described at build time), and the task event
    (``tasks``; not in a module's, whose event blocks follow its kernel's); ``task_context``: every event's context
    holds its ``tid`` (packets written by with_task_context)."""
    from sdtgen import arch as arches

    if not _IDENTIFIER.fullmatch(meta.clock_name):
        raise ValueError(f"clock name {meta.clock_name!r} is not an identifier")
    clock = f"uint64_clock_{meta.clock_name}_t"
    order = "le" if arches.by_name(meta.arch).little else "be"
    m = meta.machine
    lines = [
        "/* CTF 1.8 */",
        "",
        *(f"typealias integer {{ size = {b}; align = 8; signed = false; }} := uint{b}_t;" for b in (16, 32, 64)),
        "",
        "trace {",
        "\tmajor = 1;",
        "\tminor = 8;",
        f"\tbyte_order = {order};",
        "\tpacket.header := struct {",
        "\t\tuint32_t magic;",
        "\t\tuint32_t stream_id;",
        "\t};",
        "};",
        "",
        "env {",
        *([f"\thostname = {_literal(m.name if m else platform.node() or 'localhost')};"] if recorded_here else []),
        *([f"\tmachine_id = {m.machine_id};", f"\tclock_offset_uncertainty_ns = {m.uncertainty_ns};"] if m else []),
        '\tdomain = "kernel";',
        '\ttracer_name = "sdtgen";',
        f"\tarchitecture = {_literal(meta.arch)};",
        f"\tsession = {_literal(meta.session)};",  # the runtime's session its packets come from (their stream_id)
        "};",
        "",
        "clock {",
        f"\tname = {meta.clock_name};",
        *(_clock(meta) if m else [f"\tdescription = {_literal(f'the kernel clock {meta.clock_name}')};",
                                  f"\tfreq = {meta.clock_hz};", "\toffset = 0;", "\tabsolute = FALSE;"]),
        "};",
        "",
        f"typealias integer {{ size = 64; align = 8; signed = false; map = clock.{meta.clock_name}.value; }}"
        f" := {clock};",
        "",
        "stream {",
        f"\tid = {meta.session_id};",
        "\tpacket.context := struct {",
        f"\t\t{clock} timestamp_begin;",
        f"\t\t{clock} timestamp_end;",
        "\t\tuint64_t content_size;",
        "\t\tuint64_t packet_size;",
        "\t\tuint64_t packet_seq_num;",
        "\t\tuint64_t events_discarded;",
        "\t\tuint32_t cpu_id;",
        "\t\tuint32_t events;",
        "\t};",
        "\tevent.header := struct {",
        f"\t\t{clock} timestamp;",
        "\t\tuint32_t id;",
        "\t} align(64);",
        "\tevent.context := struct {",
        "\t\tuint16_t size;",
        "\t\tuint16_t unreadable;",
        *(["\t\tuint64_t tid;"] if task_context else []),
        "\t};",
        "};",
    ]
    lines += _task_event(bits, meta.session_id) if tasks else []
    for probe in meta.probes:
        f = event_format(probe.key, probe.spec, probe.arg_types, bits)
        lines += ["", "event {", f"\tname = {_literal(probe.spec)};", f"\tid = {probe.key};",
                  f"\tstream_id = {meta.session_id};"]
        fields = [f"\t\tstring arg{k};" if t.kind == "str" else f"\t\t{_integer(t, bits)} arg{k};"
                  for k, t in enumerate(f.argtypes)]  # in the probe's order, as the recorder stores them
        lines += ["\tfields := struct {", *fields, "\t};"] if fields else ["\tfields := struct { };"]
        lines.append("};")
    return "\n".join(lines) + "\n"


def _clock(meta: TraceMeta) -> list[str]:
    """The clock block's body of a machine's trace: its offset from the Unix epoch in the host's real time (seconds,
    then the rest in ticks, as offset_s and offset say it), so a reader puts several machines' events in one real
    time order; the origin is the epoch (absolute), which is what babeltrace2's muxer asks of clocks from
    different machines."""
    m = meta.machine
    seconds, rest = divmod(m.offset_ns, 1_000_000_000)
    return [f"\tdescription = {_literal(f'the kernel clock {meta.clock_name} of {m.name}, {m.correlation()}')};",
            f"\tfreq = {meta.clock_hz};", f"\toffset_s = {seconds};",
            f"\toffset = {rest * meta.clock_hz // 1_000_000_000};", "\tabsolute = TRUE;"]


def _task_event(bits: int, stream: int) -> list[str]:
    """The task event (docs/runtime.md) as the runtime writes it (key SDT_TASK_KEY: the id and context words, the
    name): what the events after it in its packet ran for, said as LTTng's statedump says a process."""
    word = f"integer {{ size = {bits}; align = {bits}; signed = false; }}"
    labels = ", ".join(f"{name} = {value}" for value, name in CONTEXTS.items())
    return ["", "event {", f"\tname = {_literal(TASK_EVENT)};", f"\tid = {VALUES['SDT_TASK_KEY']};",
            f"\tstream_id = {stream};", "\tfields := struct {", f"\t\t{word} tid;",
            f"\t\tenum : {word} {{ {labels} }} context;", "\t\tstring procname;", "\t};", "};"]


def _integer(t: ArgType, bits: int) -> str:
    """A register-sized word aligned to its size (after a string, the recorder skips to it), read as the declared
    type's signedness (the caller converted the value to it)."""
    signed = "true" if t.kind == "int" else "false"
    return f"integer {{ size = {bits}; align = {bits}; signed = {signed}; base = {16 if t.hex else 10}; }}"


def _literal(text: str) -> str:
    """A TSDL string literal (C's escapes; the metadata is UTF-8)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else "?" for c in escaped) + '"'


def with_task_context(data: bytes | memoryview, used: int, bits: int, little: bool) -> bytes:
    """The packet (its bytes up to ``used``, where its last event's fields end) with each event's ``tid`` context
    field put after its header: the task its packet's last task event said before it (a task event's own: the
    one it says). Its content and packet sizes say the grown packet; events stay 8-byte aligned."""
    content, size = _grown(data, used, bits, little)
    return bytes(content) + bytes(size - len(content))


def _grown(data: bytes | memoryview, used: int, bits: int, little: bool) -> tuple[bytearray, int]:
    """with_task_context's packet: its content, and its packet size (the zeros after the content not added)."""
    order = "little" if little else "big"
    word = bits // 8
    head = PACKET.size(bits)
    out = bytearray(data[:head])
    at, task, event = head, NO_TASK, EVENT.struct(64, little)
    while at + _EVENT.size <= used:
        _, key, size, _ = event.unpack_from(data, at)
        if size < _EVENT.size:
            break  # not an event: the packet's checks let nothing such through; nothing past it is read
        if key == VALUES["SDT_TASK_KEY"] and at + _EVENT.size + word <= used:
            task = int.from_bytes(data[at + _EVENT.size:at + _EVENT.size + word], order)
        out += bytes(-len(out) % 8)
        end = min(at + size, used)
        out += data[at:at + _EVENT.size]
        out += task.to_bytes(8, order)
        out += data[at + _EVENT.size:end]
        at = (at + size + 7) & ~7
    content = len(out)
    out[_CONTENT:_CONTENT + 8] = (content * 8).to_bytes(8, order)
    size = max((content + 7) & ~7, int.from_bytes(data[_PACKET_SIZE:_PACKET_SIZE + 8], order) // 8)
    out[_PACKET_SIZE:_PACKET_SIZE + 8] = (size * 8).to_bytes(8, order)
    return out, size


def starts_with_task(data: bytes | memoryview, packet: Packet, bits: int, little: bool) -> bool | None:
    """Whether a packet's first event is a task event, which says the kernel has the task hook (and its trace the
    tid event context, with_task_context); None for a packet with no event, which cannot say."""
    head = PACKET.size(bits)
    if packet.used <= head:
        return None
    return EVENT.struct(64, little).unpack_from(data, head)[1] == VALUES["SDT_TASK_KEY"]


def trace_packet(data: bytes | memoryview, packet: Packet, bits: int, little: bool,
                 tasks: bool) -> tuple[list[bytes | memoryview], int]:
    """A packet as a trace holds it, every writer of CTF's (the directory, a relay daemon): its content, in pieces
    (nothing copied where nothing changes), and the count of zero bytes that pad it to its packet size (what lay
    past the content in the ring is not the trace's). The content is the packet up to where its last event's
    fields end: a content that ran on into that event's padding (i386's recorders reserve a multiple of 8 bytes)
    would have a reader look for another event there, so the header then says where they end. ``tasks``: each
    event with its tid context field (with_task_context)."""
    if tasks:
        content, size = _grown(data, packet.used, bits, little)
        return [content], size - len(content)
    view = memoryview(data)[:packet.used]
    pad = packet.size - packet.used
    if packet.used == packet.content:
        return [view], pad
    return [view[:_CONTENT], (packet.used * 8).to_bytes(8, "little" if little else "big"), view[_CONTENT + 8:]], pad


def has_task_context(directory: Path) -> bool:
    """Whether the trace in ``directory`` (this writer's) carries the tid event context field."""
    text = (Path(directory) / "metadata").read_text(encoding="utf-8")
    return "\t\tuint64_t tid;\n\t};" in text.split("event.context := struct {", 1)[-1][:200]


def runtime_stream(stream: bytes, bits: int, little: bool = True) -> bytes:
    """A stream file of a trace with the tid event context (has_task_context) as the runtime's packets: each
    event without the field, each packet's content size what is left (its packet size kept)."""
    order = "little" if little else "big"
    head, event, out, at = PACKET.size(bits), EVENT.struct(64, little), bytearray(), 0
    while at + head <= len(stream):
        content = int.from_bytes(stream[at + _CONTENT:at + _CONTENT + 8], order) // 8
        size = int.from_bytes(stream[at + _PACKET_SIZE:at + _PACKET_SIZE + 8], order) // 8
        if size < head or content > size:
            break  # not this writer's: nothing past it is read
        packet = bytearray(stream[at:at + head])
        e = at + head
        while e + _EVENT.size + 8 <= at + content:
            length = event.unpack_from(stream, e)[2]
            packet += bytes(-len(packet) % 8)
            packet += stream[e:e + _EVENT.size] + stream[e + _EVENT.size + 8:min(e + length + 8, at + content)]
            e = (e + length + 8 + 7) & ~7
        packet[_CONTENT:_CONTENT + 8] = (len(packet) * 8).to_bytes(8, order)
        out += packet + bytes(size - len(packet))
        at += size
    return bytes(out)


def empty_packet(cpu: int, ts: int, seq: int, discarded: int, bits: int, little: bool, stream: int = 0) -> bytes:
    """A packet with no event: the opening one (sequence number 0, discarded count 0: where a stream's counts
    start) and the closing one (the CPU's last discarded count: the events it lost after its last packet), of the
    stream (the session's id) the runtime's packets beside it carry."""
    size = PACKET.size(bits)
    return PACKET.struct(bits, little).pack(VALUES["SDT_PACKET_MAGIC"], stream, ts, ts, size * 8, size * 8, seq,
                                            discarded, cpu, 0)


class CtfSink:
    """A CTF trace directory, each packet appended to its CPU's stream as it comes: its content, then zeros to
    its packet size (what lay past the content in the ring is not the trace's). At most MAX_OPEN stream files
    are open at once, however many CPUs there are."""

    MAX_OPEN = 64

    def __init__(self, path: str | os.PathLike[str], meta: TraceMeta, bits: int, little: bool) -> None:
        self.meta, self.bits, self.little = meta, bits, little
        self.out = Staged(path, "CTF trace", directory=True, replaceable=is_ctf_trace, kind="CTF trace")
        self.files: OrderedDict[int, BinaryIO] = OrderedDict()  # the open stream files, least recently used first
        self.last: dict[int, tuple[int, int, int]] = {}  # CPU -> (sequence number, end, discarded) of its last packet
        self._zeros = b""
        self.max_open = self.MAX_OPEN
        self.tasks: bool | None = None  # every event with its tid (a kernel with the task hook); None: no event yet

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        """The packet as a trace holds it (trace_packet), appended to its CPU's stream."""
        try:
            f = self._stream(cpu, packet)
            if self.tasks is None:  # the first event of the trace says: a task's or not
                self.tasks = starts_with_task(data, packet, self.bits, self.little)
            pieces, pad = trace_packet(data, packet, self.bits, self.little, bool(self.tasks))
            for piece in pieces:
                f.write(piece)
            if len(self._zeros) < pad:
                self._zeros = bytes(pad)
            f.write(memoryview(self._zeros)[:pad])
        except OSError as e:
            raise self._failed(e) from None
        self.last[cpu] = (packet.seq, packet.end, packet.discarded)

    def _stream(self, cpu: int, packet: Packet) -> BinaryIO:
        """``cpu``'s stream file, open for appending (begun with the empty opening packet the first time)."""
        f = self.files.get(cpu)
        if f is not None:
            self.files.move_to_end(cpu)
            return f
        if len(self.files) >= self.max_open:
            self.files.popitem(last=False)[1].close()
        first = cpu not in self.last
        path, mode = self.out.path(f"stream_{cpu}"), "wb" if first else "ab"
        try:
            f = open(path, mode)  # noqa: SIM115 (closed when it is the least used, in finish or abort)
        except OSError as e:
            if e.errno != errno.EMFILE or not self.files:
                raise
            self.max_open = max(1, len(self.files) // 2)  # the process has fewer descriptors: keep half as many
            while len(self.files) >= self.max_open:
                self.files.popitem(last=False)[1].close()
            f = open(path, mode)  # noqa: SIM115
        self.files[cpu] = f
        if first:
            f.write(empty_packet(cpu, packet.begin, 0, 0, self.bits, self.little, self.meta.session_id))
        return f

    def finish(self, lost: dict[int, Lost]) -> None:
        """Each stream closed with an empty packet carrying its CPU's final discarded count (never fewer than its
        last packet said: a reader takes a count that falls as 2^64 - n lost), then the metadata; the trace put
        in place, or (on any failure) nothing."""
        try:
            for cpu, (seq, end, discarded) in self.last.items():
                final = max(discarded, lost[cpu].discarded if cpu in lost else 0)
                closing = empty_packet(cpu, end, seq + 1, final, self.bits, self.little, self.meta.session_id)
                f = self.files.pop(cpu, None)
                if f is None:
                    with open(self.out.path(f"stream_{cpu}"), "ab") as f:
                        f.write(closing)
                else:
                    with f:
                        f.write(closing)
            with open(self.out.path("metadata"), "w", encoding="utf-8") as f:
                f.write(metadata(self.meta, self.bits, task_context=bool(self.tasks)))
            self.out.commit()
        except OSError as e:
            self.abort()
            raise self._failed(e) from None
        except BaseException:
            self.abort()
            raise

    def _failed(self, e: OSError) -> SdtError:
        return SdtError(printable(str(self.out.target)), f"cannot write the CTF trace: {e.strerror}",
                        "check the free space and permissions")

    def abort(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()
        self.out.discard()
