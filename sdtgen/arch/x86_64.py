"""x86-64: call/jmp rel32 sites (CS-prefixed too), GOT calls, and the System V calling convention."""

from __future__ import annotations

from sdtgen.arch.base import (
    CALL,
    COND,
    REF,
    TAIL,
    Arch,
    Decoded,
    EmulatorFacts,
    Flow,
    QemuMachine,
    SiteShape,
    Toolchain,
    UnsupportedReloc,
)
from sdtgen.plaindata import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import ClassVar

R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32 = 1, 2, 4
R_X86_64_GOTPCREL, R_X86_64_32, R_X86_64_32S = 9, 10, 11
R_X86_64_PC64, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX = 24, 41, 42
X86_OP_IMM = 2  # capstone.x86.X86_OP_IMM, without importing Capstone at start-up


@record(frozen=True)
class Branch:
    """A call or jump with a 32-bit displacement, the shapes a probe site takes on x86."""

    form: str  # CALL, TAIL or COND
    length: int
    disp: int  # where the 32-bit field starts in the instruction
    got: bool  # the field locates a pointer slot (call/jmp *x(%rip)), not the target
    what: str


# The branches by their leading bytes (one-byte opcodes, then prefix or opcode pairs): the field
# follows the lead, and an instruction is its lead and the 4-byte field.
_ONE = {0xE8: Branch(CALL, 5, 1, False, "call rel32"), 0xE9: Branch(TAIL, 5, 1, False, "jmp rel32")}
_TWO = {
    0x2EE8: Branch(CALL, 6, 2, False, "cs call rel32"),  # gcc -mindirect-branch-cs-prefix
    0x2EE9: Branch(TAIL, 6, 2, False, "cs jmp rel32"),
    0x67E8: Branch(CALL, 6, 2, False, "addr32 call rel32"),  # GNU ld and lld relax `call *GOT` to this
    0xFF15: Branch(CALL, 6, 2, True, "call *GOT"),
    0xFF25: Branch(TAIL, 6, 2, True, "jmp *GOT"),
    **{0x0F00 | cc: Branch(COND, 6, 2, False, "conditional tail jump (jcc rel32)") for cc in range(0x80, 0x90)},
}


def branch_at(code: bytes, got: bool = True) -> Branch | None:
    """The call or jump ``code`` starts with, in every form a site takes; None for anything else.

    The one x86 recognizer: scan's classify, check's decode and check's
    match_site all read instructions through it. ``got``: the pointer-slot forms
    are RIP-relative, so only x86-64 has them.
    """
    n = len(code)
    b = _TWO.get(code[0] << 8 | code[1]) if n >= 2 else None
    if b is None:
        b = _ONE.get(code[0]) if n else None
        if b is None:
            return None
    if n < b.length or (b.got and not got):
        return None
    return b


_FIRST_OF_TWO = frozenset(k >> 8 for k in _TWO)
# A call or jmp rel32 whose field is the relocation's and whose byte before the opcode leads no two-byte form
# (classify's loop would find exactly it: the two-byte starts are skipped, the one-byte one matches).
_PLAIN = {0xE8: _ONE[0xE8], 0xE9: _ONE[0xE9]}


def _field(code, b: Branch) -> int:
    return int.from_bytes(code[b.disp:b.disp + 4], "little", signed=True)


_RELOC_NAMES = """
    NONE 64 PC32 GOT32 PLT32 COPY GLOB_DAT JUMP_SLOT RELATIVE GOTPCREL 32 32S 16 PC16 8 PC8 DTPMOD64 DTPOFF64
    TPOFF64 TLSGD TLSLD DTPOFF32 GOTTPOFF TPOFF32 PC64 GOTOFF64 GOTPC32 GOT64 GOTPCREL64 GOTPC64 GOTPLT64
    PLTOFF64 SIZE32 SIZE64 GOTPC32_TLSDESC TLSDESC_CALL TLSDESC IRELATIVE RELATIVE64 39 40 GOTPCRELX REX_GOTPCRELX
"""


