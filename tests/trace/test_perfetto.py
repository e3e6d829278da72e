"""Perfetto: the file parses with Perfetto's own protos as the track-event format the UI opens: one track per
CPU, an instant event per firing with its arguments as typed debug annotations, lost events as a counter."""

from __future__ import annotations

import pytest
from helpers import need_module
from tracing import CPUS, POINTERS, TYPES, boot_with_trace, expected, fired_values

# The test extra installs it (make venv): a missing one fails under CI, never skips silently.
pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")


def parse(path) -> list:
    """The packets, with interned names resolved the way trace processor does: an iid means the name its
    sequence's interned_data gave it, valid only after a packet that cleared the incremental state."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    packets, names, categories, arg_names, valid = list(trace.packet), {}, {}, {}, set()
    for p in packets:
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            valid.add(seq)
            names[seq], categories[seq], arg_names[seq] = {}, {}, {}
        for table, entries in ((names, p.interned_data.event_names), (categories, p.interned_data.event_categories),
                               (arg_names, p.interned_data.debug_annotation_names)):
            table.setdefault(seq, {}).update({e.iid: e.name for e in entries})
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        if te.name_iid or te.category_iids or any(a.name_iid for a in te.debug_annotations):
            assert seq in valid and p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if te.name_iid:
            te.name = names[seq][te.name_iid]
        te.categories.extend(categories[seq][i] for i in te.category_iids)
        for a in te.debug_annotations:
            if a.name_iid:
                a.name = arg_names[seq][a.name_iid]
    return packets


@pytest.fixture(scope="module")
def traced(trace_kernel, tmp_path_factory):
    t = boot_with_trace(trace_kernel, tmp_path_factory.mktemp("perfetto") / "t.pftrace", "perfetto")
    return t, parse(t.path)


def tracks(packets) -> dict[int, pb.TrackDescriptor]:
    return {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}


def annotation(a):
    which = a.WhichOneof("value")
    return which, getattr(a, which)


def test_one_named_track_per_cpu_before_its_events(traced):
    _, packets = traced
    named = {t.name: uuid for uuid, t in tracks(packets).items() if not t.HasField("counter")}
    assert sorted(named) == [f"CPU {c}" for c in range(CPUS)]
    first = {}
    for i, p in enumerate(packets):
        if p.HasField("track_event"):
            first.setdefault(p.track_event.track_uuid, i)
    assert all(i < first[p.track_descriptor.uuid] for i, p in enumerate(packets) if p.HasField("track_descriptor")
               and p.track_descriptor.uuid in first)
    assert len({p.trusted_packet_sequence_id for p in packets}) == 1


def test_every_firing_with_its_track_name_time_and_typed_arguments(traced):
    t, packets = traced
    cpu_of = {uuid: int(d.name.split()[1]) for uuid, d in tracks(packets).items() if not d.HasField("counter")}
    got = [(p.timestamp, cpu_of[p.track_event.track_uuid], p.track_event.name, list(p.track_event.categories),
            [(a.name, *annotation(a)) for a in p.track_event.debug_annotations])
           for p in packets if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_INSTANT]
    for cpu in range(CPUS):  # what the C passed, on every CPU, in its order and in time order
        mine = [(ts, name, cats, args) for ts, c, name, cats, args in got if c == cpu]
        assert [ts for ts, *_ in mine] == sorted(ts for ts, *_ in mine)
        want = []
        for p, v in fired_values():
            values = expected(p, v, "<unreadable>")
            args = [(f"arg{i}", "string_value" if isinstance(x, str) else "pointer_value" if ty in POINTERS
                     else "int_value" if x < 0 or ty in ("int", "long", "int64_t") else "uint_value", x)
                    for i, (ty, x) in enumerate(zip(TYPES[p], values, strict=True))]
            want.append((p, [p.split(":")[0]], args))
        assert [(name, cats, args) for _, name, cats, args in mine] == want
    assert len(got) == len(t.fires)


def test_lost_events_are_a_counter_under_their_cpu(trace_kernel, tmp_path):
    t = boot_with_trace(trace_kernel, tmp_path / "lossy.pftrace", "perfetto", "--buffer-size", "2048",
                        "--no-stream", "--run", "burst", "--arg", "200")
    packets = parse(t.path)
    counters = {uuid: d for uuid, d in tracks(packets).items() if d.HasField("counter")}
    values = {p.track_event.track_uuid: p.track_event.counter_value for p in packets
              if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_COUNTER}
    assert t.stats["lost"] > 0 and sum(values.values()) == t.stats["lost"]
    assert sorted(d.name for d in counters.values()) == [f"CPU {c} lost events" for c in range(CPUS)]
