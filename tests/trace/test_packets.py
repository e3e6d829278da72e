"""Decoding the runtime's packets: each integer argument is what C makes of its register converted to the
declared type (gcc's own conversion in a native program is the truth), whether a packet holds one probe's
events only (read at once) or several probes' (read one by one)."""

from __future__ import annotations

import pytest
from helpers import need_tool, run

from sdtgen.event_format import event_format
from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.trace.packets import Decoder, PacketError

# _Bool is left out: C makes any non-zero value 1, the ABI passes 0 or 1 in the low byte, which is what is read.
TYPES = ("char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned int", "long",
         "unsigned long", "long long", "unsigned long long", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t",
         "uint32_t", "int64_t", "uint64_t", "size_t", "ssize_t", "intptr_t", "uintptr_t", "const void *",
         "struct kobj *")
WORDS = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x100000000,
         0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFF80, 0xFFFFFFFFFFFFFFFF, 0x123456789ABCDEF0)
PROGRAM = """#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
struct kobj;
#define INT(T) if ((T)-1 < (T)0) printf("%lld\\n", (long long)(T)w); else printf("%llu\\n", (unsigned long long)(T)w);
#define PTR(T) printf("%llu\\n", (unsigned long long)(uintptr_t)(T)(uintptr_t)w);
int main(void)
{
	static const unsigned long long words[] = { WORDS };
	for (unsigned i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		unsigned long long w = words[i];
		SHOW
	}
	return 0;
}
"""


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> dict[str, list[int]]:
    """Each type's value of each word, as gcc converts it on this machine (x86-64)."""
    gcc = need_tool("gcc", "gcc")
    d = tmp_path_factory.mktemp("conv")
    show = "\n".join(("PTR" if "*" in t else "INT") + f"({t})" for t in TYPES)
    (d / "conv.c").write_text(PROGRAM.replace("WORDS", ", ".join(f"{w:#x}ull" for w in WORDS)).replace("SHOW", show))
    run([gcc, "-O1", "-o", str(d / "conv"), str(d / "conv.c")])
    values = [int(v) for v in run([str(d / "conv")]).stdout.split()]
    return {t: values[k::len(TYPES)] for k, t in enumerate(TYPES)}


def decoder() -> Decoder:
    return Decoder([event_format(key, f"t:t:t:{key}", (t,), 64) for key, t in enumerate(TYPES, 1)], 64)


def packet(events: list[tuple[int, int, int]], cpu: int = 3, seq: int = 7) -> bytes:
    """A packet as the runtime writes it: (timestamp, key, word) events of one-argument probes."""
    event = EVENT.struct(64, True)
    body = b"".join(event.pack(ts, key, event.size + 8, 0) + word.to_bytes(8, "little") for ts, key, word in events)
    head = PACKET.struct(64, True)
    size = head.size + len(body) + 64  # room left after the content, as in a packet not yet full
    begin, end = min((ts for ts, _, _ in events), default=100), max((ts for ts, _, _ in events), default=200)
    return head.pack(VALUES["SDT_PACKET_MAGIC"], 0, begin, end, (head.size + len(body)) * 8, size * 8, seq, 0, cpu,
                     len(events)) + body + bytes(64)


def test_a_packet_of_one_probe_reads_as_c_converts_each_word(native):
    d = decoder()
    for key, t in enumerate(TYPES, 1):
        p, events = d.events(packet([(1000 + i, key, w) for i, w in enumerate(WORDS)]))
        assert p.events == len(WORDS)
        assert [e.args for e in events] == [(v,) for v in native[t]], t
        assert [(e.ts, e.cpu, e.probe) for e in events] == [(1000 + i, 3, f"t:t:t:{key}") for i in range(len(WORDS))]


def test_a_packet_of_several_probes_reads_the_same(native):
    mixed = [(len(TYPES) * i + key, key, w) for i, w in enumerate(WORDS) for key in range(1, len(TYPES) + 1)]
    _, events = decoder().events(packet(mixed))
    assert [e.args[0] for e in events] == [native[TYPES[key - 1]][i] for i in range(len(WORDS))
                                           for key in range(1, len(TYPES) + 1)]
    assert [e.ts for e in events] == [ts for ts, _, _ in mixed]