class X86_64(Arch):
    name = "x86_64"
    title = "x86-64"
    order = 0
    machine = 62
    bits = 64
    # Debian's own gcc and binutils (the host sdtgen is developed on): no cross prefix.
    toolchain = Toolchain("x86_64-linux-gnu", ("x86_64", "amd64"), "", "gcc", "binutils",
                          ("-mcmodel=kernel", "-mno-red-zone"), "elf64-x86-64", "i386:x86-64",
                          "the top 2 GiB, what -mcmodel=kernel expects")
    # pc, booted through PVH (the image's XEN_ELFNOTE_PHYS32_ENTRY); isa-debug-exit powers off with
    # status code * 2 + 1.
    qemu = QemuMachine("qemu-system-x86_64", "qemu-system-x86", "pc",
                       ("-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"), exit_ok=1)

    fetch_sees_torn_stores = True  # i386 inherits it
    reloc_names: ClassVar[dict[int, str]] = dict(enumerate(f"R_X86_64_{n}" for n in _RELOC_NAMES.split()))
    # R_X86_64_64, PC32, 32, 32S, PC64
    data_relocs: ClassVar[dict[int, tuple[int, bool]]] = {1: (8, False), 2: (4, True), 10: (4, False),
                                                           11: (4, False), 24: (8, True)}
    # The relocations a probe reference can carry that sdtgen knows how to classify, by what they locate.
    branch_relocs = frozenset({R_X86_64_PC32, R_X86_64_PLT32})  # a rel32 field: a branch, or an address load
    got_relocs = frozenset({R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX})  # a GOT slot
    understood = branch_relocs | got_relocs | {R_X86_64_64, R_X86_64_32, R_X86_64_32S, R_X86_64_PC64}
    rip_got = True  # call/jmp *x(%rip) exist

    branch_mnemonics = frozenset({"call", "jmp", "je", "jne", "ja", "jae", "jb", "jbe", "jg", "jge", "jl", "jle",
                                  "js", "jns", "jo", "jno", "jp", "jnp"})

    def classify(self, code: memoryview, field: int, rtype: int, executable: bool,
                 boundary: int | Callable[[], int] = 0) -> SiteShape:
        """``boundary``: an offset at or before ``field`` where an instruction starts (its function's start), or
        a function that finds it."""
        if rtype in self.branch_relocs and executable and field >= 1 and field + 4 <= len(code):
            plain = _PLAIN.get(code[field - 1])  # the common case, decided by two bytes (see below)
            if plain is not None and (field < 2 or code[field - 2] not in _FIRST_OF_TWO):
                return SiteShape(plain.form, field - 1, plain.length, plain.what)
        if rtype not in self.understood:
            raise UnsupportedReloc(rtype)
        if not executable:
            return SiteShape(REF, field, 0, "data reference")
        if rtype in self.branch_relocs:
            for start in (field - 2, field - 1):  # a two-byte lead (prefix, 0f 8x) first, then a one-byte opcode
                if start < 0 or (start == field - 2 and code[start] not in _FIRST_OF_TWO):
                    continue  # no two-byte lead starts there (the common case: a plain call)
                b = branch_at(code[start:field + 4], got=False)
                if b is None or start + b.disp != field:
                    continue
                if b.disp == 2 and code[field - 1] in (0xE8, 0xE9) and not self._starts_insn(code, start, boundary):
                    continue  # the 2e/67 byte ends the previous instruction: a plain call/jmp at field - 1
                return SiteShape(b.form, start, b.length, b.what)
            return SiteShape(REF, field, 0, "PC-relative address load")
        if rtype in self.got_relocs and field >= 2:
            b = branch_at(code[field - 2:field + 4], got=self.rip_got)
            if b is not None and b.got:
                return SiteShape(b.form, field - 2, b.length, b.what)
            return SiteShape(REF, field, 0, "GOT load")
        return SiteShape(REF, field, 0, "absolute address load")

    def _starts_insn(self, code: memoryview, at: int, boundary: int | Callable[[], int]) -> bool:
        """Whether an instruction starts at ``at``, decoding from ``boundary``: a byte before an opcode may be
        a prefix of it or the last byte of the instruction before, and only a decode from a known start tells."""
        if callable(boundary):
            boundary = boundary()
        if not 0 <= boundary <= at:
            boundary = 0
        for address, size, _, _ in self.disassembler().disasm_lite(bytes(code[boundary:at + 16]), boundary):
            if address >= at:
                return address == at
            if address + size > at:
                return False
        return False

    def capstone(self):
        import capstone

        return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)

    def decode(self, code: bytes, addr: int, read_pointer) -> Decoded | None:
        insn = next(self.disassembler().disasm(code, addr, 1), None)
        if insn is None:
            return None
        text = f"{insn.mnemonic} {insn.op_str}".strip()
        b = branch_at(code, got=self.rip_got)
        if b is None or b.length != insn.size:
            return Decoded(REF, insn.size, None, None, text)
        to = (addr + b.length + _field(code, b)) & self.mask
        if b.got:
            return Decoded(b.form, b.length, read_pointer(to), to, text)
        return Decoded(b.form, b.length, to, None, text)

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    stack_registers = frozenset({"rsp", "rbp", "esp", "ebp"})

    def flow(self, insn) -> tuple[str, int | None]:
        m = insn.mnemonic
        target = insn.operands[0].imm & self.mask if insn.operands and insn.operands[0].type == X86_OP_IMM else None
        if m.startswith("ret"):
            return Flow.RETURNS, None
        if m == "call":
            return Flow.CALLS, target
        if m == "jmp":
            return Flow.JUMPS, target
        if m.startswith("j") or m.startswith("loop"):
            return Flow.BRANCHES, target
        if m in ("int3", "int", "into", "ud0", "ud1", "ud2", "hlt"):
            return Flow.STOPS, None
        return Flow.NEXT, None

    def spills(self, insn) -> int:
        """A push, or a mov of a register into [rsp/rbp + ...] (gcc saves with push, spills with mov)."""
        if insn.mnemonic == "push":
            return 1
        if insn.mnemonic.startswith("mov") and "ptr [" in insn.op_str:
            dest, _, src = insn.op_str.partition("], ")
            base = dest.split("[", 1)[1].split()[0]
            return 1 if base in self.stack_registers and src and not src[0].isdigit() else 0
        return 0

    # -- linking and sites -----------------------------------------------------------
    goto_nop = bytes.fromhex("0f1f440000")  # nopl 0x0(%rax,%rax,1): one NOP, the length of a jmp rel32
    relative_reloc = 8  # R_X86_64_RELATIVE
    kernel_base = 0xFFFFFFFF80000000

    def breakpoint(self, length: int) -> bytes:
        return b"\xcc"

    def match_site(self, code: bytes, site: int, form: str, length: int, stub: int, read_pointer) -> int | None:
        if length == 5 and form != COND:  # the common case first: call/jmp rel32, compared as integers
            ok = (len(code) >= 5 and code[0] == (0xE8 if form == CALL else 0xE9)
                  and (site + 5 + int.from_bytes(code[1:5], "little", signed=True)) & self.mask == stub)
            return 5 if ok else None
        code = bytes(code[:length])
        b = branch_at(code, got=self.rip_got)
        if len(code) != length or b is None or b.form != form:
            return None
        if b.length != length and not (length == 6 and b.what == "jmp rel32" and code[5] == 0x90):
            return None  # ... GNU ld relaxes `jmp *GOT` to jmp rel32 and a nop: the 6 bytes stay the site's
        to = (site + b.length + _field(code, b)) & self.mask
        if b.got:
            try:
                return length if read_pointer(to) == stub else None
            except Exception:
                return None
        return length if to == stub else None

    clock_name = "tsc"
    # The System V ABI; int3 raises interrupt 3. rdtsc leaves the clock in edx:eax, made one register.
    emulator = EmulatorFacts(("UC_ARCH_X86", "UC_MODE_64"), ("x86_const", "UC_X86_REG_"), "rip", "rsp", ("rax",),
                             ("rdi", "rsi", "rdx", "rcx", "r8", "r9"), flags="eflags", traps=frozenset({3}),
                             return_insn=b"\xc3",
                             clock=bytes.fromhex("0f31 48c1e220 4809d0"),  # rdtsc; shl rdx, 32; or rax, rdx
                             load_word=(b"\x48\xa1", b"\xc3"))  # movabs rax, [address]; ret

    def trap_site(self, pc: int) -> int:
        return pc - 1  # int3 traps with the PC after it


ARCH = X86_64()
