"""CTF 1.8, the format LTTng writes: a TSDL ``metadata`` file and one stream file per CPU.

The runtime's packets are CTF packets as they stand (sdtgen/layout.py: PACKET, EVENT), so a stream
file is the CPU's packets copied one after another; this module writes the metadata that describes
them, from the probe descriptors, and the files. One change on the way: the runtime stores a probe's
integers first (fixed offsets a recorder writes without counting), and a reader shows fields in the
order the metadata declares them, so an event of a probe whose string comes before an integer has its
arguments put back in the probe's order (the same bytes, the integers after a string declared byte
aligned): babeltrace2 prints `{ arg0 = "usr/lib", arg1 = 3 }`, as the probe was declared. `gen
--ctf-metadata` describes the packets as the runtime writes them (``probe_order`` False), for a kernel
that copies them out itself. Each stream opens with an empty packet of sequence
number 0 and discarded count 0 (the runtime numbers its packets from 1) and closes with an empty one
carrying the CPU's final count: a reader then reports every discarded event exactly, where it
happened (events_discarded is a running count it reads as a difference), and a packet overwritten
unread as a gap in the sequence.

An event: the header (timestamp, id = the probe's key) and context (size, the unreadable-string bits),
8-byte aligned; then each integer argument as a register-sized word, then each string argument (NUL-ended).
"""

from __future__ import annotations

import errno
import os
import platform
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sdtgen.argtypes import ArgType, arg_type
from sdtgen.atomic import Staged
from sdtgen.errors import SdtError, printable
from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.recorder import EventLayout, event_layout
from sdtgen.trace.model import Lost, TraceMeta
from sdtgen.trace.packets import Event, Packet

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTENT = PACKET.offset("content_size", 64)  # the same on every architecture: the header's fields are fixed-width


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


def metadata(meta: TraceMeta, bits: int, recorded_here: bool = True, probe_order: bool = False) -> str:
    """The TSDL text describing the runtime's packets and every probe's events (with this machine's name,
    ``recorded_here``, when the trace is recorded here, not described at build time); ``probe_order``: each
    event's fields in its probe's order, as CtfSink writes them, else in the runtime's (integers first)."""
    from sdtgen import arch as arches

    if not _IDENTIFIER.fullmatch(meta.clock_name):
        raise ValueError(f"clock name {meta.clock_name!r} is not an identifier")
    clock = f"uint64_clock_{meta.clock_name}_t"
    order = "le" if arches.by_name(meta.arch).little else "be"
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
        *([f"\thostname = {_literal(platform.node() or 'localhost')};"] if recorded_here else []),
        '\tdomain = "kernel";',
        '\ttracer_name = "sdtgen";',
        f"\tarchitecture = {_literal(meta.arch)};",
        "};",
        "",
        "clock {",
        f"\tname = {meta.clock_name};",
        f"\tdescription = {_literal(f'the kernel clock {meta.clock_name}')};",
        f"\tfreq = {meta.clock_hz};",
        "\toffset = 0;",
        "\tabsolute = FALSE;",
        "};",
        "",
        f"typealias integer {{ size = 64; align = 8; signed = false; map = clock.{meta.clock_name}.value; }}"
        f" := {clock};",
        "",
        "stream {",
        "\tid = 0;",
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
        "\t};",
        "};",
    ]
    for probe in meta.probes:
        lay = event_layout(probe.arg_types, bits)
        lines += ["", "event {", f"\tname = {_literal(probe.spec)};", f"\tid = {probe.key};", "\tstream_id = 0;"]
        fields = [f"\t\t{_integer(arg_type(t, bits), bits, _after_string(lay, k, probe_order))} arg{k};"
                  if k in lay.ints else f"\t\tstring arg{k};"
                  for k, t in ((k, probe.arg_types[k]) for k in _declared(lay, probe_order))]
        lines += ["\tfields := struct {", *fields, "\t};"] if fields else ["\tfields := struct { };"]
        lines.append("};")
    return "\n".join(lines) + "\n"


def _declared(lay: EventLayout, probe_order: bool) -> list[int]:
    """The argument numbers in the order their fields are declared (and stored)."""
    return list(range(len(lay.ints) + len(lay.strings))) if probe_order else [*lay.ints, *lay.strings]


def _after_string(lay: EventLayout, k: int, probe_order: bool) -> bool:
    return probe_order and bool(lay.strings) and k > min(lay.strings)


def _integer(t: ArgType, bits: int, after_string: bool = False) -> str:
    """A register-sized word, read as the declared type's signedness (the caller converted the value to it); one
    after a string is where the string ended (``align = 8``: no padding was put before it)."""
    signed = "true" if t.kind == "int" else "false"
    align = 8 if after_string else bits
    return f"integer {{ size = {bits}; align = {align}; signed = {signed}; base = {16 if t.hex else 10}; }}"


@dataclass(frozen=True)
class _Reorder:
    """How to put one probe's stored arguments in its order: the bytes of its integer words, how many strings
    follow them, and for each argument in the probe's order (a string?, its place among the strings or words)."""

    words: int
    word: int
    strings: int
    order: tuple[tuple[bool, int], ...]


def _reorders(meta: TraceMeta, bits: int) -> dict[int, _Reorder]:
    """The probes whose stored order is not theirs (a string before an integer), by event id."""
    out: dict[int, _Reorder] = {}
    for probe in meta.probes:
        lay = event_layout(probe.arg_types, bits)
        if lay.strings and lay.ints and min(lay.strings) < max(lay.ints):
            order = tuple((k in lay.strings, lay.strings.index(k) if k in lay.strings else lay.ints.index(k))
                          for k in range(len(probe.arg_types)))
            out[probe.key] = _Reorder(lay.word * len(lay.ints), lay.word, len(lay.strings), order)
    return out


