"""The per-architecture interface: everything that differs between CPUs sits behind it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from sdtgen.errors import SdtError

CALL, TAIL, COND, REF = "call", "tail", "cond", "ref"
ISEN = "isen"  # an is-enabled check: a plain call to the probe's __dtrace_isenabled_ stub
RETURNS = (TAIL, COND)  # forms after which the function returns: args as at a function entry


def branch_form(form: str) -> str:
    """The branch a site of ``form`` is in the code: an is-enabled check is a call."""
    return CALL if form == ISEN else form


@dataclass(frozen=True)
class SiteShape:
    """What a relocation against a probe symbol turned out to be."""

    form: str  # CALL, TAIL, COND (conditional tail jump) or REF
    start: int  # offset of the instruction in its section (of the field, for REF)
    length: int  # instruction length in bytes (0 when unknown, for REF)
    detail: str  # a few words for people: "call rel32", "address load", ...


@dataclass(frozen=True)
class Decoded:
    """One instruction of a final image, decoded by Capstone."""

    form: str  # CALL, TAIL, or REF for anything else
    length: int
    target: int | None  # direct branch target
    slot: int | None  # address of the pointer an indirect branch goes through
    text: str  # mnemonic and operands, for messages


@dataclass(frozen=True)
class Regs:
    pc: int
    sp: int
    ret: int
    args: tuple[int, ...]
    link: int | None = None  # the register a call leaves its return address in, if any


_RECORDER_C = """
static inline __attribute__((always_inline)) struct sdt_cpu *sdt_this_cpu(void)
{
%(cpu)s
}

