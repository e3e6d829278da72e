"""The per-architecture interface: the host's half of what sdtgen/runtime/sdt_arch.h is for the runtime.

An ``Arch`` holds what a toolchain, a linker and an instruction set make true of an architecture, and
nothing of any one target's machinery:

- identity: name, ELF machine, word size and byte order, the GNU triple and the tools that build for it;
- linking: the relocations a site or a table field carries, the one a PIE kernel applies to itself,
  where sdtgen's final script links a kernel, whether the final link relaxes calls;
- decoding: Capstone's mode, an instruction's form and target, the disabled-cost report's flow;
- sites: the forms a probe call takes (``classify``, ``match_site``: sdt_arch_verify), the NOP of an asm
  goto, the breakpoint (sdt_arch_bp) and where a trap on it reports the PC (sdt_arch_trap_address).

What the Unicorn emulator needs beyond those (its constants for the CPU and the registers, which
registers hold the PC, the arguments, a return value, how a call leaves its return address, its
interrupt numbers, and the few instructions of the emulated platform's firmware) is declared here as
data too, one ``EmulatorFacts`` value per architecture, so that a new architecture is still one module
of facts (a table keyed by architecture in the emulator's package would be a second module to touch, and
facts about one CPU kept apart from the rest of them); the code that reads those facts, and every import of
Unicorn, is the emulator's (sdtgen/targets/emulator/cpus.py), as QEMU's machine (``QemuMachine``) is data
its target reads. See docs/architectures.md, "A fifth architecture".
"""

from __future__ import annotations

import os

from sdtgen.errors import SdtError, printable
from sdtgen.plaindata import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import ClassVar

CALL, TAIL, COND, REF = "call", "tail", "cond", "ref"
ISEN = "isen"  # an is-enabled check: a plain call to the probe's __dtrace_isenabled_ stub
GOTO = "goto"  # the NOP of an asm goto (sdt.h's SDT_ASM_GOTO): armed by a jump to its out-of-line target
RETURNS = (TAIL, COND)  # forms after which the function returns: args as at a function entry


def branch_form(form: str) -> str:
    """The branch a site of ``form`` is in the code: an is-enabled check is a call."""
    return CALL if form == ISEN else form


@record(frozen=True)
class SiteShape:
    """What a relocation against a probe symbol turned out to be."""

    form: str  # CALL, TAIL, COND (conditional tail jump) or REF
    start: int  # offset of the instruction in its section (of the field, for REF)
    length: int  # instruction length in bytes (0 when unknown, for REF)
    detail: str  # a few words for people: "call rel32", "address load", ...


@record(frozen=True)
class Decoded:
    """One instruction of a final image, decoded by Capstone."""

    form: str  # CALL, TAIL, or REF for anything else
    length: int
    target: int | None  # direct branch target
    slot: int | None  # address of the pointer an indirect branch goes through
    text: str  # mnemonic and operands, for messages


class Flow:
    """What an instruction does to the path through a function (Arch.flow)."""

    NEXT, CALLS, RETURNS, JUMPS, BRANCHES, STOPS = "next", "call", "ret", "jump", "cond", "stop"


@record(frozen=True)
class Toolchain:
    """How kernels are built for an architecture: Debian's cross tools, the kernel flags, the final link."""

    triple: str  # GNU triple: clang --target, Debian's cross tools
    triple_cpus: tuple[str, ...]  # first fields of `$(CC) -dumpmachine` triples that mean this architecture
    cross_prefix: str  # of the GNU tools that build for it ("" where the host's own serve)
    gcc_package: str  # the Debian packages of that gcc and its binutils
    binutils_package: str
    cflags: tuple[str, ...]  # the kernel flags it adds to the common ones (tools/kernel_flags.mk for sdtgen's kernels)
    ld_format: str  # OUTPUT_FORMAT and OUTPUT_ARCH of the final linker script
    ld_arch: str
    layout: str  # where the final script puts the kernel, in words, for the script's header