def in_probe_order(data: bytes | memoryview, used: int, reorders: dict[int, _Reorder], bits: int,
                   little: bool, back: bool = False) -> bytes | memoryview:
    """A packet (its first ``used`` bytes) with the arguments of each event of ``reorders``' probes in the
    probe's order (``back``: from the probe's order back to the runtime's, integers first, as a trace written
    here is turned into what the runtime wrote): the same bytes, moved within the event; ``data`` itself when it
    holds none."""
    event = EVENT.struct(bits, little)
    head = event.size
    out: bytearray | None = None
    at = PACKET.size(bits)
    while at + head <= used:
        _, key, size, _ = event.unpack_from(data, at)
        if size < head:  # the packet was checked before it came here: not an event's size, so stop
            break
        r = reorders.get(key)
        if r is not None:
            if out is None:
                out = bytearray(data[:used])
            body = at + head
            fields = (_from_probe_order if back else _from_runtime_order)(out, body, min(at + size, used), r)
            if fields is not None:
                words, strings, end = fields
                out[body:end] = (b"".join(words) + b"".join(strings) if back else
                                 b"".join(strings[i] if is_string else words[i] for is_string, i in r.order))
        at = (at + size + 7) & ~7
    return data if out is None else out


def _string(buf: bytearray, pos: int, stop: int) -> bytes | None:
    nul = buf.find(b"\0", pos, stop)
    return None if nul < 0 else bytes(buf[pos:nul + 1])


def _from_runtime_order(buf: bytearray, body: int, stop: int, r: _Reorder) -> tuple[list, list, int] | None:
    """(the integer words, the strings with their NULs, where they end) of an event as the runtime stores it."""
    words = [bytes(buf[body + j * r.word:body + (j + 1) * r.word]) for j in range(r.words // r.word)]
    strings, pos = [], body + r.words
    for _ in range(r.strings):
        text = _string(buf, pos, stop)
        if text is None:
            return None
        strings.append(text)
        pos += len(text)
    return words, strings, pos


def _from_probe_order(buf: bytearray, body: int, stop: int, r: _Reorder) -> tuple[list, list, int] | None:
    """The same, of an event whose arguments are in its probe's order."""
    words, strings, pos = [], [], body
    for is_string, _ in r.order:
        piece = _string(buf, pos, stop) if is_string else bytes(buf[pos:pos + r.word])
        if piece is None or len(piece) == 0 or pos + len(piece) > stop:
            return None
        (strings if is_string else words).append(piece)
        pos += len(piece)
    return words, strings, pos


def runtime_order(data: bytes, meta: TraceMeta, bits: int, little: bool) -> bytes | memoryview:
    """A packet of a CTF trace written here, as the runtime wrote it (its integers first): what a reader that
    takes the runtime's packets (a trace writer, the decoder without ``probe_order``) is given."""
    return in_probe_order(data, len(data), _reorders(meta, bits), bits, little, back=True)


def _literal(text: str) -> str:
    """A TSDL string literal (C's escapes; the metadata is UTF-8)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else "?" for c in escaped) + '"'


def empty_packet(cpu: int, ts: int, seq: int, discarded: int, bits: int, little: bool) -> bytes:
    """A packet with no event: the opening one (sequence number 0, discarded count 0: where a stream's counts
    start) and the closing one (the CPU's last discarded count: the events it lost after its last packet)."""
    size = PACKET.size(bits)
    return PACKET.struct(bits, little).pack(VALUES["SDT_PACKET_MAGIC"], 0, ts, ts, size * 8, size * 8, seq, discarded,
                                            cpu, 0)


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
        self.reorders = _reorders(meta, bits)  # the probes whose events are put in their order
        # Their event ids as they are stored: a packet none of them occurs in is written without a look at its
        # events (one search in C per probe; a match in an argument's bytes only costs the look).
        self._ids = [key.to_bytes(4, "little" if little else "big") for key in self.reorders]

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        """The packet as it stands, up to where its last event's fields end: a content that ran on into that
        event's padding (i386's recorders reserve a multiple of 8 bytes) would have a reader look for another
        event there, so the header then says where they end."""
        try:
            f = self._stream(cpu, packet)
            if self._ids:
                raw = data if isinstance(data, (bytes, bytearray)) else bytes(data)
                if any(raw.find(i, 0, packet.used) >= 0 for i in self._ids):
                    data = in_probe_order(raw, packet.used, self.reorders, self.bits, self.little)
            content = memoryview(data)[:packet.used]
            if packet.used != packet.content:
                f.write(content[:_CONTENT])
                f.write((packet.used * 8).to_bytes(8, "little" if self.little else "big"))
                content = content[_CONTENT + 8:]
            f.write(content)
            pad = packet.size - packet.used
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
            f.write(empty_packet(cpu, packet.begin, 0, 0, self.bits, self.little))
        return f

    def finish(self, lost: dict[int, Lost]) -> None:
        """Each stream closed with an empty packet carrying its CPU's final discarded count (never fewer than its
        last packet said: a reader takes a count that falls as 2^64 - n lost), then the metadata; the trace put
        in place, or (on any failure) nothing."""
        try:
            for cpu, (seq, end, discarded) in self.last.items():
                final = max(discarded, lost[cpu].discarded if cpu in lost else 0)
                closing = empty_packet(cpu, end, seq + 1, final, self.bits, self.little)
                f = self.files.pop(cpu, None)
                if f is None:
                    with open(self.out.path(f"stream_{cpu}"), "ab") as f:
                        f.write(closing)
                else:
                    with f:
                        f.write(closing)
            with open(self.out.path("metadata"), "w", encoding="utf-8") as f:
                f.write(metadata(self.meta, self.bits, probe_order=True))
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