def test_an_event_of_another_size_among_one_probes_is_refused_where_it_is():
    data = bytearray(packet([(1, 1, 5)] * 4))
    header, event = PACKET.struct(64, True).size, EVENT.struct(64, True)
    at = header + 2 * (event.size + 8)
    event.pack_into(data, at, 1, 1, 200, 0)  # the third event says it runs past the content
    with pytest.raises(PacketError, match=f"event at byte {at} has size 200"):
        decoder().events(bytes(data))


def test_counts_say_how_many_events_of_each_probe_a_packet_holds_and_the_last():
    d = decoder()
    one = packet([(i, 4, i) for i in range(50)])
    assert d.counts(one)[1:] == ({"t:t:t:4": 50}, "t:t:t:4")
    mixed = [(i, key, i) for i in range(6) for key in (1, 2, 2)] + [(9, 7, 0)]
    p, counts, last = d.counts(packet(mixed))
    assert (p.events, counts, last) == (19, {"t:t:t:1": 6, "t:t:t:2": 12, "t:t:t:7": 1}, "t:t:t:7")
    assert d.counts(packet([]))[1:] == ({}, None)


def test_a_packet_whose_content_exceeds_its_packet_size_is_refused():
    data = bytearray(packet([(1, 1, 5)]))
    head = PACKET.struct(64, True)
    size_at = PACKET.offset("packet_size", 64)
    content = head.unpack_from(data)[PACKET.names().index("content_size")]
    for size in (content - 64, 0):  # a packet a word short of its content, and one of no size at all
        data[size_at:size_at + 8] = size.to_bytes(8, "little")
        with pytest.raises(PacketError, match="its sizes"):
            decoder().events(bytes(data))


def test_an_open_packets_events_are_framed_up_to_the_first_that_is_not_one():
    """event_ends (the post-mortem's framing of a packet no header closed): each event's end, stopping at an id no
    probe has, at a size below the event's fields or past its padding, or at one that runs past the bytes given."""
    head, step = PACKET.size(64), EVENT.size(64) + 8
    whole = packet([(10 + i, 1 + i % 3, i) for i in range(5)])  # keys from 1: key 0 is the task event's
    d = decoder()
    assert d.event_ends(whole, head + 5 * step) == [head + (k + 1) * step for k in range(5)]
    assert d.event_ends(whole, head + 5 * step - 1) == [head + (k + 1) * step for k in range(4)]  # the last cut short
    for field, value, width in (("id", len(TYPES) + 7, 4),  # event 2: an id of no probe,
                                ("size", EVENT.size(64), 2),  # a size below its fields,
                                ("size", step + 8, 2)):  # or past their padding
        bad = bytearray(whole)
        at = head + 2 * step + EVENT.offset(field, 64)
        bad[at:at + width] = value.to_bytes(width, "little")
        assert d.event_ends(bytes(bad), head + 5 * step) == [head + step, head + 2 * step], (field, value)


def test_an_open_packet_that_starts_with_its_task_event_is_framed_past_it():
    """A kernel with the task hook starts every packet with a task event (key SDT_TASK_KEY, two words and a name):
    the post-mortem's framing steps over it to the firings after it."""
    head, step = PACKET.size(64), EVENT.size(64) + 8
    name = b"kworker\0"
    task_size = EVENT.size(64) + 16 + len(name)
    task = (EVENT.struct(64).pack(9, VALUES["SDT_TASK_KEY"], task_size, 0) + (42).to_bytes(8, "little")
            + (2).to_bytes(8, "little") + name)
    whole = packet([(10 + i, 1 + i % 3, i) for i in range(2)])
    data = whole[:head] + task + b"\0" * (-len(task) % 8) + whole[head:]
    first = head + ((task_size + 7) & ~7)
    assert decoder().event_ends(data, first + 2 * step) == [head + task_size, first + step, first + 2 * step]
