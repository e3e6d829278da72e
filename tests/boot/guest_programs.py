"""Programs in an emulated boot: the kernel's memory for them (agg_support.c, linked into the image), the runtime's
entry points called on CPU 0 as a kernel's thread calls them, the tables read back out of guest memory."""

from __future__ import annotations

from pathlib import Path

from sdtgen.boot.runtime import MODES
from sdtgen.dscript.compiler import Compiled
from sdtgen.dscript.merge import Totals
from sdtgen.dscript.tables import read_cpu
from sdtgen.layout import AGG

HERE = Path(__file__).resolve().parent
SUPPORT = HERE / "agg_support.c"
AGG_BYTES = 64 * 1024
FIRE = "agg:test:fire:six"  # agg_support.c's probe


def build_image(out: Path, arch: str) -> Path:
    """The fixture kernel with agg_support.c, built with sdtgen's steps for ``arch``."""
    import toolchain
    from helpers import FIXTURE

    b = toolchain.Build(arch=arch, extra_sources=(SUPPORT,))
    objs = toolchain.compile_sources(b, sorted(FIXTURE.glob("*.c")), out)
    partial = toolchain.partial_link(b, objs, out / "kernel.o")
    toolchain.gen(partial, out / "stubs.c", out / "table.S")
    return toolchain.final_link(b, partial, toolchain.compile_table(b, out / "stubs.c", out / "table.S", out),
                                out / "kernel.elf")


class GuestPrograms:
    def __init__(self, session) -> None:
        """``session``: an emulated boot's Session (its target's machine, platform and runtime are used)."""
        self.s, self.t = session, session.target
        sym = session.image.symbols
        self.fn = {name: sym[name].value for name in ("sdt_agg_attach", "sdt_enable_program", "sdt_disable_program",
                                                      "sdt_agg_switch", "agg_fire")}
        self.tables_at = sym["agg_tables"].value
        self.memory_at = sym["agg_memory"].value
        self.programs_at = sym["agg_programs"].value
        self.programs_end = self.programs_at + sym["agg_programs"].size
        self.next_program = self.programs_at
        self.bits = session.image.arch.bits
        for k in range(session.cpus):
            assert self.call("sdt_agg_attach", self.t.platform.area(k), self.table(k),
                             self.memory_at + k * AGG_BYTES, AGG_BYTES) == 0

    def table(self, cpu: int) -> int:
        return self.tables_at + cpu * AGG.size(self.bits)

    def call(self, name: str, *args: int) -> int:
        raw = self.t.machine.call(self.fn[name], list(args)) & 0xFFFFFFFF
        return raw - (1 << 32) if raw >> 31 else raw

    def spec(self, text: str) -> int:
        where = self.t.platform.spec_buffer(0)
        self.t.machine.write(where, text.encode() + b"\0")
        return where

    def enable(self, compiled: Compiled, mode: str) -> int:
        """Every program of ``compiled`` written to the kernel's memory and enabled: the sites armed."""
        armed = 0
        for program in compiled.programs:
            at = self.next_program
            self.next_program += (len(program.code) + 7) // 8 * 8
            assert self.next_program <= self.programs_end
            self.t.machine.write(at, program.code)
            for spec in program.specs:
                r = self.call("sdt_enable_program", self.spec(spec), MODES[mode], at, len(program.code))
                assert r >= 0, f"sdt_enable_program refused {spec}: {r}"
                armed += r
        self.t.runtime.refresh()
        return armed

    def disable(self, spec: str) -> int:
        r = self.call("sdt_disable_program", self.spec(spec))
        self.t.runtime.refresh()
        return r

    def fire(self, compiled: Compiled, mode: str, args: list[int]) -> int:
        """agg_fire(args) on CPU 0 with fresh tables, its probe (agg:test:fire:six) running ``compiled``'s one
        program armed with ``mode``: the events recorded. The program is detached and disarmed after."""
        [program] = compiled.programs
        assert self.call("sdt_agg_attach", self.t.platform.area(0), self.table(0), self.memory_at, AGG_BYTES) == 0
        self.next_program = self.programs_at
        self.enable(compiled, mode)
        before = self.s.hits.get(FIRE, 0)
        self.t.machine.call(self.fn["agg_fire"], [a & ((1 << self.bits) - 1) for a in args])
        self.s.drain()
        recorded = self.s.hits.get(FIRE, 0) - before
        for spec in program.specs:
            assert self.disable(spec) == 1
        return recorded

    def cpu_tables(self, cpu: int = 0):
        return read_cpu(self.t.machine.read, self.table(cpu), self.bits, self.s.image.arch.little, given=AGG_BYTES)

    def totals(self, compiled: Compiled) -> Totals:
        """Every CPU's tables, both halves (the CPUs are stopped), merged."""
        t = Totals(compiled.aggregations, compiled.names)
        for k in range(self.s.cpus):
            t.add(self.cpu_tables(k))
        return t
