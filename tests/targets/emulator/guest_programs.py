"""Programs in an emulated boot, through the emulator target (the platform's memory, the runtime's entry points called
on CPU 0 as a kernel's thread calls them), the tables' both halves read back out of guest memory; agg_support.c adds
a probe of six arguments to the fixture kernel, for programs compiled for any argument types."""

from __future__ import annotations

from pathlib import Path

from sdtgen.dscript.compiler import Compiled
from sdtgen.dscript.merge import Totals
from sdtgen.dscript.tables import read_cpu
from sdtgen.targets.emulator.platform import AGG_TABLE_BYTES

HERE = Path(__file__).resolve().parent
SUPPORT = HERE / "agg_support.c"
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
        """``session``: an emulated boot's Session; its target gives the programs and tables their memory and calls
        the runtime's entry points (sdtgen/targets/emulator/target.py), as `sdtgen boot --aggregate` does."""
        self.s, self.t = session, session.target
        self.fire_at = session.image.symbols["agg_fire"].value
        self.bits = session.image.arch.bits
        self.t.attach_tables()

    def enable(self, compiled: Compiled, mode: str) -> int:
        """Every program of ``compiled`` written to the kernel's memory and enabled: the sites armed."""
        armed = 0
        for program in compiled.programs:
            at = self.t.load_program(program.code)
            for spec in program.specs:
                armed += self.t.enable_program(spec, mode, at, len(program.code))
        return armed

    def disable(self, spec: str) -> int:
        return self.t.disable_program(spec)

    def fire(self, compiled: Compiled, mode: str, args: list[int]) -> int:
        """agg_fire(args) on CPU 0 with fresh tables, its probe (agg:test:fire:six) running ``compiled``'s one
        program armed with ``mode``: the events recorded. The program is detached and disarmed after."""
        [program] = compiled.programs
        at, size = self.t.platform.agg_tables(0)
        assert self.t.runtime.call(self.t.machine, "sdt_agg_attach", [self.t.platform.area(0),
                                                                      self.t.platform.agg(0), at, size]) == 0
        self.enable(compiled, mode)
        before = self.s.hits.get(FIRE, 0)
        self.t.machine.call(self.fire_at, [a & ((1 << self.bits) - 1) for a in args])
        self.s.drain()
        recorded = self.s.hits.get(FIRE, 0) - before
        for spec in program.specs:
            assert self.disable(spec) == 1
        return recorded

    def cpu_tables(self, cpu: int = 0):
        """Both halves of CPU ``cpu``'s tables (the CPUs are stopped)."""
        return read_cpu(self.t.machine.read, self.t.platform.agg(cpu), self.bits, self.s.image.arch.little,
                        given=AGG_TABLE_BYTES)

    def totals(self, compiled: Compiled) -> Totals:
        """Every CPU's tables, both halves, merged."""
        t = Totals(compiled.aggregations, compiled.names)
        for k in range(self.s.cpus):
            t.add(self.cpu_tables(k))
        return t
