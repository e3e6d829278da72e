"""Chrome trace-event JSON (chrome://tracing, and ui.perfetto.dev opens it too).

Each event is an instant event (``"ph": "i"``, thread scope ``"s": "t"``) of process 1 on thread
CPU + 1 (viewers set thread 0 aside), its arguments ``arg0``... in ``args``; metadata events name the
process and one thread per CPU. ``ts`` is microseconds: ``ticks_to_ns(ticks) / 1000``. ``otherData``
carries the clock and each CPU's lost count. An unreadable string argument is ``null``. Events are
written as their packets come, so the file grows with the run and memory does not.

Machines (docs/trace.md, "Machines"): a merged trace of several machines (sdtgen/trace/merged.py) is one file,
a process a machine (named after it, its pid its place among them from 1), every ``ts`` in the host's real time
from the merged trace's base (``otherData.realtime_base_ns``), so the machines' events line up.
"""

from __future__ import annotations

import json
import os
from typing import Protocol

from sdtgen.event_format import event_format
from sdtgen.trace.model import DEFAULT_SESSION, Lost, TraceMeta, ticks_to_ns
from sdtgen.trace.packets import Event, Packet
from sdtgen.trace.sink import OutputFile

PID = 1


def tid(cpu: int) -> int:
    return cpu + 1


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


class Merged(Protocol):
    """What a machine's sink of a merged Chrome trace writes into (sdtgen/trace/merged.py)."""

    out: OutputFile
    base_ns: int  # the host's real time ts 0 is

    def ended(self, pid: int, other: dict) -> None:
        """The machine's sink finished: what its otherData says."""
        ...


def other_data(meta: TraceMeta, lost: dict[int, Lost]) -> dict:
    """What a trace says of its kernel beside its events: the clock, each CPU's lost count, the machine."""
    other = {"tracer": "sdtgen", "arch": meta.arch, "clock": meta.clock_name, "clock_hz": meta.clock_hz,
             "lost": {str(cpu): lost[cpu].total if cpu in lost else 0 for cpu in range(meta.cpus)}}
    if meta.machine is not None:
        m = meta.machine
        other["machine"] = {"name": m.name, "machine_id": m.machine_id, "offset_ns": m.offset_ns,
                            "uncertainty_ns": m.uncertainty_ns}
    return other


class ChromeSink:
    """The JSON document, each event formatted from its probe's template as it comes (json.dumps of a dict
    per event is several times slower, and only strings need its escaping). Given ``merged``, the sink writes its
    machine as process ``pid`` of the merged trace's file, in its real time."""

    def __init__(self, path: str | os.PathLike[str] | None, meta: TraceMeta, bits: int, merged: Merged | None = None,
                 pid: int = PID) -> None:
        self.meta = meta
        self.merged, self.pid = merged, pid
        # ns added to every event's kernel time: a merged trace's are the host's real time from its base
        self.shift = meta.machine.offset_ns - merged.base_ns if merged is not None else 0
        self.out = merged.out if merged is not None else OutputFile(path, "Chrome trace", text=True)
        try:
            self._begin(meta, bits)
        except BaseException:  # an interrupt here, too, leaves no temporary file
            self.abort()
            raise

    def _begin(self, meta: TraceMeta, bits: int) -> None:
        """The metadata events, and each probe's template."""
        pid = self.pid
        kernel = meta.machine.name if meta.machine is not None else "sdtgen kernel"
        head: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid,
                             "args": {"name": f"{kernel} ({meta.arch})" + (
                                 "" if meta.session == DEFAULT_SESSION else f", session {meta.session}")}}]
        for cpu in range(meta.cpus):
            head.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid(cpu), "args": {"name": f"CPU {cpu}"}})
            head.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid(cpu),
                         "args": {"sort_index": cpu}})
        if self.merged is None:
            self.out.write('{"traceEvents": [')
        self.out.append([_json(h) for h in head])
        self.probes = {}
        for p in meta.probes:
            start = f'{{"name": {_json(p.spec)}, "cat": {_json(p.provider)}, "ph": "i", "s": "t", "pid": {pid}, "tid": '
            types = event_format(p.key, p.spec, p.arg_types, bits).argtypes
            self.probes[p.spec] = (start, [(f'"arg{i}": ', t) for i, t in enumerate(types)])

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        hz, shift, out = self.meta.clock_hz, self.shift, []
        for e in events or ():
            start, fields = self.probes[e.probe]
            args = ", ".join(key + (_json(v) if t.kind == "str" else str(v))
                             for (key, t), v in zip(fields, e.args, strict=True))
            out.append(f'{start}{tid(e.cpu)}, "ts": {(ticks_to_ns(e.ts, hz) + shift) / 1000!r}, "args": {{{args}}}}}')
        self.out.append(out)

    def finish(self, lost: dict[int, Lost]) -> None:
        """The trace closed and put in place, or (on any failure) nothing."""
        try:
            self._end(lost)
        except BaseException:
            self.abort()
            raise

    def _end(self, lost: dict[int, Lost]) -> None:
        if self.merged is not None:
            self.merged.ended(self.pid, other_data(self.meta, lost))
            return
        self.out.write(close_document(other_data(self.meta, lost)))
        self.out.commit()

    def abort(self) -> None:
        """The file removed; a merged trace's machine only stops (what it wrote stays, the file is its owner's)."""
        if self.merged is None and hasattr(self, "out"):
            self.out.discard()


def close_document(other: dict) -> str:
    """The end of the JSON document: the events' array closed, then what the trace says beside them."""
    return f'\n], "displayTimeUnit": "ns", "otherData": {_json(other)}}}\n'
