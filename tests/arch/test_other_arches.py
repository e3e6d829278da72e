"""i386, AArch64 and RISC-V encodings: assembled by Keystone or GNU as, decoded by Capstone, run in Unicorn."""

from __future__ import annotations

import contextlib
import json

import pytest
from helpers import OTHER_ARCHES, need_tool, run

from sdtgen import arch as arches
from sdtgen.arch.base import CALL, TAIL

BASE = 0x100000


def execute(arch, code: bytes, returns: bool = False) -> int:
    """Run ``code`` then a breakpoint; the PC where it trapped, relative to BASE.

    With ``returns``, the return address (set up the arch's way) points at the breakpoint."""
    import unicorn

    from sdtgen.targets.emulator.cpus import model_of

    cpu = model_of(arch)
    uc = unicorn.Uc(*cpu.unicorn)
    uc.mem_map(BASE, 0x10000)
    stop = BASE + 0x800
    bp = arch.breakpoint(4)
    uc.mem_write(BASE, code + bp)
    uc.mem_write(stop, bp)
    hits = []

    class M:  # the slice of Machine that set_call needs
        def __init__(self):
            self.uc = uc

        def write(self, addr, data):
            uc.mem_write(addr, bytes(data))

    cpu.set_call(M(), BASE, [], stop if returns else BASE + len(code), BASE + 0x8000)
    if cpu.trap_on_invalid:
        uc.hook_add(unicorn.UC_HOOK_INSN_INVALID, lambda uc, u: (hits.append(uc.reg_read(cpu.regs.pc)),
                                                                   uc.emu_stop(), True)[-1])
    else:
        uc.hook_add(unicorn.UC_HOOK_INTR, lambda uc, n, u: (hits.append(arch.trap_site(uc.reg_read(cpu.regs.pc))),
                                                           uc.emu_stop()))
    with contextlib.suppress(unicorn.UcError):
        uc.emu_start(BASE, BASE + 0x1000, timeout=1_000_000)
    return hits[0] - BASE


def keystone_asm(arch_name: str, text: str, addr: int = 0) -> bytes:
    import keystone

    mode = {"i386": (keystone.KS_ARCH_X86, keystone.KS_MODE_32),
            "aarch64": (keystone.KS_ARCH_ARM64, keystone.KS_MODE_LITTLE_ENDIAN)}[arch_name]
    return bytes(keystone.Ks(*mode).asm(text, addr)[0])


def gas_riscv(tmp_path, text: str) -> bytes:
    need_tool("riscv64-linux-gnu-as", "binutils-riscv64-linux-gnu")
    src, obj, raw = tmp_path / "a.s", tmp_path / "a.o", tmp_path / "a.bin"
    # Uncompressed unless asked: `.option rvc` before a c.* instruction.
    src.write_text(".option norelax\n.option norvc\n.text\n" + text + "\n")
    run(["riscv64-linux-gnu-as", "-march=rv64imac", "-o", str(obj), str(src)])
    run(["riscv64-linux-gnu-objcopy", "-O", "binary", "-j", ".text", str(obj), str(raw)])
    return raw.read_bytes()


def test_i386_encodings_agree_with_keystone():
    arch = arches.by_name("i386")
    assert arch.breakpoint(5) == keystone_asm("i386", "int3")
    site, stub = 0xC0001000, 0xC0000040
    assert arch.match_site(keystone_asm("i386", f"call {stub:#x}", site), site, CALL, 5, stub, None) == 5


def test_aarch64_encodings_agree_with_keystone():
    arch = arches.by_name("aarch64")
    assert arch.breakpoint(4) == keystone_asm("aarch64", "brk #0x5d7")
    site, stub = 0xFFFF800008001000, 0xFFFF800008000040
    bl = keystone_asm("aarch64", f"bl {stub:#x}", site)
    b = keystone_asm("aarch64", f"b {stub:#x}", site)
    assert arch.match_site(bl, site, CALL, 4, stub, None) == 4
    assert arch.match_site(b, site, TAIL, 4, stub, None) == 4 and arch.match_site(b, site, CALL, 4, stub, None) is None
    assert arch.decode(bl, site, None).target == stub


