"""The loader: segments at their link addresses, bss zeroed, calls per the ABI, faults reported."""

from __future__ import annotations

import pytest

from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.elf.reader import PT_LOAD
from sdtgen.image import Image


@pytest.fixture
def machine(kernel):
    with Image(str(kernel.image)) as image:
        yield Machine(image.elf, image.arch), image


def test_segments_are_mapped_at_their_link_addresses(machine):
    m, image = machine
    for seg in image.elf.segments:
        if seg.type == PT_LOAD:
            assert seg.vaddr >= 0xFFFFFFFF80000000
            assert m.read(seg.vaddr, seg.filesz) == bytes(image.elf.data[seg.offset:seg.offset + seg.filesz])


def test_bss_is_zero_filled(machine):
    m, image = machine
    lo, hi = image.symbols["__bss_start"].value, image.symbols["__bss_end"].value
    assert hi > lo  # the fixture has kobjs[] there
    assert m.read(lo, hi - lo) == bytes(hi - lo)


def test_call_returns_the_value_per_the_abi(machine):
    m, image = machine
    assert m.call(image.symbols["sched_run"].value, [4]) == 1 + 2 + 5 + 10
    assert m.call(image.symbols["sched_switch"].value, [1, 2, 3, 4, 5, 6]) == 1000 + 200 + 30 + 4 + 5 + 6


def test_a_null_dereference_is_a_fault_with_its_address(machine):
    m, image = machine
    with pytest.raises(GuestFault) as info:
        m.call(image.symbols["vfs_lookup"].value, [0])
    assert "read from unmapped address 0x0" in info.value.what
    assert image.symbolize(info.value.pc).startswith("vfs_lookup+0x")
    assert m.call(image.symbols["sched_run"].value, [3]) == 8  # the machine still works after a fault


def test_code_writes_are_seen_after_invalidation(machine):
    """The brief's Unicorn trap: without dropping translations, old code keeps running."""
    m, image = machine
    func = image.symbols["sched_run"].value
    assert m.call(func, [3]) == 8
    m.write_code(func, bytes.fromhex("b82a000000c3"))  # mov eax, 42; ret
    assert m.call(func, [3]) == 42
