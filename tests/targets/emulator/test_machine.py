"""The loader: segments at their link addresses, bss zeroed, calls per the ABI, faults reported."""

from __future__ import annotations

import pytest

from sdtgen.elf.reader import PT_LOAD
from sdtgen.image import Image
from sdtgen.targets.emulator.machine import GuestFault, Machine


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
    m.write(func, bytes.fromhex("b82a000000c3"))  # mov eax, 42; ret
    assert m.call(func, [3]) == 8  # the old translation still runs
    m.invalidate(func, func + 6)
    assert m.call(func, [3]) == 42


def test_only_tlb_misses_and_traps_reach_python(kernel, monkeypatch):
    """A disarmed probe must cost a NOP: no per-instruction or per-block hook is ever installed."""
    import unicorn

    kinds = []
    real = unicorn.Uc.hook_add

    def recording(self, htype, *args, **kw):
        kinds.append(htype)
        return real(self, htype, *args, **kw)

    monkeypatch.setattr(unicorn.Uc, "hook_add", recording)
    from booted import Booted
    from native_oracle import Call

    b = Booted(kernel.image)
    try:
        traps = []
        inner = b.session.target.machine.trap
        b.session.target.machine.trap = lambda addr: (traps.append(addr), inner(addr))
        b.run([Call("kmain", (1,)), Call("sched_run", (50,))])
        assert traps == []  # 21 patched sites ran, none reached Python
    finally:
        b.session.close()
    assert sorted(kinds) == sorted([unicorn.UC_HOOK_TLB_FILL, unicorn.UC_HOOK_INTR])


def test_a_cpus_register_and_memory_calls_keep_the_gil_so_no_other_thread_runs_during_them(machine):
    """A trap handler makes some twenty short Unicorn calls a firing. Each that let the GIL go would hand it
    to another CPU's thread and wait to get it back; so these calls keep it. With forced switches off,
    another thread runs during a long memory read only if the read released the GIL."""
    import sys
    import threading
    import time

    m, image = machine
    seg = max((s for s in image.elf.segments if s.type == PT_LOAD), key=lambda s: s.memsz)
    counter, stop = [0], threading.Event()

    def other_thread() -> None:
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)  # lets the GIL go: the reader takes it back only when its call let it go

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    worker = threading.Thread(target=other_thread)
    worker.start()
    try:
        while counter[0] < 100:
            time.sleep(0.001)
        moved = 0
        for _ in range(20):
            before = counter[0]
            for _ in range(50):
                m.read(seg.vaddr, seg.memsz)
                m.uc.reg_read(m.model.regs.sp)
            moved += counter[0] - before
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        worker.join()
    assert moved == 0
