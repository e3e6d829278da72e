"""Where a consumer's packets go: one trace file (or CTF directory) written while the kernel runs.

Every sink takes each packet as it is consumed (its bytes, and its decoded events when the format
needs them), and is finished with the CPUs' lost counts, or aborted: the output is in place whole,
or not at all (sdtgen.atomic.Staged). The destination is checked when the sink is opened, before
anything runs.
"""

from __future__ import annotations

import os
from typing import Protocol

from sdtgen.trace.model import FORMATS, Format, Lost, TraceMeta
from sdtgen.trace.packets import Event, Packet


class TraceSink(Protocol):
    needs_events: bool

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None: ...

    def finish(self, lost: dict[int, Lost]) -> None: ...

    def abort(self) -> None: ...


def guess_format(path: str) -> Format | None:
    """The format a path names by its extension (.json, .pftrace/.perfetto-trace), or None (CTF: a directory)."""
    name = os.path.basename(path.rstrip("/")).lower()
    if name.endswith(".json"):
        return "chrome"
    if name.endswith((".pftrace", ".perfetto-trace", ".pb")):
        return "perfetto"
    return None


def open_trace(path: str | os.PathLike[str], fmt: Format, meta: TraceMeta, bits: int, little: bool) -> TraceSink:
    if fmt == "ctf":
        from sdtgen.trace.ctf import CtfSink

        sink = CtfSink(path, meta, bits, little)
        sink.needs_events = False
    elif fmt == "perfetto":
        from sdtgen.trace.perfetto import PerfettoSink

        sink = PerfettoSink(path, meta, bits)
        sink.needs_events = True
    elif fmt == "chrome":
        from sdtgen.trace.chrome import ChromeSink

        sink = ChromeSink(path, meta, bits)
        sink.needs_events = True
    else:
        raise ValueError(f"unknown trace format {fmt!r}: one of {', '.join(FORMATS)}")
    return sink