static inline __attribute__((always_inline)) unsigned long long sdt_clock(void)
{
%(clock)s
}
"""


def _read_register(ctype: str, insn: str) -> str:
    return f'\t{ctype} v;\n\t__asm__ __volatile__("{insn}" : "=r"(v));\n\treturn v;'


class UnsupportedReloc(Exception):
    """A relocation type this architecture does not understand (the caller names the site)."""


class Arch:
    """Base class of the per-architecture modules (see sdtgen/arch/<name>.py)."""

    name: str
    title: str  # for people: "x86-64", "RISC-V 64"
    order: int  # where it comes in listings: x86_64 first
    machine: int  # ELF e_machine
    bits: int
    little: bool = True
    reloc_names: ClassVar[dict[int, str]] = {}

    # -- building for it -----------------------------------------------------------
    triple: str  # GNU triple: clang --target, Debian's cross tools
    triple_cpus: tuple[str, ...]  # first fields of `$(CC) -dumpmachine` triples that mean this architecture
    cross_prefix: str  # of the GNU tools that build for it ("" where the host's own serve)
    gcc_package: str  # the Debian packages of that gcc and its binutils
    binutils_package: str
    cflags: tuple[str, ...]  # the kernel flags it adds to sdtgen's common ones
    gold: bool = True  # Debian ships gold for it
    ld_format: str  # OUTPUT_FORMAT and OUTPUT_ARCH of the final linker script
    ld_arch: str
    layout: str  # where the final script puts the kernel, in words, for the script's header

    def reloc_name(self, rtype: int) -> str:
        return self.reloc_names.get(rtype, f"relocation type {rtype}")

    def classify(self, code: memoryview, field: int, rtype: int, executable: bool, boundary: int = 0) -> SiteShape:
        """Decide the instruction form of a relocation at ``field`` in ``code``.

        ``boundary`` is an offset at or before ``field`` where an instruction is known to start (the
        enclosing function's), for instruction sets whose bytes do not say where instructions begin."""
        raise NotImplementedError

    _disassembler = None

    def capstone(self):
        raise NotImplementedError

    def disassembler(self):
        """One Capstone handle per architecture, made on first use (import cost stays off scan)."""
        if self._disassembler is None:
            self._disassembler = self.capstone()
        return self._disassembler

    branch_mnemonics: frozenset[str] = frozenset()

    def decode(self, code: bytes, addr: int, read_pointer) -> Decoded | None:
        """Decode the instruction at ``addr`` (``code`` starts there)."""
        raise NotImplementedError

    def branches_to(self, code: bytes, addr: int, targets: set[int]) -> list[int]:
        """Addresses of the direct calls and jumps in ``code`` (a linear sweep) that go to ``targets``."""
        cs = self.capstone()
        cs.skipdata = True
        found = []
        for insn in cs.disasm(code, addr):
            if insn.mnemonic in self.branch_mnemonics:
                try:
                    target = int(insn.op_str, 16)
                except ValueError:
                    continue
                if target in targets:
                    found.append(insn.address)
        return found

    # -- emulated boot -----------------------------------------------------------
    trap_interrupts: frozenset[int] = frozenset()  # Unicorn interrupt numbers a breakpoint raises
    trap_on_invalid: bool = False  # the breakpoint surfaces as an invalid instruction (RISC-V)
    relative_reloc: int = -1  # the dynamic relocation a PIE kernel applies to itself
    kernel_base: int = 0  # where sdtgen's final script links the kernel
    max_args: int = 6  # integer arguments `--run` passes
    relaxes: bool = False  # the final link may shorten calls and delete bytes (RISC-V)
    # An aligned store of this many bytes is one instruction write every other CPU fetches whole, old or
    # new (the architecture guarantees it for instruction fetch); 0: none, so patches need a breakpoint.
    patch_unit: int = 0

    # -- QEMU (`sdtgen qemu`: the fixture's platform in fixtures/qemu boots on these) ---------------
    qemu_binary: str = ""  # the qemu-system-* that emulates it ("": sdtgen qemu does not boot it)
    qemu_package: str = ""  # the Debian package that has it
    qemu_machine: str = ""  # -machine
    qemu_args: tuple[str, ...] = ()  # what else the platform needs: CPU model, firmware, devices
    qemu_accel: tuple[str, ...] = ("-accel", "tcg,thread=multi")  # one host thread per vCPU (MTTCG)
    qemu_exit_ok: int = 0  # QEMU's exit status when the platform powers off after `exit 0`

    # The recorders `gen` writes (sdtgen/recorder.py) read two things with an instruction of their own:
    # the per-CPU register the host sets to the CPU's control structure (sdt_this_cpu()) and the clock
    # the guest stamps records with (sdt_clock()). Most CPUs read each into any register (%0).
    cpu_insn: str = ""
    clock_insn: str = ""

    def cpu_c(self) -> str:
        """The body of sdt_this_cpu()."""
        return _read_register("struct sdt_cpu *", self.cpu_insn)

    def clock_c(self) -> str:
        """The body of sdt_clock()."""
        return _read_register("unsigned long long", self.clock_insn)

    @property
    def recorder_c(self) -> str:
        return _RECORDER_C % {"cpu": self.cpu_c(), "clock": self.clock_c()}

    # The same clock for trace files (sdtgen/boot/clock.py): its name, an instruction reading it (or its
    # frequency, where the CPU says it), and where the value is after it ran.
    clock_name: str = ""
    clock_code: bytes = b""
    clock_hz_code: bytes = b""

    def clock_value(self, uc) -> int:
        """The clock as ``clock_code`` left it in the registers."""
        return uc.reg_read(self.regs.ret)

    def set_cpu_pointer(self, uc, addr: int) -> None:
        """Point the per-CPU register the recorders read (``recorder_c``) at this CPU's control structure."""
        raise NotImplementedError

    def branch_to(self, form: str, site: int, length: int, target: int) -> bytes | None:
        """A call (CALL) or jump (TAIL) from ``site`` to ``target`` filling ``length`` bytes; None when
        ``target`` is out of that instruction's range (the site is then armed with the breakpoint)."""
        return None

    def retarget(self, code: bytes, site: int, target: int) -> bytes | None:
        """A conditional tail jump (COND) ``code`` at ``site`` sent to ``target`` instead; None if out of range."""
        return None

    def enter(self, m, func: int, return_to: int | None) -> None:
        """Make the stopped guest call ``func`` returning to ``return_to``, arguments as they are; with
        None, jump to it (a tail site: it returns to the current function's caller)."""
        if return_to is not None:
            m.uc.reg_write(self.regs.link, return_to)
        m.uc.reg_write(self.regs.pc, func)

    def nop(self, length: int) -> bytes:
        """The recommended NOP filling exactly ``length`` bytes."""
        raise NotImplementedError

    def tail_return(self, length: int) -> bytes:
        """What a disabled tail-jump site becomes: a return, padded to ``length``."""
        raise NotImplementedError

    def breakpoint(self, length: int) -> bytes:
        """The breakpoint written over the start of a ``length``-byte site to arm it."""
        raise NotImplementedError

    def set_result(self, length: int, value: int) -> bytes:
        """What an is-enabled call site becomes: "return register = ``value``" (0 or 1), exactly ``length``
        bytes, with no branch: a disabled check reads 0, an armed one 1."""
        raise NotImplementedError

    def match_site(self, code: bytes, site: int, form: str, length: int, stub: int, read_pointer) -> int | None:
        """The length of the call or tail jump to ``stub`` that ``code`` starts with, or None.

        ``length`` is what the partial link had; a linker that relaxes calls
        (RISC-V) may have made the site shorter, which the result says.
        """
        raise NotImplementedError

    def is_empty_stub(self, code: bytes) -> bool:
        """Whether ``code`` is an empty function: what may take a breakpoint for conditional sites."""
        return False

    def trap_site(self, pc: int) -> int:
        """The address of the breakpoint that trapped, given the PC Unicorn reports (on it, mostly)."""
        return pc

    def unicorn(self):
        raise NotImplementedError

    @property
    def regs(self) -> Regs:
        """Unicorn register ids of the PC, SP, return value and argument registers."""
        raise NotImplementedError

    def set_call(self, m, func: int, args: list[int], return_to: int, stack_top: int) -> None:
        """Prepare registers and stack to call ``func(args)`` returning to ``return_to``.

        This is the link-register convention (AArch64, RISC-V); x86 overrides it."""
        mask = (1 << self.bits) - 1
        for reg, value in zip(self.regs.args, args, strict=False):
            m.uc.reg_write(reg, value & mask)
        m.uc.reg_write(self.regs.link, return_to)
        m.uc.reg_write(self.regs.sp, stack_top & ~0xF)
        m.uc.reg_write(self.regs.pc, func)

    def args_at_site(self, m, count: int, form: str) -> list[int]:
        """The first ``count`` probe arguments, as the calling convention has them at a site of ``form``."""
        return [m.uc.reg_read(r) for r in self.regs.args[:count]]

    def return_address(self, m) -> int:
        """Where the current function returns to (what a tail-jump site does after firing)."""
        return m.uc.reg_read(self.regs.link)

    def final_script(self) -> str:
        """sdtgen's final linker script for this architecture, from the one template all share."""
        from string import Template

        with open(os.path.join(SCRIPTS, "final.ld.in")) as f:
            text = f.read()
        return Template(text).substitute(name=self.title, layout=self.layout, format=self.ld_format,
                                         ld_arch=self.ld_arch, kernbase=f"{self.kernel_base:#x}")

    def linker_script(self, name: str):
        """A linker script file (a Path): the partial one (all share it) or an extra of this architecture's."""
        from pathlib import Path

        if name == "partial":
            return Path(SCRIPTS, "partial.ld")
        path = Path(SCRIPTS, self.name, f"{name}.ld")
        if name == "final" or not path.is_file():
            raise SdtError("", f"no linker script {name!r} for {self.name}",
                           "the final script is written by `sdtgen linker-script final --arch ARCH -o FILE`")
        return path


SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "linker_scripts")
