"""Packets off the serial line (sdtgen.transport.packet_sink): each held until its own verdict, then handed on
or dropped; whatever CPU numbers, sizes and frames the line claims, memory holds one frame and no traceback comes."""

from __future__ import annotations

import tracemalloc

from serial_line import P, Packet, V, encode, event, verdict

from sdtgen.transport.frames import Frame, FrameReader
from sdtgen.transport.packet_sink import PacketSink


def sink() -> tuple[PacketSink, list[tuple[int, bytes]]]:
    got: list[tuple[int, bytes]] = []
    return PacketSink([lambda cpu, data: got.append((cpu, data))]), got


def take(s: PacketSink, data: bytes) -> None:
    reader = FrameReader()
    for item in reader.feed(data):
        assert isinstance(item, Frame) and s.frame(item)
    s.close()


def test_a_packet_with_its_keep_verdict_is_handed_on_as_it_came():
    s, got = sink()
    pk = Packet(cpu=2, seq=7, events=[event(10, 0x1234, (5,))], begin=10, end=10)
    take(s, pk.sent())
    assert got == [(2, pk.content())] and (s.kept, s.dropped, s.stray, s.damaged) == (1, 0, 0, 0)


def test_a_drop_verdict_drops_the_packet():
    s, got = sink()
    take(s, Packet(cpu=1, seq=3).sent(keep=False))
    assert got == [] and (s.kept, s.dropped) == (0, 1)


def test_a_verdict_for_another_packet_number_is_not_applied_to_the_pending_packet():
    """Torn while sent: the header the line carried is not the packet the runtime released."""
    s, got = sink()
    take(s, encode(P, Packet(cpu=1, seq=3).content()) + verdict(4, 1))
    assert got == [] and (s.kept, s.dropped) == (0, 1)


def test_a_verdict_of_another_cpu_or_none_at_all_is_stray():
    s, got = sink()
    take(s, encode(P, Packet(cpu=1, seq=3).content()) + verdict(3, 2) + encode(P, Packet(cpu=0, seq=1).content()))
    assert got == [] and s.kept == 0 and s.stray == 3  # the other CPU's verdict, and both packets without theirs


def test_frames_of_a_wrong_size_are_damaged_not_tracebacks():
    s, got = sink()
    pk = Packet(cpu=1, seq=1)
    take(s, encode(P, pk.content()) + encode(V, b"\1" * 15) + encode(V, b"\1" * 17) + verdict(1, 1)  # its own came
         + encode(P, b"short") + verdict(1, 1))  # a packet cut short, and its verdict
    assert got == [(1, pk.content())]
    assert (s.kept, s.damaged, s.stray) == (1, 3, 0)


def test_memory_holds_one_frame_whatever_cpus_and_sizes_the_line_claims():
    """Twelve 64-byte packets of invented CPUs, each claiming a 128 MiB packet: nothing is padded out, and one
    packet at most waits for its verdict."""
    s, got = sink()
    data = b"".join(encode(P, Packet(cpu=1000 * n, seq=1, size=128 << 20).content()) for n in range(12))
    warm, _ = sink()  # what the first packet ever read imports or caches is not this packet's memory
    take(warm, encode(P, Packet(cpu=1, seq=1, size=128 << 20).content()) + Packet(cpu=1, seq=1, size=128 << 20).sent())
    tracemalloc.start()
    try:
        take(s, data + Packet(cpu=5, seq=1, size=128 << 20).sent())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) * 8, peak
    assert [(cpu, len(d)) for cpu, d in got] == [(5, 64)] and s.stray == 12


def test_a_packet_of_a_cpu_numbered_past_256_is_matched_to_its_verdict_by_value():
    """A kernel of many CPUs: the packet's cpu_id and its verdict's are two u32 read apart, equal in value only."""
    s, got = sink()
    pk = Packet(cpu=4095, seq=1 << 40, events=[event(10, 0x1234, (5,))], begin=10, end=10)
    take(s, pk.sent())
    assert got == [(4095, pk.content())] and (s.kept, s.dropped, s.stray) == (1, 0, 0)
