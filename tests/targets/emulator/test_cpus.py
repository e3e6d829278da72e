"""Each architecture's CPU as the emulator runs it: the facts its module declares as data, put to work by the
emulator's one piece of code (sdtgen/targets/emulator/cpus.py). Checked by running what they make in Unicorn
against values the test chose: a call's arguments as the callee sees them, the word the platform's load
function returns, the clock the clock function returns; and by importing every architecture without Unicorn."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from helpers import ARCHES

from sdtgen import arch as arches
from sdtgen.targets.emulator.cpus import model_of

BASE = 0x100000
STOP = BASE + 0x800  # where the calls return to: emu_start stops there
STACK = BASE + 0x8000


class Memory:
    """The slice of Machine that set_call and args_at_site need: an engine, reads and writes."""

    def __init__(self, cpu) -> None:
        import unicorn

        self.uc = unicorn.Uc(*cpu.unicorn)
        self.uc.mem_map(BASE, 0x10000)

    def write(self, addr: int, data: bytes) -> None:
        self.uc.mem_write(addr, bytes(data))

    def read(self, addr: int, size: int) -> bytes:
        return bytes(self.uc.mem_read(addr, size))


def call(m: Memory, cpu, code: bytes, args: list[int]) -> int:
    """Run ``code`` as a function called with ``args``; the 64-bit value it returns."""
    m.write(BASE, code)
    cpu.set_call(m, BASE, args, STOP, STACK)
    m.uc.emu_start(BASE, STOP, timeout=1_000_000)
    assert m.uc.reg_read(cpu.regs.pc) == STOP, "the function did not return where the call said"
    return cpu.returned(m.uc)


def test_the_architecture_modules_are_facts_importing_them_loads_no_unicorn():
    probe = ("import sys; from sdtgen import arch; arch.all_arches(); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('unicorn', 'capstone')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ARCHES)
def test_the_platforms_load_function_returns_the_word_at_its_address(name):
    cpu = model_of(arches.by_name(name))
    m = Memory(cpu)
    for word in (0x1122334455667788 & cpu.mask, cpu.mask, 1):
        m.write(BASE + 0x4000, word.to_bytes(cpu.word, "little"))
        assert call(m, cpu, cpu.firmware_load(BASE + 0x4000), []) & cpu.mask == word


@pytest.mark.parametrize("name", ARCHES)
def test_the_platforms_clock_function_returns_a_clock_that_advances(name):
    cpu = model_of(arches.by_name(name))
    m = Memory(cpu)
    first = call(m, cpu, cpu.firmware_clock(), [])
    time.sleep(0.01)
    assert call(m, cpu, cpu.firmware_clock(), []) > first > 0


@pytest.mark.parametrize("name", ARCHES)
def test_a_function_reads_its_arguments_where_the_call_put_them(name):
    """At a function's first instruction its arguments are where a tail site finds them (in registers, or on the
    stack past the return address), each the value the call was given."""
    cpu = model_of(arches.by_name(name))
    m = Memory(cpu)
    args = [0x11, 0x2200, 0x330000, 0x44000000, 0x55, 0xFFFFFFFF]
    bp = arches.by_name(name).breakpoint(4)
    m.write(BASE, bp)
    cpu.set_call(m, BASE, args, STOP, STACK)
    assert cpu.args_at_site(m, 6, "tail") == args
