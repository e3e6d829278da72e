"""Perfetto: the file parses with Perfetto's own protos as the track-event format the UI opens, one
track per CPU, an instant event per event with its arguments as debug annotations."""

from __future__ import annotations

import pytest
from conftest import HZ, LOST, POINTERS, Recorded, expected

from sdtgen.errors import SdtError
from sdtgen.trace import TraceMeta, write_trace

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def parse(path) -> list:
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return list(trace.packet)


@pytest.fixture(scope="module")
def packets(recorded, tmp_path_factory) -> list:
    path = tmp_path_factory.mktemp("perfetto") / "trace.pftrace"
    write_trace(path, "perfetto", recorded.meta, recorded.events)
    return parse(path)


def tracks(packets) -> dict[int, pb.TrackDescriptor]:
    return {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}


def annotation(a):
    which = a.WhichOneof("value")
    return which, getattr(a, which)


def test_one_named_track_per_cpu_before_any_event(packets, recorded):
    named = {t.name: uuid for uuid, t in tracks(packets).items() if not t.HasField("counter")}
    assert sorted(named) == [f"CPU {c}" for c in range(recorded.meta.cpus)]
    first_event = next(i for i, p in enumerate(packets) if p.HasField("track_event"))
    assert all(i < first_event for i, p in enumerate(packets) if p.HasField("track_descriptor"))
    assert {p.trusted_packet_sequence_id for p in packets} != {0} and len({p.trusted_packet_sequence_id
                                                                           for p in packets}) == 1


def test_every_event_with_its_time_track_name_and_typed_arguments(packets, recorded: Recorded):
    cpu_of = {uuid: int(t.name.split()[1]) for uuid, t in tracks(packets).items() if not t.HasField("counter")}
    got = [(p.timestamp, cpu_of[p.track_event.track_uuid], p.track_event.name, list(p.track_event.categories),
            [(a.name, *annotation(a)) for a in p.track_event.debug_annotations])
           for p in packets if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_INSTANT]
    want = []
    for e in recorded.events:
        p = recorded.probe(e)
        args = [(f"arg{i}", "string_value" if isinstance(v, str) else "pointer_value" if t in POINTERS
                 else "int_value" if v < 0 or t in ("int", "long", "int64_t") else "uint_value", v)
                for i, (t, v) in enumerate(zip(p.arg_types, expected(p, e.args), strict=True))]
        # ns of the guest clock: ticks * 10**9 // HZ, in the trace's default (boot-time) clock
        want.append((e.ts * 1_000_000_000 // HZ, e.cpu, p.spec, [p.provider], args))
    assert got == want


def test_each_cpus_lost_count_is_a_counter_under_its_track(packets, recorded):
    t = tracks(packets)
    counters = {uuid: d for uuid, d in t.items() if d.HasField("counter")}
    values = {p.track_event.track_uuid: p.track_event.counter_value for p in packets
              if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_COUNTER}
    got = {int(t[d.parent_uuid].name.split()[1]): values[uuid] for uuid, d in counters.items()}
    assert got == LOST
    assert all(d.name.endswith("lost events") for d in counters.values())


def test_no_events_is_a_trace_of_empty_tracks(tmp_path, recorded):
    write_trace(tmp_path / "t.pftrace", "perfetto", TraceMeta("riscv64", "time", 10_000_000, 3, (), {}), [])
    packets = parse(tmp_path / "t.pftrace")
    assert sorted(d.name for d in tracks(packets).values()) == ["CPU 0", "CPU 1", "CPU 2"]
    assert not any(p.HasField("track_event") for p in packets)


def test_a_path_it_cannot_write_is_one_line(tmp_path, recorded):
    with pytest.raises(SdtError) as e:
        write_trace(tmp_path / "no" / "t.pftrace", "perfetto", recorded.meta, recorded.events)
    assert "\n" not in str(e.value) and "does not exist" in str(e.value)
