"""Chrome trace-event JSON (chrome://tracing, and ui.perfetto.dev opens it too).

Each event is an instant event (``"ph": "i"``, thread scope ``"s": "t"``) of process 1 on thread
CPU + 1 (viewers set thread 0 aside), its arguments ``arg0``... in ``args``; metadata events name the
process and one thread per CPU. ``ts`` is microseconds: ``ticks_to_ns(ticks) / 1000``. ``otherData``
carries the guest clock and each CPU's lost count. An unreadable string argument is ``null``.
"""

from __future__ import annotations

import json
import os

from sdtgen.atomic import write_atomic
from sdtgen.trace.argtypes import probe_types
from sdtgen.trace.model import TraceEvent, TraceMeta, ticks_to_ns

PID = 1


def tid(cpu: int) -> int:
    return cpu + 1


def document(meta: TraceMeta, events: list[TraceEvent]) -> str:
    """The JSON text. Events are formatted from per-probe templates: json.dumps of a dict per event is
    several times slower, and only strings need its escaping."""
    guest = f"sdtgen guest ({meta.arch})"
    head: list[dict] = [{"ph": "M", "name": "process_name", "pid": PID, "args": {"name": guest}}]
    for cpu in range(meta.cpus):
        head.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid(cpu), "args": {"name": f"CPU {cpu}"}})
        head.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid(cpu), "args": {"sort_index": cpu}})
    probes = {}
    for p in meta.probes:
        start = f'{{"name": {_json(p.spec)}, "cat": {_json(p.provider)}, "ph": "i", "s": "t", "pid": {PID}, "tid": '
        probes[p.id] = (start, [(f'"arg{i}": ', t) for i, t in enumerate(probe_types(p.arg_types, meta.arch))])
    out = [_json(h) for h in head]
    for e in events:
        try:
            start, fields = probes[e.probe_id]
        except KeyError:
            raise ValueError(f"event {e!r}: no such probe id in the trace") from None
        if len(e.args) != len(fields) or not 0 <= e.cpu < meta.cpus:
            raise ValueError(f"event {e!r}: {len(fields)} arguments and a CPU below {meta.cpus} expected")
        args = ", ".join(key + (_json(t.value(v, repr(e))) if t.kind == "str" else str(t.value(v, repr(e))))
                         for (key, t), v in zip(fields, e.args, strict=True))
        out.append(f'{start}{tid(e.cpu)}, "ts": {ticks_to_ns(e.ts, meta.clock_hz) / 1000!r}, "args": {{{args}}}}}')
    other = {"tracer": "sdtgen", "arch": meta.arch, "clock": meta.clock_name, "clock_hz": meta.clock_hz,
             "lost": {str(cpu): meta.lost.get(cpu, 0) for cpu in range(meta.cpus)}}
    return '{"traceEvents": [\n' + ",\n".join(out) + f'\n], "displayTimeUnit": "ns", "otherData": {_json(other)}}}\n'


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def write_chrome(path: str | os.PathLike[str], meta: TraceMeta, events: list[TraceEvent]) -> None:
    write_atomic(path, document(meta, events).encode("utf-8", "replace"))
