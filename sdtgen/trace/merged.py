"""One output holding several machines' traces, written while they all run (docs/trace.md, "Machines").

``open_merged_trace`` (sdtgen/trace/sink.py) gives one of these; each machine's session asks it for its own sink
(``machine``), from its own thread, and they write at once: Perfetto, one file, each machine its own packet
sequence, machine_id and ClockSnapshot; Chrome JSON, one file, a process a machine, every time in the host's real
time; CTF, a directory holding one CTF trace a machine (DIR/NAME, each put in place whole by its own session).
``finish`` puts the whole output in place once every machine's sink finished or stopped (a machine whose session
failed keeps what it wrote: its machine's lines said so); ``abort`` leaves nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sdtgen.errors import SdtError, printable
from sdtgen.trace.model import TraceMeta, machine_id

if TYPE_CHECKING:
    from sdtgen.trace.sink import TraceSink


class _Machines:
    """The machines a merged trace holds, each name once (every one of its outputs is named after it)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.lock = threading.Lock()
        self.names: list[str] = []

    def add(self, meta: TraceMeta) -> int:
        """The machine's place among them, from 0."""
        if meta.machine is None:
            raise ValueError("a merged trace's sinks are machines': TraceMeta.machine is None")
        name = meta.machine.name
        with self.lock:
            if name in self.names:
                raise SdtError(printable(self.path), f"two machines named {printable(name)!r} in one trace",
                               "give each machine its own name")
            same = [n for n in self.names if machine_id(n) == meta.machine.machine_id]
            if same:  # their ids and track uuids would be one: a reader would show one machine
                raise SdtError(printable(self.path), f"machines {printable(same[0])!r} and {printable(name)!r} have "
                               f"the same machine id ({meta.machine.machine_id}) in one trace", "rename one of them")
            self.names.append(name)
            return len(self.names) - 1


class MergedPerfetto(_Machines):
    """One Perfetto file: each machine a sequence of its own (its interned names, its clock) in it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from sdtgen.trace.perfetto import _protos
        from sdtgen.trace.sink import OutputFile

        super().__init__(path)
        _protos()  # the perfetto package, before anything is written
        self.out = OutputFile(path, "Perfetto trace")

    def machine(self, meta: TraceMeta, bits: int, little: bool) -> TraceSink:
        from sdtgen.trace.perfetto import SEQUENCE, PerfettoSink

        sink = PerfettoSink(None, meta, bits, output=self.out, sequence=SEQUENCE + self.add(meta))
        sink.needs_events = True
        return sink

    def finish(self) -> None:
        self.out.commit()

    def abort(self) -> None:
        self.out.discard()


class MergedChrome(_Machines):
    """One Chrome JSON document: a process a machine, its events' ts the host's real time from ``base_ns`` (the
    second the trace was opened in: microseconds from it keep the nanoseconds a double holds)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from sdtgen.trace.sink import OutputFile

        super().__init__(path)
        self.base_ns = time.time_ns() // 1_000_000_000 * 1_000_000_000
        self.others: dict[int, dict] = {}
        self.out = OutputFile(path, "Chrome trace", text=True)
        self.out.write('{"traceEvents": [')

    def machine(self, meta: TraceMeta, bits: int, little: bool) -> TraceSink:
        from sdtgen.trace.chrome import ChromeSink

        sink = ChromeSink(None, meta, bits, merged=self, pid=self.add(meta) + 1)
        sink.needs_events = True
        return sink

    def ended(self, pid: int, other: dict) -> None:
        with self.lock:
            self.others[pid] = other

    def finish(self) -> None:
        from sdtgen.trace.chrome import close_document

        with self.lock:
            machines = {str(pid): other for pid, other in sorted(self.others.items())}
        try:
            self.out.write(close_document({"tracer": "sdtgen", "realtime_base_ns": self.base_ns,
                                           "machines": machines}))
        except BaseException:
            self.out.discard()
            raise
        self.out.commit()

    def abort(self) -> None:
        self.out.discard()


class MergedCtf(_Machines):
    """A directory of CTF traces, DIR/NAME a machine: a new or empty directory, or one holding only CTF traces
    (an earlier one of these); each machine's trace replaced whole when its session finishes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from sdtgen.trace.ctf import is_ctf_trace

        super().__init__(path)
        self.dir = Path(path)
        shown = printable(str(path))
        self.made = not self.dir.exists()
        if self.made:
            try:
                self.dir.mkdir()
            except OSError as e:
                raise SdtError(shown, f"cannot make the traces' directory: {e.strerror}",
                               "give a path in a directory you can write") from None
        elif not self.dir.is_dir():
            raise SdtError(shown, "the machines' traces go in a directory, and this path is not one",
                           "give the path of a new directory")
        elif not all(p.is_dir() and is_ctf_trace(p) for p in self.dir.iterdir()):
            raise SdtError(shown, "the machines' traces would go in a directory that holds other things than CTF "
                           "traces", "give a new path, an empty directory or an earlier one of these")

    def machine(self, meta: TraceMeta, bits: int, little: bool) -> TraceSink:
        from sdtgen.trace.ctf import CtfSink

        self.add(meta)
        sink = CtfSink(self.dir / meta.machine.name, meta, bits, little)
        sink.needs_events = False
        return sink

    def finish(self) -> None:
        """Each machine's trace was put in place by its own sink."""

    def abort(self) -> None:
        """The directory removed when this made it and no machine's trace is in it."""
        if self.made:
            with contextlib.suppress(OSError):  # a machine's trace was put in place: kept
                self.dir.rmdir()
