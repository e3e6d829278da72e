"""CTF 1.8, the format LTTng writes: a TSDL ``metadata`` file and one binary stream file per CPU.

Layout (all little-endian, every field byte-aligned, so nothing is padded):

- packet header: magic 0xC1FC1FC1, the trace's UUID, stream_id 0;
- packet context: timestamp_begin, timestamp_end (guest clock), content_size and packet_size (bits),
  events_discarded, cpu_id;
- event header: id (the probe's), timestamp (guest clock);
- event payload: ``arg0``... typed from the probe's declared C types (argtypes.py).

``events_discarded`` is a running count in CTF: a reader reports the increase from one packet to the
next (and only that something was lost, not how much, when the first packet's count is not 0). The ring
buffer reports one count per CPU, not where the events went, so each stream opens with an empty packet
whose count is 0, and every later packet carries the CPU's lost count: babeltrace2 reports exactly that
many discarded events once, at the start of the stream.
"""

from __future__ import annotations

import os
import platform
import re
import struct
import uuid
from collections.abc import Callable
from pathlib import Path

from sdtgen.atomic import write_directory_atomic
from sdtgen.trace.argtypes import UNREADABLE, ArgType, probe_types
from sdtgen.trace.model import TraceEvent, TraceMeta, TraceProbe

MAGIC = 0xC1FC1FC1
HEADER = struct.Struct("<I16sI")  # packet header: magic, uuid, stream_id
CONTEXT = struct.Struct("<QQQQQI")  # begin, end, content_size, packet_size, events_discarded, cpu_id
PACKET_BYTES = 1 << 18  # a packet closes after the event that takes it past this many bytes
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CODES = {8: "B", 16: "H", 32: "I", 64: "Q"}  # integers go out as unsigned: the bits of two's complement


def write_ctf(path: str | os.PathLike[str], meta: TraceMeta, events: list[TraceEvent]) -> None:
    trace_uuid = uuid.uuid4()
    files = [("metadata", metadata(meta, trace_uuid).encode("utf-8"))]
    files += [(f"stream_{cpu}", data) for cpu, data in streams(meta, events, trace_uuid.bytes).items()]
    write_directory_atomic(path, files, "CTF trace", is_ctf_trace, "CTF trace")


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


# -- metadata --------------------------------------------------------------------------
def metadata(meta: TraceMeta, trace_uuid: uuid.UUID) -> str:
    if not _IDENTIFIER.fullmatch(meta.clock_name):
        raise ValueError(f"clock name {meta.clock_name!r} is not an identifier")
    clock = f"uint64_clock_{meta.clock_name}_t"
    lines = [
        "/* CTF 1.8 */",
        "",
        *(f"typealias integer {{ size = {b}; align = 8; signed = false; }} := uint{b}_t;" for b in (8, 32, 64)),
        "",
        "trace {",
        "\tmajor = 1;",
        "\tminor = 8;",
        f'\tuuid = "{trace_uuid}";',
        "\tbyte_order = le;",
        "\tpacket.header := struct {",
        "\t\tuint32_t magic;",
        "\t\tuint8_t uuid[16];",
        "\t\tuint32_t stream_id;",
        "\t};",
        "};",
        "",
        "env {",
        f"\thostname = {_literal(platform.node() or 'localhost')};",
        '\tdomain = "kernel";',
        '\ttracer_name = "sdtgen";',
        f"\tarchitecture = {_literal(meta.arch)};",
        "};",
        "",
        "clock {",
        f"\tname = {meta.clock_name};",
        f"\tdescription = {_literal(f'guest clock {meta.clock_name}')};",
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
        "\t\tuint64_t events_discarded;",
        "\t\tuint32_t cpu_id;",
        "\t};",
        "\tevent.header := struct {",
        "\t\tuint32_t id;",
        f"\t\t{clock} timestamp;",
        "\t};",
        "};",
    ]
    for probe in meta.probes:
        lines += ["", "event {", f"\tname = {_literal(probe.spec)};", f"\tid = {probe.id};", "\tstream_id = 0;"]
        types = probe_types(probe.arg_types, meta.arch)
        if types:
            lines.append("\tfields := struct {")
            lines += [f"\t\t{_field_type(t)} arg{i};" for i, t in enumerate(types)]
            lines.append("\t};")
        else:
            lines.append("\tfields := struct { };")
        lines.append("};")
    return "\n".join(lines) + "\n"


