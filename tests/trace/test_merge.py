"""Per-CPU streams merge into one by timestamp; ties go to the lower CPU, then keep stream order."""

from __future__ import annotations

import random

from sdtgen.trace import TraceEvent
from sdtgen.trace.merge import merge_cpus


def test_merge_orders_by_time_then_cpu_then_position():
    rng = random.Random(12)
    streams = {}
    for cpu in (2, 0, 1):
        ts = sorted(rng.randrange(50) for _ in range(40))
        streams[cpu] = [TraceEvent(seq, cpu, t, (seq,)) for seq, t in enumerate(ts)]
    merged = merge_cpus(streams)
    assert len(merged) == 120
    # The truth: every (ts, cpu, seq) triple, sorted; seq is the event's position in its stream.
    assert [(e.ts, e.cpu, e.probe_id) for e in merged] == sorted((e.ts, e.cpu, e.probe_id)
                                                                for s in streams.values() for e in s)
    for cpu, events in streams.items():
        assert [e for e in merged if e.cpu == cpu] == events


def test_equal_events_keep_their_stream_order():
    a, b = TraceEvent(1, 0, 5, ("first",)), TraceEvent(1, 0, 5, ("second",))
    assert merge_cpus({1: [TraceEvent(1, 1, 5, ())], 0: [a, b]}) == [a, b, TraceEvent(1, 1, 5, ())]


def test_nothing_to_merge():
    assert merge_cpus({}) == [] and merge_cpus({0: [], 3: []}) == []
