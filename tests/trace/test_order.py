"""sdtgen/trace/order.py: several CPUs' events in one time order, as far as every CPU has been read."""

from __future__ import annotations

import random
from dataclasses import dataclass

from sdtgen.trace.order import TimeOrder


@dataclass(frozen=True)
class E:
    ts: int
    cpu: int


def stream(cpu: int, times: list[int]) -> list[E]:
    return [E(t, cpu) for t in sorted(times)]


def test_an_event_waits_until_every_cpu_seen_has_been_read_past_it():
    order = TimeOrder(1000)
    assert order.add(0, stream(0, [1, 5, 9]), read_to=10) == [E(1, 0), E(5, 0), E(9, 0)]  # the only CPU so far
    assert order.add(1, stream(1, [3, 12]), read_to=4) == [E(3, 1)]  # CPU 1 read only to 4: 12 waits
    assert order.add(0, stream(0, [11, 13]), read_to=14) == []  # nothing past CPU 1's 4 can go
    assert order.add(1, [], read_to=20) == [E(11, 0), E(12, 1), E(13, 0)]
    assert order.rest() == [] and order.held == 0


def test_equal_times_go_by_cpu_and_the_rest_comes_out_whole_in_order():
    order = TimeOrder(1000)
    order.add(2, stream(2, [7, 8]), read_to=0)
    order.add(0, stream(0, [7]), read_to=0)
    order.add(1, stream(1, [6, 7]), read_to=0)
    assert order.rest() == [E(6, 1), E(7, 0), E(7, 1), E(7, 2), E(8, 2)]


def test_whatever_the_arrival_every_event_comes_out_once_in_time_order():
    rng = random.Random(7)
    for _ in range(200):
        cpus = rng.randrange(1, 5)
        events = {c: stream(c, rng.sample(range(1000), rng.randrange(0, 40))) for c in range(cpus)}
        order, out, at = TimeOrder(1 << 20), [], {c: 0 for c in range(cpus)}
        order.expect(range(cpus))
        while any(at[c] < len(events[c]) for c in range(cpus)):
            c = rng.choice([c for c in range(cpus) if at[c] < len(events[c])])
            n = rng.randrange(1, 6)
            part = events[c][at[c]:at[c] + n]
            at[c] += len(part)
            more = events[c][at[c]:]
            out += order.add(c, part, read_to=more[0].ts - 1 if more else 1000)  # read up to its next event
        out += order.rest()
        assert out == sorted((e for es in events.values() for e in es), key=lambda e: (e.ts, e.cpu))


def test_past_its_limit_an_idle_cpu_holds_the_others_back_no_more():
    order = TimeOrder(100)
    order.add(1, [], read_to=0)  # a CPU that was read once and then records nothing
    out = []
    for k in range(50):
        out += order.add(0, stream(0, [10 * k + i for i in range(10)]), read_to=10 * k + 9)
        assert order.held <= 100 + 10  # at most the limit and one packet's events wait
    assert len(out) + order.held == 500 and out == sorted(out, key=lambda e: e.ts)
    assert len(out) >= 400  # given out while the idle CPU said nothing


def test_within_its_limit_an_idle_cpu_holds_every_later_event_back():
    order = TimeOrder(1000)
    order.add(1, [], read_to=0)
    assert sum(len(order.add(0, stream(0, [10 * k + 1]), read_to=10 * k + 9)) for k in range(50)) == 0
    assert len(order.rest()) == 50


def test_a_cpu_expected_but_not_read_yet_holds_the_others_back():
    order = TimeOrder(1000)
    order.expect([0, 1])
    assert order.add(0, stream(0, [5, 9]), read_to=10) == []  # CPU 1 may still send something earlier
    assert order.add(1, stream(1, [3]), read_to=10) == [E(3, 1), E(5, 0), E(9, 0)]
