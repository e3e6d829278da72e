"""The probe sites each architecture's toolchain makes, assembled by GNU as and linked (relaxed) by GNU ld
into the test image, with the near misses sdt_arch_verify must refuse.

Each site is a label ``v_<name>``; SITES says what the runtime is told about it (form, the table's length,
the stub it must go to) and what verify must answer: the length of the instruction, or 0.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Site:
    name: str  # the label is v_<name>
    form: str  # call, tail, cond, isen, goto
    length: int  # what the table says
    stub: str  # the symbol it must go to
    size: int  # what verify must return (0: refuse)
    keep: int = 0  # what verify keeps (x86 jcc: its condition byte)


X86_CC = ("o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g")
FAR = 0x0100_0000  # a stub 16 MiB past the sites: out of every short branch's reach


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "\n".join(f"v_{name}:\n{text}" for name, text in pairs) + "\n"


def x86(bits: int) -> tuple[list[tuple[str, str, list[str]]], list[str], list[Site]]:
    flag = f"--{bits}"
    sites: list[Site] = []
    # {disp32}: gas would make a jump to a nearby symbol of its own file 2 bytes long
    plain = [("call5", "call vstub"), ("tail5", "{disp32} jmp vstub"), ("cscall6", "cs\ncall vstub"),
             ("csjmp6", "cs\n{disp32} jmp vstub"), ("isen5", "call visen")]
    sites += [Site("call5", "call", 5, "vstub", 5), Site("tail5", "tail", 5, "vstub", 5),
              Site("cscall6", "call", 6, "vstub", 6), Site("csjmp6", "tail", 6, "vstub", 6),
              Site("isen5", "isen", 5, "visen", 5)]
    plain += [(f"j{cc}", f"{{disp32}} j{cc} vstub") for cc in X86_CC]
    sites += [Site(f"j{cc}", "cond", 6, "vstub", 6, keep=0x80 | i) for i, cc in enumerate(X86_CC)]
    # what GNU ld makes of calls and jumps through the GOT when it can resolve them (relaxation)
    got = "vstub@GOTPCREL(%rip)" if bits == 64 else "vstub@GOT(%ebx)"
    plain += [("gotcall_relaxed", f"call *{got}"), ("gotjmp_relaxed", f"jmp *{got}")]
    # an asm goto's one 5-byte NOP (sdt.h's bytes); near misses: FreeBSD's five 1-byte NOPs (a jump over them
    # would land while a CPU is between two), a 6-byte NOP, the NOP told as 4 or 6 bytes, a call as a goto
    plain += [("goto5", ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00"), ("nop1x5", "nop\nnop\nnop\nnop\nnop"),
              ("nop6", ".byte 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00")]
    sites += [Site("goto5", "goto", 5, "vstub", 5), Site("nop1x5", "goto", 5, "vstub", 0),
              Site("nop6", "goto", 6, "vstub", 0), Site("goto5", "goto", 4, "vstub", 0),
              Site("goto5", "goto", 6, "vstub", 0), Site("call5", "goto", 5, "vstub", 0)]
    sites += [Site("gotcall_relaxed", "call", 6, "vstub", 6), Site("gotjmp_relaxed", "tail", 6, "vstub", 5)]
    # near misses: the wrong opcode for the form, other prefixes, the wrong byte after a relaxed jmp, and a
    # call and a NOP (ld -z call-nop=suffix-nop): never written as one 6-byte instruction (the NOP may be a
    # branch target); the runtime leaves it alone and reports it
    plain += [("dscall6", ".byte 0x3e\ncall vstub"), ("addr32jmp6", ".byte 0x67\n{disp32} jmp vstub"),
              ("jmpint3", "{disp32} jmp vstub\nint3"),
              ("jshort", "jne vstub_short\nnop\nnop\nnop\nnop\nvstub_short: ret"),
              ("callnop", "call vstub\nnop")]
    sites += [Site("call5", "tail", 5, "vstub", 0), Site("tail5", "call", 5, "vstub", 0),
              Site("cscall6", "tail", 6, "vstub", 0), Site("csjmp6", "call", 6, "vstub", 0),
              Site("cscall6", "call", 5, "vstub", 0), Site("call5", "call", 6, "vstub", 0),
              Site("call5", "call", 4, "vstub", 0), Site("dscall6", "call", 6, "vstub", 0),
              Site("addr32jmp6", "tail", 6, "vstub", 0), Site("jmpint3", "tail", 6, "vstub", 0),
              Site("jne", "cond", 5, "vstub", 0), Site("jne", "call", 6, "vstub", 0),
              Site("jshort", "cond", 6, "vstub_short", 0), Site("gotjmp_relaxed", "call", 6, "vstub", 0),
              Site("callnop", "call", 6, "vstub", 0)]
    sources = [("sites", ".text\n.globl vstub, visen\n" + _labels(plain) + "vstub: ret\nvisen: ret\n", [flag])]
    if bits == 64:
        # without relaxable relocations ld keeps the GOT: the slot must hold the stub
        unrelaxed = [("gotcall", "call *vstub@GOTPCREL(%rip)"), ("gotjmp", "jmp *vstub@GOTPCREL(%rip)"),
                     ("gotcall_other", "call *vother@GOTPCREL(%rip)")]
        sources.append(("got", ".text\n" + _labels(unrelaxed) + ".globl vother\nvother: ret\n",
                        [flag, "-mrelax-relocations=no"]))
        sites += [Site("gotcall", "call", 6, "vstub", 6), Site("gotjmp", "tail", 6, "vstub", 6),
                  Site("gotcall", "isen", 6, "vstub", 6), Site("gotcall", "tail", 6, "vstub", 0),
                  Site("gotjmp", "call", 6, "vstub", 0), Site("gotcall_other", "call", 6, "vstub", 0)]
    else:  # i386 has no RIP-relative GOT: an unrelaxed call through it is not a site
        unrelaxed = [("gotcall", f"call *{got}")]
        sources.append(("got", ".text\n" + _labels(unrelaxed), [flag, "-mrelax-relocations=no"]))
        sites.append(Site("gotcall", "call", 6, "vstub", 0))
    return sources, [], sites


def aarch64() -> tuple[list[tuple[str, str, list[str]]], list[str], list[Site]]:
    pairs = [("bl", "bl vstub"), ("b", "b vstub"), ("blisen", "bl visen"), ("blfar", "bl vfar"), ("bfar", "b vfar"),
             ("blr", "blr x1"), ("br", "br x16"), ("nop", "nop"), ("yield", "yield")]
    sites = [Site("bl", "call", 4, "vstub", 4), Site("b", "tail", 4, "vstub", 4), Site("blisen", "isen", 4, "visen", 4),
             Site("blfar", "call", 4, "vfar", 4), Site("bfar", "tail", 4, "vfar", 4),
             Site("bl", "tail", 4, "vstub", 0), Site("b", "call", 4, "vstub", 0), Site("bl", "cond", 4, "vstub", 0),
             Site("bl", "call", 8, "vstub", 0), Site("bl", "call", 2, "vstub", 0), Site("blr", "call", 4, "vstub", 0),
             Site("br", "tail", 4, "vstub", 0),
             # an asm goto's nop; near misses: another hint (yield), a branch, the nop told as 8 bytes
             Site("nop", "goto", 4, "vstub", 4), Site("yield", "goto", 4, "vstub", 0), Site("b", "goto", 4, "vstub", 0),
             Site("nop", "goto", 8, "vstub", 0)]
    text = ".text\n.globl vstub, visen\n" + _labels(pairs) + "vstub: ret\nvisen: ret\n"
    return [("sites", text, [])], [f"--defsym=vfar=0x{0xFFFF800008000000 + FAR:x}"], sites


def riscv64() -> tuple[list[tuple[str, str, list[str]]], list[str], list[Site]]:
    relaxed = [("call_relaxed", "call vstub"), ("tail_relaxed", "tail vstub"), ("isen_relaxed", "call visen"),
               ("call_far", "call vfar"), ("tail_far", "tail vfar")]
    exact = [("call8", "call vstub"), ("tail8", "tail vstub"), ("jal", "jal ra, vstub"), ("j", "jal zero, vstub"),
             ("cj", "c.j vstub"),
             # near misses: another link register, an auipc and jalr that do not pair, a jump through t1
             ("jal_t0", "jal t0, vstub"),
             ("call_t0", "1: auipc ra, %pcrel_hi(vstub)\njalr t0, %pcrel_lo(1b)(ra)"),
             ("call_split", "1: auipc t1, %pcrel_hi(vstub)\njalr ra, %pcrel_lo(1b)(t2)"),
             ("jr", "jr t1\nnop"),
             # an asm goto's 4-byte nop; near misses: two c.nop, the nop told as 2 or 8 bytes, a jal as a goto
             ("nop4", ".option push\n.option norvc\nnop\n.option pop"), ("cnop2", "c.nop\nc.nop")]
    sites = [Site("call_relaxed", "call", 8, "vstub", 4), Site("tail_relaxed", "tail", 8, "vstub", 2),
             Site("isen_relaxed", "isen", 8, "visen", 4), Site("call_far", "call", 8, "vfar", 8),
             Site("tail_far", "tail", 8, "vfar", 8), Site("call8", "call", 8, "vstub", 8),
             Site("tail8", "tail", 8, "vstub", 8), Site("jal", "call", 4, "vstub", 4), Site("j", "tail", 4, "vstub", 4),
             Site("cj", "tail", 2, "vstub", 2),
             Site("call8", "tail", 8, "vstub", 0), Site("tail8", "call", 8, "vstub", 0),
             Site("jal", "tail", 4, "vstub", 0), Site("j", "call", 4, "vstub", 0), Site("cj", "call", 2, "vstub", 0),
             Site("call8", "call", 4, "vstub", 0), Site("jal", "call", 2, "vstub", 0),
             Site("call8", "cond", 8, "vstub", 0), Site("jal_t0", "call", 4, "vstub", 0),
             Site("call_t0", "call", 8, "vstub", 0), Site("call_split", "call", 8, "vstub", 0),
             Site("jr", "tail", 8, "vstub", 0), Site("call8", "call", 9, "vstub", 0),
             Site("nop4", "goto", 4, "vstub", 4), Site("cnop2", "goto", 4, "vstub", 0),
             Site("nop4", "goto", 2, "vstub", 0), Site("nop4", "goto", 8, "vstub", 0), Site("j", "goto", 4, "vstub", 0)]
    text = (".text\n.globl vstub, visen\n.option rvc\n" + _labels(relaxed) + ".option norelax\n" + _labels(exact)
            + ".option relax\nvstub: ret\nvisen: ret\n")
    far = f"--defsym=vfar=0x{0xFFFFFFFF80000000 + FAR:x}"
    return [("sites", text, ["-march=rv64imac", "-mabi=lp64"])], [far], sites


def site_forms(arch: str):
    return {"x86_64": lambda: x86(64), "i386": lambda: x86(32), "aarch64": aarch64, "riscv64": riscv64}[arch]()


def site_sources(arch: str):
    sources, ld_flags, _ = site_forms(arch)
    return sources, ld_flags