def test_riscv_encodings_agree_with_gnu_as(tmp_path):
    arch = arches.by_name("riscv64")
    assert arch.breakpoint(4) == gas_riscv(tmp_path, "ebreak")
    assert arch.breakpoint(2) == gas_riscv(tmp_path, ".option rvc\nc.ebreak")
    # Every relaxed and unrelaxed shape of a call and a tail jump to a target 0x40 back.
    code = gas_riscv(tmp_path, "l: .skip 0x40\nauipc ra, 0\njalr ra, -0x40(ra)\njal ra, l\nauipc t1, 0\n"
                               "jalr zero, -0x4c(t1)\nj l\n.option rvc\nc.j l")[0x40:]
    stub = 0
    assert arch.match_site(code[0:8], 0x40, CALL, 8, stub, None) == 8
    assert arch.match_site(code[8:12], 0x48, CALL, 8, stub, None) == 4
    assert arch.match_site(code[12:20], 0x4C, TAIL, 8, stub, None) == 8
    assert arch.match_site(code[20:24], 0x54, TAIL, 8, stub, None) == 4
    assert arch.match_site(code[24:26], 0x58, TAIL, 8, stub, None) == 2
    assert arch.match_site(code[8:12], 0x48, TAIL, 8, stub, None) is None


@pytest.mark.parametrize("name", OTHER_ARCHES)
def test_breakpoints_trap_at_the_site(name):
    arch = arches.by_name(name)
    expected = {"i386": {"int3"}, "aarch64": {"brk"}, "riscv64": {"ebreak", "c.ebreak"}}[name]
    for n in ((2, 4) if name == "riscv64" else (4,)):
        bp = arch.breakpoint(n)
        assert len(bp) == (2 if n == 2 else len(arch.breakpoint(4)))
        (insn,) = arch.disassembler().disasm(bp, 0)
        assert insn.mnemonic in expected and insn.size == len(bp)
        nop = {"i386": b"\x90" * 4, "aarch64": bytes.fromhex("1f2003d5"), "riscv64": bytes.fromhex("13000000")}[name]
        assert execute(arch, nop + bp) == 4  # trapped on the breakpoint after one NOP


def test_i386_classifies_its_own_relocations(tmp_path):
    """i686 gcc -fPIC: a PLT32 call is a site; -fno-plt's `call *x@GOT(%ebx)` (R_386_GOT32X) is refused by name."""
    from helpers import cross_tool, readelf_probe_relocs, sdtgen

    gcc = cross_tool("i386", "gcc")
    src = tmp_path / "a.c"
    src.write_text("extern void __dtrace_sdt_raw_x(long);\nlong f(long x) { __dtrace_sdt_raw_x(x); return x + 1; }\n")
    for flags, name in ((["-fPIC"], "plt"), (["-fPIC", "-fno-plt"], "got")):
        run([gcc, "-O2", *flags, "-c", "-o", str(tmp_path / f"{name}.o"), str(src)])
    ((_, offset, rtype, _),) = readelf_probe_relocs(tmp_path / "plt.o")
    assert rtype == "R_386_PLT32"
    site = json.loads(sdtgen("scan", tmp_path / "plt.o", "--json", check=True).stdout)["sites"]
    assert [(s["offset"], s["length"], s["form"], s["reloc"]) for s in site] == [(offset - 1, 5, CALL, rtype)]
    ((_, _, got, _),) = readelf_probe_relocs(tmp_path / "got.o")
    proc = sdtgen("scan", tmp_path / "got.o")
    assert got == "R_386_GOT32X" and proc.returncode == 2 and "R_386_GOT32X" in proc.stderr
