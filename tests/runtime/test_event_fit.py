"""The writer's fit checks, for any caller of the public sdt_event_begin (tests/runtime/event_fit.c, built with
sdt_transport.c for this machine): events of sizes that are not multiples of 8 start at the next multiple of 8
and end where they end, an event that fills a packet to its last byte is kept in it, the next one opens the
next packet, and each packet's content ends at its last event's last byte. A packet still open is not the
consumer's: sdt_consume_done refuses it. The placement is this test's own
model of the format (docs/runtime.md, Transport), not the runtime's."""

from __future__ import annotations

import subprocess

import pytest
from helpers import need_tool, run
from runtime_support import HERE, include_dir, runtime_dir

from sdtgen.layout import EVENT, PACKET, VALUES

SIZE = 1024  # event_fit.c's packets
HEAD = PACKET.size(64)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit") / "event_fit"
    rt = runtime_dir()
    run([need_tool("gcc", "gcc"), "-O2", "-Wall", "-Wextra", "-Werror", "-ffreestanding", f"-I{include_dir()}",
         f"-I{rt}", "-o", str(out), str(HERE / "event_fit.c"), str(rt / "sdt_transport.c")])
    return out


def placed(sizes: list[int]) -> tuple[list[list[tuple[int, int, int]]], int]:
    """Each packet's (event number, offset, size), and the events discarded: an event goes at the next multiple
    of 8 of the packet when it fits by its last byte, else it opens the next packet (or, bigger than any packet
    can hold, is discarded)."""
    packets: list[list[tuple[int, int, int]]] = []
    end, lost = SIZE + 1, 0
    for i, size in enumerate(sizes, 1):
        if size > SIZE - HEAD:
            lost += 1
            continue
        at = (end + 7) // 8 * 8
        if at + size > SIZE:
            packets.append([])
            at = HEAD
        packets[-1].append((i, at, size))
        end = at + size
    return packets, lost


def written(program, sizes: list[int]) -> tuple[list[tuple[int, list[tuple[int, int, int]]]], int, int]:
    """(content size, events as (number, offset, size)) of each packet the program wrote, its discarded count,
    and what sdt_consume_done said of the packet still open once every closed one was consumed."""
    proc = subprocess.run([str(program), *map(str, sizes)], capture_output=True, check=True, timeout=60)
    data = proc.stdout
    head, ev = PACKET.struct(64), EVENT.struct(64)
    out = []
    for base in range(0, len(data), SIZE):
        fields = dict(zip(PACKET.names(), head.unpack_from(data, base), strict=True))
        events, at = [], HEAD
        while at < fields["content_size"] // 8:
            e = dict(zip(EVENT.names(), ev.unpack_from(data, base + at), strict=True))
            body = data[base + at + ev.size:base + at + e["size"]]
            assert body == bytes([e["id"] & 0xFF]) * len(body)  # its own bytes, whole
            events.append((e["id"], at, e["size"]))
            at = (at + e["size"] + 7) // 8 * 8
        assert len(events) == fields["events"]
        out.append((fields["content_size"] // 8, events))
    discarded, open_done = map(int, proc.stderr.split())
    assert open_done in (1, VALUES["SDT_ERR_ARG"])
    return out, discarded, open_done


CASES = {
    "twenty": [20] * 100,  # 4 bytes short of a multiple of 8: 40 a packet, the last ending at 1020
    "exact": [24] * 39 + [24, 20],  # the 40th ends at 1024 exactly: kept; the next opens a packet
    "odd sizes": [17, 23, 31, 33, 49, 127, 255, 16, 511, 959, 21] * 6,
    "whole packet": [960, 960, 20, 960],  # a packet's whole room, alone
    "too big": [20, 961, 20, 4000, 20],  # more than any packet holds: discarded, the rest goes on
    # 100 bytes after 860 would end at 1,024 from where 860 ends (924), but an event starts at the next multiple
    # of 8 (928) and would end at 1,028: it opens the next packet
    "aligned fit": [960, 860, 100],
}


@pytest.mark.parametrize("case", CASES)
def test_events_of_any_size_are_placed_and_ended_where_they_end(program, case):
    sizes = CASES[case]
    want, lost = placed(sizes)
    got, discarded, open_done = written(program, sizes)
    assert [events for _, events in got] == want
    assert [content for content, _ in got] == [events[-1][1] + events[-1][2] for events in want]
    assert discarded == lost
    # the last packet was open when the consumer had read the others: sdt_consume_done refused it (documented:
    # SDT_ERR_ARG, seq not a packet closed), and it was read whole once flushed (the packets above)
    assert open_done == VALUES["SDT_ERR_ARG"]
    if case == "exact":
        assert want[0][-1][1] + want[0][-1][2] == SIZE and len(want) == 2
