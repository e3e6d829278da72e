"""Chrome trace-event JSON (chrome://tracing, and ui.perfetto.dev opens it too).

Each event is an instant event (``"ph": "i"``, thread scope ``"s": "t"``) of process 1 on thread
CPU + 1 (viewers set thread 0 aside), its arguments ``arg0``... in ``args``; metadata events name the
process and one thread per CPU. ``ts`` is microseconds: ``ticks_to_ns(ticks) / 1000``. ``otherData``
carries the clock and each CPU's lost count. An unreadable string argument is ``null``. Events are
written as their packets come, so the file grows with the run and memory does not.
"""

from __future__ import annotations

import json
import os

from sdtgen.atomic import Staged
from sdtgen.event_format import event_format
from sdtgen.trace.model import DEFAULT_SESSION, Lost, TraceMeta, ticks_to_ns
from sdtgen.trace.packets import Event, Packet

PID = 1


def tid(cpu: int) -> int:
    return cpu + 1


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


class ChromeSink:
    """The JSON document, each event formatted from its probe's template as it comes (json.dumps of a dict
    per event is several times slower, and only strings need its escaping)."""

    def __init__(self, path: str | os.PathLike[str], meta: TraceMeta, bits: int) -> None:
        self.meta = meta
        self.out = Staged(path, "Chrome trace")
        try:
            self.f = open(self.out.path(), "w", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed in finish)
            self._begin(meta, bits)
        except BaseException:  # an interrupt here, too, leaves no temporary file
            self.abort()
            raise

    def _begin(self, meta: TraceMeta, bits: int) -> None:
        """The metadata events, and each probe's template."""
        head: list[dict] = [{"ph": "M", "name": "process_name", "pid": PID,
                             "args": {"name": f"sdtgen kernel ({meta.arch})" + (
                                 "" if meta.session == DEFAULT_SESSION else f", session {meta.session}")}}]
        for cpu in range(meta.cpus):
            head.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid(cpu), "args": {"name": f"CPU {cpu}"}})
            head.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid(cpu),
                         "args": {"sort_index": cpu}})
        self.f.write('{"traceEvents": [\n' + ",\n".join(_json(h) for h in head))
        self.probes = {}
        for p in meta.probes:
            start = f'{{"name": {_json(p.spec)}, "cat": {_json(p.provider)}, "ph": "i", "s": "t", "pid": {PID}, "tid": '
            types = event_format(p.key, p.spec, p.arg_types, bits).argtypes
            self.probes[p.spec] = (start, [(f'"arg{i}": ', t) for i, t in enumerate(types)])

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        hz, out = self.meta.clock_hz, []
        for e in events or ():
            start, fields = self.probes[e.probe]
            args = ", ".join(key + (_json(v) if t.kind == "str" else str(v))
                             for (key, t), v in zip(fields, e.args, strict=True))
            out.append(f',\n{start}{tid(e.cpu)}, "ts": {ticks_to_ns(e.ts, hz) / 1000!r}, "args": {{{args}}}}}')
        self.f.write("".join(out))

    def finish(self, lost: dict[int, Lost]) -> None:
        """The trace closed and put in place, or (on any failure) nothing."""
        try:
            self._end(lost)
        except BaseException:
            self.abort()
            raise

    def _end(self, lost: dict[int, Lost]) -> None:
        other = {"tracer": "sdtgen", "arch": self.meta.arch, "clock": self.meta.clock_name,
                 "clock_hz": self.meta.clock_hz,
                 "lost": {str(cpu): lost[cpu].total if cpu in lost else 0 for cpu in range(self.meta.cpus)}}
        self.f.write(f'\n], "displayTimeUnit": "ns", "otherData": {_json(other)}}}\n')
        self.f.close()
        self.out.commit()

    def abort(self) -> None:
        if hasattr(self, "f"):
            self.f.close()
        self.out.discard()
