"""i386: call/jmp rel32 sites like x86-64, cdecl arguments on the stack, a kernel at 0xc0000000."""

from __future__ import annotations

from sdtgen.arch.base import EmulatorFacts, QemuMachine, Toolchain
from sdtgen.arch.x86_64 import X86_64

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at start-up
if TYPE_CHECKING:
    from typing import ClassVar

_RELOC_NAMES = """
    NONE 32 PC32 GOT32 PLT32 COPY GLOB_DAT JUMP_SLOT RELATIVE GOTOFF GOTPC 32PLT 12 13 TLS_TPOFF TLS_IE TLS_GOTIE
    TLS_LE TLS_GD TLS_LDM 16 PC16 8 PC8 TLS_GD_32 TLS_GD_PUSH TLS_GD_CALL TLS_GD_POP TLS_LDM_32 TLS_LDM_PUSH
    TLS_LDM_CALL TLS_LDM_POP TLS_LDO_32 TLS_IE_32 TLS_LE_32 TLS_DTPMOD32 TLS_DTPOFF32 TLS_TPOFF32 SIZE32
    TLS_GOTDESC TLS_DESC_CALL TLS_DESC IRELATIVE GOT32X
"""
R_386_32, R_386_PC32, R_386_PLT32, R_386_GOT32X = 1, 2, 4, 43


class I386(X86_64):
    name = "i386"
    title = "i386"
    order = 1
    machine = 3
    bits = 32
    toolchain = Toolchain("i686-linux-gnu", ("i386", "i486", "i586", "i686"), "i686-linux-gnu-",
                          "gcc-i686-linux-gnu", "binutils-i686-linux-gnu", ("-mno-sse", "-mno-mmx"), "elf32-i386",
                          "i386", "where 32-bit kernels sit")
    # pc, booted as Multiboot v1 (which takes only 32-bit ELF); paging stays off.
    qemu = QemuMachine("qemu-system-i386", "qemu-system-x86", "pc",
                       ("-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"), exit_ok=1)

    reloc_names: ClassVar[dict[int, str]] = dict(enumerate(f"R_386_{n}" for n in _RELOC_NAMES.split()))
    data_relocs: ClassVar[dict[int, tuple[int, bool]]] = {1: (4, False), 2: (4, True)}  # R_386_32, PC32
    # Its own relocations, read by the x86 classify(): rel32 fields and absolute words; no GOT-slot branches,
    # since i386 has no RIP-relative addressing.
    branch_relocs = frozenset({R_386_PC32, R_386_PLT32})
    got_relocs = frozenset()
    understood = branch_relocs | {R_386_32}
    rip_got = False
    relative_reloc = 8  # R_386_RELATIVE
    kernel_base = 0xC0000000

    # cdecl: every argument on the stack, a 64-bit value returned in edx:eax (rdtsc's own registers).
    emulator = EmulatorFacts(("UC_ARCH_X86", "UC_MODE_32"), ("x86_const", "UC_X86_REG_"), "eip", "esp",
                             ("eax", "edx"), (), flags="eflags", traps=frozenset({3}), return_insn=b"\xc3",
                             clock=bytes.fromhex("0f31"),  # rdtsc
                             load_word=(b"\xa1", b"\xc3"))  # mov eax, [address]; ret

    def capstone(self):
        import capstone

        return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_32)


ARCH = I386()
