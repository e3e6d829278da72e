"""What the kernel says of its rings for the shared transport (`shared on`'s `area K AREA RING` lines, and the
counters in each struct sdt_cpu) is believed only as it checks: a misaligned struct sdt_cpu, two CPUs that name the
same ring, a struct sdt_cpu inside a ring, counters 2^63 apart are each refused, naming the CPU. The RAM is a file
mapped as QEMU's is (sdtgen/transport/shared_ram.py), the kernel's words forged in it and on the lines."""

from __future__ import annotations

import pytest

from sdtgen.layout import CPU
from sdtgen.targets.qemu import shared_rings
from sdtgen.transport.consumer import Consumer, Ring
from sdtgen.transport.shared_ram import SharedRam

BASE = 0x8000_0000
BUFFER, PACKET = 8 << 10, 1 << 10
AREA = CPU.size(64)


@pytest.fixture
def ram(tmp_path):
    r = SharedRam(str(tmp_path / "ram"), 1 << 20, BASE)
    yield r
    r.close()


def lines(*cpus: tuple[int, int]) -> list[str]:
    return [f"area {k:x} {area:x} {ring:x}" for k, (area, ring) in enumerate(cpus)]


def test_areas_and_rings_apart_and_aligned_are_taken(ram):
    rings = shared_rings(ram, lines((BASE, BASE + 0x1000), (BASE + 0x100, BASE + 0x1000 + BUFFER)), 2, 64, BUFFER,
                         PACKET)
    assert rings == [Ring(BASE, BASE + 0x1000, 8, PACKET), Ring(BASE + 0x100, BASE + 0x1000 + BUFFER, 8, PACKET)]


@pytest.mark.parametrize(("cpus", "said"), [
    (((BASE, BASE + 0x1000), (BASE + 0x104, BASE + 0x1000 + BUFFER)),
     f"CPU 1's struct sdt_cpu at {BASE + 0x104:#x} is not 8-byte aligned"),
    (((BASE, BASE + 0x1004),), f"CPU 0's ring at {BASE + 0x1004:#x} is not 8-byte aligned"),
    (((BASE, BASE + 0x1000), (BASE + 0x100, BASE + 0x1000)),
     f"CPU 1's ring at {BASE + 0x1000:#x} is CPU 0's ring at {BASE + 0x1000:#x} too"),
    (((BASE, BASE + 0x1000), (BASE + 0x100, BASE + 0x1000 + BUFFER - PACKET)),
     f"CPU 1's ring at {BASE + 0x1000 + BUFFER - PACKET:#x} is CPU 0's ring at {BASE + 0x1000:#x} too"),
    (((BASE + 0x1000 + BUFFER - AREA, BASE + 0x1000),),
     f"CPU 0's struct sdt_cpu at {BASE + 0x1000 + BUFFER - AREA:#x} lies inside its own ring at {BASE + 0x1000:#x}"),
    (((BASE + 0x1000 - AREA + 8, BASE + 0x1000),),
     f"CPU 0's struct sdt_cpu at {BASE + 0x1000 - AREA + 8:#x} lies inside its own ring at {BASE + 0x1000:#x}"),
    (((BASE, BASE + 0x1000), (BASE, BASE + 0x1000 + BUFFER)),
     f"CPU 1's struct sdt_cpu at {BASE:#x} is CPU 0's at {BASE:#x} too"),
    (((BASE, BASE + 0x1000), (BASE + 8, BASE + 0x1000 + BUFFER)),
     f"CPU 1's struct sdt_cpu at {BASE + 8:#x} is CPU 0's at {BASE:#x} too"),
    (((BASE, BASE + 0x1000), (BASE + 0x1000 + 64, BASE + 0x1000 + BUFFER)),
     f"CPU 1's struct sdt_cpu at {BASE + 0x1000 + 64:#x} lies inside CPU 0's ring at {BASE + 0x1000:#x}"),
])
def test_rings_that_cannot_be_are_refused_naming_the_cpu(ram, cpus, said):
    with pytest.raises(ValueError) as e:
        shared_rings(ram, lines(*cpus), len(cpus), 64, BUFFER, PACKET)
    assert str(e.value) == said


class Said:
    """The streams' side of the consumer: what it is told is damaged."""

    def __init__(self) -> None:
        self.damage: list[tuple[int, str]] = []

    def damage_(self, cpu: int, what: str) -> None:
        self.damage.append((cpu, what))


@pytest.mark.parametrize("ahead", [1 << 63, (1 << 32) + 1])
def test_counters_further_apart_than_any_writer_runs_are_damage_and_nothing_is_read(ram, ahead):
    off = CPU.offsets(64)
    area, ring = BASE, BASE + 0x1000
    for field, value in (("read_seq", 5), ("commit_seq", 5 + ahead), ("write_seq", 5 + ahead)):
        ram.write(area + off[field], value.to_bytes(8, "little"))
    said = Said()
    streams = type("Streams", (), {"damage": said.damage_})()
    handed = []
    consumer = Consumer(ram, 64, [Ring(area, ring, 8, PACKET)], lambda *a: handed.append(a), streams)
    assert consumer.consume(0) == 0 and handed == [] and consumer.dropped == 0
    assert said.damage == [(0, f"the ring of CPU 0 is damaged: {5 + ahead} packets opened, {5 + ahead} closed, 5 "
                                "read; nothing more is read from it until they agree")]
    assert int.from_bytes(ram.read(area + off["read_seq"], 8), "little") == 5, "nothing claimed"


def test_a_ring_as_far_ahead_as_a_writer_runs_is_read_from_its_last_ring_of_packets(ram):
    """The bound's other side: a writer that went round its ring 1,000 times since the last read is no damage."""
    off = CPU.offsets(64)
    area, ring = BASE, BASE + 0x1000
    for field, value in (("read_seq", 0), ("commit_seq", 8000), ("write_seq", 8001)):
        ram.write(area + off[field], value.to_bytes(8, "little"))
    said = Said()
    consumer = Consumer(ram, 64, [Ring(area, ring, 8, PACKET)], lambda *a: None,
                        type("Streams", (), {"damage": said.damage_})())
    consumer.consume(0)
    assert said.damage == [] and consumer.dropped == 8  # the claims fail: read_seq is not where a ring ago was
