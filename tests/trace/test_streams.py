"""The per-CPU stream reader (sdtgen.trace.streams): the bounds it holds a kernel's packets and clock to, at their
edges, and a packet out of bounds left out with one line, never a traceback. Packets are packed here with Python's
struct from struct sdt_packet as sdt_runtime.h declares it; the clock's bound is held to what babeltrace2 reads."""

from __future__ import annotations

import struct

import pytest
from helpers import need_tool, run

from sdtgen.event_format import event_format
from sdtgen.trace.ctf import empty_packet, metadata
from sdtgen.trace.model import TraceMeta
from sdtgen.trace.packets import Decoder
from sdtgen.trace.streams import Streams, clock_problem

# struct sdt_packet (sdt_runtime.h), little-endian: magic, stream_id, timestamp_begin, timestamp_end, content_size
# and packet_size (bits), packet_seq_num, events_discarded, cpu_id, events.
HEAD = struct.Struct("<IIQQQQQQII")
MAGIC = 0xC1FC1FC1
MIN_PACKET = 0x400  # SDT_MIN_PACKET
GHZ = 1_000_000_000
ONCE = " (further damage to CPU 0's packets is only counted)"  # said once a CPU


def packet(seq: int, size: int = MIN_PACKET, discarded: int = 0, cpu: int = 0) -> bytes:
    """An empty packet's content: its header alone."""
    return HEAD.pack(MAGIC, 0, 100 * seq, 100 * seq + 50, HEAD.size * 8, size * 8, seq, discarded, cpu, 0)


def streams(said: list[str], **kw) -> Streams:
    return Streams(Decoder([event_format(1, "t:t:t:e", ("long",), 64)], 64), GHZ, 1, on_damage=said.append, **kw)


@pytest.mark.parametrize("hz", [1, GHZ, (1 << 63) - 1])
def test_a_clock_from_1_hz_to_2_63_minus_1_hz_is_one_a_trace_can_declare(hz):
    """babeltrace2 reads a clock's frequency as an int64 (2^64 - 1 it refuses): 2^63 - 1 Hz is the most."""
    assert clock_problem(hz) is None


@pytest.mark.parametrize("hz", [0, 1 << 63, (1 << 64) - 1])
def test_a_clock_of_0_hz_or_past_2_63_minus_1_hz_is_said(hz):
    assert clock_problem(hz) == f"a clock of {hz} Hz (the rate must be from 1 to {(1 << 63) - 1})"
    with pytest.raises(ValueError, match=f"a clock of {hz} Hz"):
        Streams(Decoder([], 64), hz, 1)


@pytest.mark.parametrize("hz", [(1 << 63) - 1, (1 << 64) - 1])
def test_a_clock_is_taken_when_babeltrace2_reads_a_trace_of_it(tmp_path, hz):
    """The edges against the reference reader: a trace whose clock runs at 2^63 - 1 Hz it reads, one at 2^64 - 1 Hz
    it refuses (the metadata written for the first, its frequency changed for the second)."""
    top = (1 << 63) - 1
    (tmp_path / "metadata").write_text(metadata(TraceMeta("x86_64", "tsc", top, 1, ()), 64)
                                       .replace(f"freq = {top};", f"freq = {hz};"))
    (tmp_path / "stream_0").write_bytes(empty_packet(0, 5, 0, 0, 64, True) + empty_packet(0, 7, 1, 0, 64, True))
    reads = run([need_tool("babeltrace2", "babeltrace2"), str(tmp_path)], check=False).returncode == 0
    assert reads == (hz == top) and (clock_problem(hz) is None) == reads


@pytest.mark.parametrize(("max_packet", "bound"), [(None, "from 1024"), (1 << 16, "from 1024 to 65536")])
@pytest.mark.parametrize("size", [1536, 512, 1 << 17])
def test_a_first_packet_of_a_size_no_ring_has_is_left_out_with_its_size_said(max_packet, bound, size):
    """No ring said the size: the first packet does, a power of two from SDT_MIN_PACKET (to the host's bound)."""
    said: list[str] = []
    s = streams(said, max_packet=max_packet)
    if size == 1 << 17 and max_packet is None:
        assert s.read(0, packet(1, size)) is not None and said == []  # no bound but the power of two
        return
    assert s.read(0, packet(1, size)) is None
    assert said == [f"a damaged packet left out: packet 1 of CPU 0 has {size} bytes, not a power of two {bound}" + ONCE]
    assert s.damaged == 1 and s.read(0, packet(2)) is not None


def test_a_discarded_count_is_believed_up_to_2_62_and_no_further():
    """Each count up to 2^62, so a CPU's total stays an int64 (Perfetto's counters); past it, the packet is out."""
    said: list[str] = []
    s = streams(said)
    assert s.read(0, packet(1, discarded=1 << 62), events=False) is not None and said == []
    assert s.read(0, packet(2, discarded=(1 << 62) + 1), events=False) is None
    assert said == [f"a damaged packet left out: packet 2 of CPU 0 says {(1 << 62) + 1} events were discarded, "
                    f"after {1 << 62} before it" + ONCE]
