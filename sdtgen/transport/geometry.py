"""A ring's packets: how large the host makes them for the buffer a user asks for.

The kernel's runtime takes any power of two from SDT_MIN_PACKET (sdt_ring_init checks it); the host picks
eight packets a ring, so that a consumer always has closed packets to read while the writer fills one.
"""

from __future__ import annotations

from sdtgen.layout import VALUES

MIN_PACKET = VALUES["SDT_MIN_PACKET"]  # a full 6-string event fits
LARGEST_CHOSEN = 1 << 16  # a bigger buffer gets more packets, not bigger ones: a packet's latency stays short


def packet_size_for(buffer_size: int) -> int:
    """Packets of a ring: 8 a ring, from 1 KiB (a full 6-string event fits) to 64 KiB."""
    return max(MIN_PACKET, min(LARGEST_CHOSEN, buffer_size // 8))