def _field_type(t: ArgType) -> str:
    if t.kind == "str":
        return "string"
    signed = "true" if t.kind == "int" else "false"
    return f"integer {{ size = {t.bits}; align = 8; signed = {signed}; base = {16 if t.hex else 10}; }}"


def _literal(text: str) -> str:
    """A TSDL string literal (C's escapes; the metadata is UTF-8)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else "?" for c in escaped) + '"'


# -- streams ---------------------------------------------------------------------------
def streams(meta: TraceMeta, events: list[TraceEvent], trace_uuid: bytes) -> dict[int, bytes]:
    """Every CPU's stream file: the opening empty packet (lost count 0), then packets of packed events, at
    least one (a CPU with no events has an empty one, carrying its lost count)."""
    packers = {p.id: _packer(p, meta.arch) for p in meta.probes}
    per_cpu: dict[int, list[TraceEvent]] = {cpu: [] for cpu in range(meta.cpus)}
    for e in events:
        try:
            per_cpu[e.cpu].append(e)
        except KeyError:
            raise ValueError(f"event on CPU {e.cpu}, but the trace has {meta.cpus} CPUs") from None
    header = HEADER.pack(MAGIC, trace_uuid, 0)
    bits = (len(header) + CONTEXT.size) * 8
    out = {}
    for cpu, evs in per_cpu.items():
        start = evs[0].ts if evs else 0
        opening = header + CONTEXT.pack(start, start, bits, bits, 0, cpu)  # the count before anything was lost
        out[cpu] = b"".join((opening, *_packets(cpu, evs, packers, header, meta.lost.get(cpu, 0))))
    return out


def _packets(cpu: int, events: list[TraceEvent], packers: dict[int, Callable], header: bytes, lost: int):
    fixed = len(header) + CONTEXT.size
    i, n = 0, len(events)
    while True:
        body, size, first, ts = [], fixed, i, 0
        prev = events[i].ts if i < n else 0
        while i < n and size < PACKET_BYTES:
            e = events[i]
            ts = e.ts
            if ts < prev:
                raise ValueError(f"CPU {cpu}: event {i} at {ts} is before the one at {prev}")
            prev = ts
            try:
                record = packers[e.probe_id](e)
            except Exception as exc:  # a bad event: say which, with the rule it broke
                raise _bad_event(e, packers, exc) from None
            body.append(record)
            size += len(record)
            i += 1
        begin = events[first].ts if i > first else 0
        bits = size * 8
        yield header
        yield CONTEXT.pack(begin, ts if i > first else 0, bits, bits, lost, cpu)
        yield from body
        if i >= n:
            return


def _packer(probe: TraceProbe, arch: str) -> Callable[[TraceEvent], bytes]:
    """One function per probe that packs an event: structs for runs of integers, strings between them.

    The function is made from source so an event costs one call per run of integers, no loop."""
    types = probe_types(probe.arg_types, arch)
    env: dict[str, object] = {"_s": _cstring, "_n": len(types)}
    parts, codes, args = [], "<IQ", [str(probe.id), "e.ts"]

    def close() -> None:
        nonlocal codes, args
        if codes != "<":
            name = f"_p{len(parts)}"
            env[name] = struct.Struct(codes).pack
            parts.append(f"{name}({', '.join(args)})")
        codes, args = "<", []

    for i, t in enumerate(types):
        if t.kind == "str":
            close()
            parts.append(f"_s(a[{i}])")
        else:
            codes += _CODES[t.bits]
            args.append(f"a[{i}] & {(1 << t.bits) - 1:#x}")
    close()
    src = (f"def pack(e):\n a = e.args\n if len(a) != _n: raise IndexError\n"
           f" return {' + '.join(parts)}\n")
    exec(src, env)  # our own source: integers and names made above, nothing from the probe's strings
    return env["pack"]


def _cstring(s: str | None) -> bytes:
    """A string argument as CTF stores it: UTF-8 up to the first NUL (as C sees it), then a NUL."""
    b = (UNREADABLE if s is None else s).encode("utf-8", "replace")
    return b.split(b"\0", 1)[0] + b"\0" if b"\0" in b else b + b"\0"


def _bad_event(e: TraceEvent, packers: dict, exc: Exception) -> ValueError:
    if e.probe_id not in packers:
        return ValueError(f"event of probe id {e.probe_id}, which the trace's probes do not have")
    return ValueError(f"event {e!r} does not fit its probe's argument types ({type(exc).__name__}: {exc})")
