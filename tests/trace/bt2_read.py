"""Read a CTF trace with babeltrace2's Python bindings; print JSON lines (run by Debian's python3).

One line per message that matters: event (name, cpu, timestamp in clock cycles, fields, and its tid when the
stream's event context has one), discarded
events (stream's cpu, count), and one line for the trace (env, clock).
"""

import json
import sys

import bt2


def value(v):
    if isinstance(v, bt2._StringFieldConst):
        return str(v)
    if isinstance(v, bt2._EnumerationFieldConst):  # its labels, as babeltrace2 prints them
        return "|".join(sorted(v.labels)) if v.labels else int(v)
    if isinstance(v, bt2._IntegerFieldConst):
        return int(v)
    if isinstance(v, bt2._StructureFieldConst):
        return {k: value(f) for k, f in v.items()}
    raise TypeError(type(v))


def main(path):
    seen_trace = False
    for msg in bt2.TraceCollectionMessageIterator(path):
        if isinstance(msg, bt2._StreamBeginningMessageConst) and not seen_trace:
            seen_trace = True
            trace = msg.stream.trace
            clock = msg.stream.cls.default_clock_class
            env = {k: str(v) if isinstance(v, bt2._StringValueConst) else int(v) for k, v in trace.environment.items()}
            print(json.dumps({"trace": env,
                              "clock": {"name": clock.name, "frequency": clock.frequency}}))
        elif isinstance(msg, bt2._EventMessageConst):
            ev = msg.event
            row = {"name": ev.name, "id": ev.cls.id, "ts": msg.default_clock_snapshot.value,
                   "cpu": int(ev.packet.context_field["cpu_id"]), "fields": value(ev.payload_field)}
            context = ev.common_context_field  # the stream's event context: a tid when the trace has tasks
            if context is not None and "tid" in context:
                row["tid"] = int(context["tid"])
            print(json.dumps(row))
        elif isinstance(msg, bt2._DiscardedEventsMessageConst):
            print(json.dumps({"discarded": msg.count, "cpu": int(msg.stream.name.rsplit("_", 1)[1])
                              if msg.stream.name else None}))


if __name__ == "__main__":
    main(sys.argv[1])
