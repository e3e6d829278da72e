"""Where a consumer's packets go: one trace file (or CTF directory) written while the kernel runs.

Every sink takes each packet as it is consumed (its bytes, and its decoded events when the format
needs them), and is finished with the CPUs' lost counts, or aborted: the output is in place whole,
or not at all (sdtgen.atomic.Staged). The destination is checked when the sink is opened, before
anything runs.
"""

from __future__ import annotations

import os
import threading
from typing import IO, Protocol

from sdtgen.atomic import Staged
from sdtgen.trace.model import FORMATS, Format, Lost, TraceMeta
from sdtgen.trace.packets import Event, Packet


class TraceSink(Protocol):
    needs_events: bool

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None: ...

    def finish(self, lost: dict[int, Lost]) -> None: ...

    def abort(self) -> None: ...


class OutputFile:
    """One trace file written over time, by one sink or by several at once (a merged trace's machines, each on its
    own session's thread): each write whole under a lock, the file put in place by ``commit`` or removed by
    ``discard`` (sdtgen.atomic.Staged)."""

    def __init__(self, path: str | os.PathLike[str], role: str, text: bool = False) -> None:
        self.out = Staged(path, role)
        self.lock = threading.Lock()
        self.items = 0  # items appended (append): the next one is preceded by a comma
        try:
            self.f: IO = (open(self.out.path(), "w", encoding="utf-8", errors="replace") if text  # noqa: SIM115
                          else open(self.out.path(), "wb"))  # noqa: SIM115 (closed in commit or discard)
        except BaseException:
            self.out.discard()
            raise

    def write(self, data: bytes | str) -> None:
        with self.lock:
            self.f.write(data)

    def append(self, items: list[str]) -> None:
        """JSON array items, each on a line of its own after the ones before (a comma between two)."""
        if items:
            with self.lock:
                self.f.write((",\n" if self.items else "\n") + ",\n".join(items))
                self.items += len(items)

    def commit(self) -> None:
        with self.lock:
            self.f.close()
            self.out.commit()

    def discard(self) -> None:
        with self.lock:
            self.f.close()
            self.out.discard()


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


class MergedTrace(Protocol):
    """Several machines' traces in one output (sdtgen/trace/merged.py): a sink a machine, thread-safe."""

    def machine(self, meta: TraceMeta, bits: int, little: bool) -> TraceSink: ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


def open_merged_trace(path: str | os.PathLike[str], fmt: Format) -> MergedTrace:
    """The output of several machines at once (docs/trace.md, "Machines"): one Perfetto file, one Chrome JSON file,
    or (CTF) a directory of one trace a machine, DIR/NAME. Its destination is checked now, before anything runs."""
    from sdtgen.trace import merged

    if fmt == "ctf":
        return merged.MergedCtf(path)
    if fmt == "perfetto":
        return merged.MergedPerfetto(path)
    if fmt == "chrome":
        return merged.MergedChrome(path)
    raise ValueError(f"unknown trace format {fmt!r}: one of {', '.join(FORMATS)}")
