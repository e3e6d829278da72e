"""The clock events are stamped with: its name and ticks a second, for trace files.

Measured in a scratch Unicorn engine of the architecture (the boot's own machine maps only the
image): the clock instruction run twice, 50 ms of host time apart. AArch64 says its frequency
itself (cntfrq_el0). Under Unicorn 2.1.4 every one of these clocks counts host time.
"""

from __future__ import annotations

import time

from sdtgen.arch.base import Arch

BASE = 0x10000
INTERVAL = 0.05  # seconds between the two readings


def guest_clock(arch: Arch) -> tuple[str, int]:
    """(clock name, ticks a second)."""
    from sdtgen.targets.emulator.cpus import model_of
    from sdtgen.targets.emulator.machine import new_engine

    cpu = model_of(arch)
    uc = new_engine(arch, 1 << 20)  # two instructions to translate
    uc.mem_map(BASE, 0x1000)

    def run(code: bytes) -> int:
        uc.mem_write(BASE, code)
        uc.emu_start(BASE, BASE + len(code))
        return cpu.returned(uc)

    if cpu.clock_hz:
        return arch.clock_name, run(cpu.clock_hz)
    t0, c0 = time.perf_counter_ns(), run(cpu.clock)
    time.sleep(INTERVAL)
    t1, c1 = time.perf_counter_ns(), run(cpu.clock)
    return arch.clock_name, int(round((c1 - c0) * 1_000_000_000 / (t1 - t0), -3))  # to the kHz: what 50 ms can say
