"""CTF 1.8, the format LTTng writes: a TSDL ``metadata`` file and one stream file per CPU.

The runtime's packets are CTF packets as they stand (sdtgen/layout.py: PACKET, EVENT), so a stream
file is the CPU's packets copied one after another; this module writes the metadata that describes
them, from the probe descriptors, and the files. Each stream opens with an empty packet of sequence
number 0 and discarded count 0 (the runtime numbers its packets from 1) and closes with an empty one
carrying the CPU's final count: a reader then reports every discarded event exactly, where it
happened (events_discarded is a running count it reads as a difference), and a packet overwritten
unread as a gap in the sequence.

An event: the header (timestamp, id = the probe's key) and context (size, the unreadable-string bits),
8-byte aligned; then each integer argument as a register-sized word, then each string argument (NUL-ended).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from sdtgen.argtypes import ArgType, arg_type
from sdtgen.atomic import Staged
from sdtgen.layout import PACKET, VALUES
from sdtgen.recorder import event_layout
from sdtgen.trace.model import Lost, TraceMeta
from sdtgen.trace.packets import Event, Packet

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


def metadata(meta: TraceMeta, bits: int, recorded_here: bool = True) -> str:
    """The TSDL text describing the runtime's packets and every probe's events (with this machine's name,
    ``recorded_here``, when the trace is recorded here, not described at build time)."""
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
        fields = [f"\t\t{_integer(arg_type(probe.arg_types[k], bits), bits)} arg{k};" for k in lay.ints]
        fields += [f"\t\tstring arg{k};" for k in lay.strings]
        lines += ["\tfields := struct {", *fields, "\t};"] if fields else ["\tfields := struct { };"]
        lines.append("};")
    return "\n".join(lines) + "\n"


def _integer(t: ArgType, bits: int) -> str:
    """A register-sized word, read as the declared type's signedness (the caller converted the value to it)."""
    signed = "true" if t.kind == "int" else "false"
    return f"integer {{ size = {bits}; align = {bits}; signed = {signed}; base = {16 if t.hex else 10}; }}"


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
    """A CTF trace directory, each packet appended to its CPU's stream as it comes."""

    def __init__(self, path: str | os.PathLike[str], meta: TraceMeta, bits: int, little: bool) -> None:
        self.meta, self.bits, self.little = meta, bits, little
        self.out = Staged(path, "CTF trace", directory=True, replaceable=is_ctf_trace, kind="CTF trace")
        self.files: dict[int, object] = {}
        self.last: dict[int, tuple[int, int]] = {}  # CPU -> (sequence number, end) of its last packet

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        f = self.files.get(cpu)
        if f is None:
            f = self.files[cpu] = open(self.out.path(f"stream_{cpu}"), "wb")  # noqa: SIM115 (closed in finish)
            f.write(empty_packet(cpu, packet.begin, 0, 0, self.bits, self.little))
        f.write(data)
        self.last[cpu] = (packet.seq, packet.end)

    def finish(self, lost: dict[int, Lost]) -> None:
        for cpu, f in self.files.items():
            seq, end = self.last[cpu]
            discarded = lost[cpu].discarded if cpu in lost else 0
            f.write(empty_packet(cpu, end, seq + 1, discarded, self.bits, self.little))
            f.close()
        with open(self.out.path("metadata"), "w", encoding="utf-8") as f:
            f.write(metadata(self.meta, self.bits))
        self.out.commit()

    def abort(self) -> None:
        for f in self.files.values():
            f.close()
        self.out.discard()