@record(frozen=True)
class QemuMachine:
    """The machine `sdtgen qemu` boots an architecture's kernels on (the fixture's platform in fixtures/qemu)."""

    binary: str  # the qemu-system-* that emulates it
    package: str  # the Debian package that has it
    machine: str  # -machine
    args: tuple[str, ...] = ()  # what else the platform needs: CPU model, firmware, devices
    accel: tuple[str, ...] = ("-accel", "tcg,thread=multi")  # one host thread per vCPU (MTTCG)
    exit_ok: int = 0  # QEMU's exit status when the platform powers off after `exit 0`
    ram_base: int = 0  # where the machine's RAM starts: the memory backend's first byte (shared rings)
    # How a module file reaches the kernel's loader: a fw_cfg file (SDT_MODULE_FILE_NAME), or True: put in RAM by
    # QEMU's loader device at the first SDT_MODULE_FILE_ALIGN boundary after the image (RISC-V: QEMU 7's virt
    # machine makes its fw_cfg after the -fw_cfg files are taken, so a module given that way never arrives).
    module_in_ram: bool = False


@record(frozen=True)
class EmulatorFacts:
    """What the Unicorn emulator needs of an architecture, as data (sdtgen/targets/emulator/cpus.py reads it).

    Registers are named as Capstone names them; where a call's arguments and return address go follows from
    which registers there are: a link register (AArch64, RISC-V) or none (x86: the return address pushed),
    and argument registers or none (i386's cdecl: the arguments pushed too)."""

    unicorn: tuple[str, str]  # Unicorn's constants for the CPU and its mode: ("UC_ARCH_X86", "UC_MODE_64")
    registers: tuple[str, str]  # the unicorn module and prefix of its register ids: ("x86_const", "UC_X86_REG_")
    pc: str
    sp: str
    ret: tuple[str, ...]  # a returned value's registers, low word first (i386 returns 64 bits in eax and edx)
    args: tuple[str, ...]  # the argument registers, in order (none: on the stack)
    link: str = ""  # the register a call leaves its return address in ("": pushed on the stack)
    flags: str = ""  # the condition flags a trap frame carries (x86 EFLAGS: a conditional tail site tests them)
    traps: frozenset[int] = frozenset()  # Unicorn's interrupt numbers a breakpoint raises
    trap_on_invalid: bool = False  # the breakpoint surfaces as an invalid instruction instead (RISC-V)
    # The emulated platform's hook code (sdtgen/targets/emulator/platform.py), as machine code each checked
    # against GNU as, Capstone and a run in Unicorn: a function's return; the instructions reading the clock
    # (Arch.clock_name) into ``ret``, and its frequency where the CPU says it; and a function returning the
    # word at an address: these bytes, the address as a word, these bytes.
    return_insn: bytes = b""
    clock: bytes = b""
    clock_hz: bytes = b""
    load_word: tuple[bytes, bytes] = (b"", b"")


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
    # The data relocations a table's fields carry (USDT notes, __mcount_loc, __jump_table, sdtgen's
    # sets): relocation type -> (field bytes, PC-relative). Label differences a linker resolves as an
    # ADD/SUB pair (RISC-V's) are in ``data_pairs``: type -> ("add" or "sub", field bytes).
    data_relocs: ClassVar[dict[int, tuple[int, bool]]] = {}
    data_pairs: ClassVar[dict[int, tuple[str, int]]] = {}

    toolchain: Toolchain  # how kernels are built for it
    qemu: QemuMachine | None = None  # the machine `sdtgen qemu` boots it on (None: it boots on none)
    emulator: EmulatorFacts  # what the Unicorn emulator needs of it

    def reloc_name(self, rtype: int) -> str:
        return self.reloc_names.get(rtype, f"relocation type {rtype}")

    # The one NOP sdt.h's asm goto form puts at a site, which arming overwrites with a jump.
    goto_nop: bytes = b""

    @property
    def abs_word(self) -> int:
        """The relocation of an absolute pointer-sized word: what an asm goto record's words carry."""
        return next(t for t, (size, pcrel) in self.data_relocs.items() if size == self.bits // 8 and not pcrel)

    def classify(self, code: memoryview, field: int, rtype: int, executable: bool,
                 boundary: int | Callable[[], int] = 0) -> SiteShape:
        """Decide the instruction form of a relocation at ``field`` in ``code``.

        ``boundary`` is an offset at or before ``field`` where an instruction is known to start (the
        enclosing function's), for instruction sets whose bytes do not say where instructions begin; or a
        function that finds it, called only when the bytes are ambiguous (scan's sites rarely are)."""
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

    # -- the disabled-probe cost report (sdtgen/cost.py) ---------------------------------------

    def flow(self, insn) -> tuple[str, int | None]:
        """What a Capstone instruction (decoded with detail) does to the path through a function: Flow.NEXT (on
        to the following one), CALLS (a call, which returns), RETURNS, JUMPS (to the target; None: indirect),
        BRANCHES (conditional, to the target) or STOPS (a trap or a halt)."""
        raise NotImplementedError

    stack_registers: frozenset[str] = frozenset()  # the stack and frame pointers, as Capstone names them

    def spills(self, insn) -> int:
        """How many registers ``insn`` stores to the stack (a push, a store through the stack or frame pointer)."""
        raise NotImplementedError

    # -- linking and calling ------------------------------------------------------------
    relative_reloc: int = -1  # the dynamic relocation a PIE kernel applies to itself
    kernel_base: int = 0  # where sdtgen's final script links the kernel
    max_args: int = 6  # integer arguments `--run` passes
    relaxes: bool = False  # the final link may shorten calls and delete bytes (RISC-V)
    # Another CPU's instruction fetch may see any subset of the bytes one store to code writes (x86: a
    # cross-modifying store is not atomic to the fetch); False: all of them or none (an aligned 4-byte store of
    # one instruction, AArch64 and RISC-V).
    fetch_sees_torn_stores: bool = False
    # The counter events are stamped with, as the clock hook of sdtgen's platforms reads it (CTF's clock name).
    clock_name: str = ""

    # -- sites (sdt_arch.h: sdt_arch_verify, sdt_arch_bp, sdt_arch_trap_address) ----------------
    def breakpoint(self, length: int) -> bytes:
        """The breakpoint written over the start of a ``length``-byte site to arm it."""
        raise NotImplementedError

    def match_site(self, code: bytes, site: int, form: str, length: int, stub: int, read_pointer) -> int | None:
        """The length of the call or tail jump to ``stub`` that ``code`` starts with, or None.

        ``length`` is what the partial link had; a linker that relaxes calls
        (RISC-V) may have made the site shorter, which the result says.
        """
        raise NotImplementedError

    def trap_site(self, pc: int) -> int:
        """The address of the breakpoint that trapped, given the PC the CPU reports (on it, mostly)."""
        return pc

    def final_script(self) -> str:
        """sdtgen's final linker script for this architecture, from the one template all share, with the
        sections of the two snippets a kernel's own script INCLUDEs (one text for both)."""
        from string import Template

        with open(os.path.join(SCRIPTS, "final.ld.in")) as f:
            text = f.read()
        t = self.toolchain
        return Template(text).substitute(name=self.title, layout=t.layout, format=t.ld_format,
                                         ld_arch=t.ld_arch, kernbase=f"{self.kernel_base:#x}",
                                         sdt_text=_snippet_body("sdt_text"), sdt_data=_snippet_body("sdt_data"))


SNIPPETS = ("sdt_text", "sdt_data")  # what a kernel's own final script INCLUDEs
LINKER_SCRIPTS = ("partial", *SNIPPETS)  # the script files every architecture shares


def linker_script(name: str) -> str:
    """The path of one of the shared linker script files (LINKER_SCRIPTS)."""
    if name not in LINKER_SCRIPTS:
        raise SdtError("", f"no linker script {name!r}", f"choose one of {', '.join(LINKER_SCRIPTS)}")
    return os.path.join(SCRIPTS, f"{name}.ld")


KEEP_SECTION = r"\.text\.[A-Za-z0-9_.$-]+"  # a kernel's own text section, as the partial script may keep it


def partial_script(keep: list[str]) -> str:
    """The partial script, which merges every text input section into one .text, with the sections ``keep``
    names (a kernel's own, such as .text.entry) placed first, each in an output section of its own name, so the
    final link sees them as the kernel made them."""
    import re

    for name in keep:
        if not re.fullmatch(KEEP_SECTION, name):
            raise SdtError("", f"--keep '{printable(name)}' is not a text section the partial script merges",
                           "name a section .text.NAME (letters, digits, '_', '.', '$', '-'), one an option")
    with open(linker_script("partial")) as f:
        text = f.read()
    merge = "\t.text : {"
    kept = "".join(f"\t{name} : {{ *({name}) }}\n" for name in dict.fromkeys(keep))
    return text.replace(merge, kept + merge, 1)


def _snippet_body(name: str) -> str:
    """A snippet's sections without its leading comment (which tells a script's author how to INCLUDE it)."""
    with open(linker_script(name)) as f:
        return f.read().split("*/\n", 1)[1].rstrip("\n")


SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "linker_scripts")
