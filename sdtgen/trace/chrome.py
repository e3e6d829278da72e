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


def document(meta: TraceMeta, events: list[TraceEvent]) -> dict:
    out: list[dict] = [{"ph": "M", "name": "process_name", "pid": PID,
                        "args": {"name": f"sdtgen guest ({meta.arch})"}}]
    for cpu in range(meta.cpus):
        out.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid(cpu), "args": {"name": f"CPU {cpu}"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid(cpu), "args": {"sort_index": cpu}})
    probes = {p.id: (p.spec, p.provider, probe_types(p.arg_types, meta.arch)) for p in meta.probes}
    for e in events:
        try:
            name, cat, types = probes[e.probe_id]
        except KeyError:
            raise ValueError(f"event {e!r}: no such probe id in the trace") from None
        if len(e.args) != len(types) or not 0 <= e.cpu < meta.cpus:
            raise ValueError(f"event {e!r}: {len(types)} arguments and a CPU below {meta.cpus} expected")
        args = {f"arg{i}": t.value(v, repr(e)) for i, (t, v) in enumerate(zip(types, e.args, strict=True))}
        out.append({"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ticks_to_ns(e.ts, meta.clock_hz) / 1000,
                    "pid": PID, "tid": tid(e.cpu), "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"tracer": "sdtgen", "arch": meta.arch, "clock": meta.clock_name, "clock_hz": meta.clock_hz,
                          "lost": {str(cpu): meta.lost.get(cpu, 0) for cpu in range(meta.cpus)}}}


def write_chrome(path: str | os.PathLike[str], meta: TraceMeta, events: list[TraceEvent]) -> None:
    write_atomic(path, (json.dumps(document(meta, events), ensure_ascii=False) + "\n").encode("utf-8"))
