"""Every encoding the C runtime emits (sdt_arch_encode, run in Unicorn as the architecture's gcc built it)
is what GNU as and ld make of the same instruction, decodes in Capstone as that instruction, and does it
when Unicorn executes it: for every form, size and state, and for branch arming at every class of distance
up to each encoding's limits and just past them, where GNU refuses too and the runtime has no encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from helpers import ARCHES, cross_tool, run
from runtime_support import ENCODE, ArchImage

from sdtgen.layout import FORMS, VALUES

OFF, TRAP, BRANCH = VALUES["SDT_SITE_OFF"], VALUES["SDT_SITE_TRAP"], VALUES["SDT_SITE_BRANCH"]
STATES = {"off": OFF, "trap": TRAP, "branch": BRANCH}
AS_FLAGS = {"x86_64": ["--64"], "i386": ["--32"], "aarch64": [], "riscv64": ["-march=rv64gc"]}
X86_CC = ("o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g")
BREAKPOINT = {"x86_64": "int3", "i386": "int3", "aarch64": "brk #0x5d7", "riscv64": "ebreak"}


@dataclass
class Case:
    """One encoding: ``asm`` is the instruction GNU as assembles at the site (``T``: the target, ``U``: the
    stub); ``overlay``: the breakpoint over the first byte of that (x86 trap arming)."""

    form: str
    size: int
    state: str
    asm: str
    distance: int = 0x40  # target - site for a branch
    cc: int = 0  # x86 conditional sites: the condition
    overlay: bool = False
    local: bool = False  # a c.j GNU as resolves itself: the target is a label .skip bytes away

    @property
    def branches(self) -> bool:
        return self.state == "branch" and self.form != "isen"


def bit_by_bit(low: int, high: int) -> list[int]:
    """A distance with each one bit of the immediate set alone, either sign: every bit lands somewhere of its
    own (FreeBSD's 2024 RISC-V encoder scrambled most jump offsets; a few distances did not show it)."""
    return [sign * (1 << k) for k in range(low, high + 1) for sign in (1, -1)]


# -- what each architecture's site becomes, as assembly --------------------------------------------
def x86_cases(bits: int) -> list[Case]:
    prefix = ["cs"]
    nop = {5: "{disp8} nopl 0x0(%eax,%eax,1)" if bits == 32 else "{disp8} nopl 0x0(%rax,%rax,1)",
           6: "{disp8} nopw 0x0(%eax,%eax,1)" if bits == 32 else "{disp8} nopw 0x0(%rax,%rax,1)"}
    tail_off = {5: "ret\n{disp8} nopl 0x0(%eax)" if bits == 32 else "ret\n{disp8} nopl 0x0(%rax)",
                6: "ret\n" + nop[5]}
    out = []
    for size in (5, 6):
        pre = "\n".join(prefix * (size - 5))
        out += [Case("call", size, "off", nop[size]), Case("call", size, "trap", nop[size], overlay=True),
                Case("tail", size, "off", tail_off[size]), Case("tail", size, "trap", tail_off[size], overlay=True),
                Case("isen", size, "off", "\n".join(prefix * (size - 2) + ["xor %eax,%eax"])),
                Case("isen", size, "trap", "\n".join([*prefix * (size - 5), "mov $1,%eax"])),
                Case("isen", size, "branch", "\n".join([*prefix * (size - 5), "mov $1,%eax"]))]
        # rel32 measured from the end of the site: 0, +-1, +-2, far, and the limits of a signed 32-bit field
        rels = [0, 1, -1, 2, -2, 0x12345, -0x76543, 0x7FFFFFFF, -0x80000000, *bit_by_bit(0, 30)]
        rels += [0x80000000, -0x80000001, 0x80000001, -0x80000002] if bits == 64 else [0x80000000, 0xFFFFFFF0]
        for rel in rels:
            out += [Case("call", size, "branch", f"{pre}\ncall T", size + rel),
                    Case("tail", size, "branch", f"{pre}\njmp T", size + rel)]
            if size == 5:  # an asm goto's one 5-byte NOP becomes a jmp rel32 to its target
                out.append(Case("goto", 5, "branch", "jmp T", 5 + rel))
    out += [Case("goto", 5, "off", nop[5]), Case("goto", 5, "trap", nop[5], overlay=True)]
    for cc, name in enumerate(X86_CC):
        jcc = f"{{disp32}} j{name} U"
        out += [Case("cond", 6, "off", jcc, cc=cc), Case("cond", 6, "trap", jcc, cc=cc, overlay=True),
                Case("cond", 6, "branch", f"{{disp32}} j{name} T", 6 + 0x1234 + cc, cc=cc)]
    for rel in (0, -1, 0x7FFFFFFF, -0x80000000, *((0x80000000, -0x80000001) if bits == 64 else ())):
        out.append(Case("cond", 6, "branch", "{disp32} jne T", 6 + rel, cc=5))
    return out


def aarch64_cases() -> list[Case]:
    out = [Case("call", 4, "off", "nop"), Case("call", 4, "trap", "brk #0x5d7"), Case("tail", 4, "off", "ret"),
           Case("tail", 4, "trap", "brk #0x5d7"), Case("isen", 4, "off", "movz w0, #0"),
           Case("isen", 4, "trap", "movz w0, #1"), Case("isen", 4, "branch", "movz w0, #1"),
           Case("goto", 4, "off", "nop"), Case("goto", 4, "trap", "brk #0x5d7")]
    # +-128 MiB in words; unaligned targets no b/bl reaches
    for d in (0, 4, -4, 8, 0x12344, -0x7654320, (1 << 27) - 4, -(1 << 27), 1 << 27, -(1 << 27) - 4, 2, -2, 1, 3,
              *bit_by_bit(2, 26)):
        out += [Case("call", 4, "branch", "bl T", d), Case("tail", 4, "branch", "b T", d),
                Case("goto", 4, "branch", "b T", d)]
    return out


def riscv64_cases() -> list[Case]:
    out = []
    for size in (4, 8):
        nop = "\nnop" if size == 8 else ""
        out += [Case("call", size, "off", "nop" + nop), Case("call", size, "trap", "ebreak" + nop),
                Case("tail", size, "off", "ret" + nop), Case("tail", size, "trap", "ebreak" + nop),
                Case("isen", size, "off", "li a0, 0" + nop), Case("isen", size, "trap", "li a0, 1" + nop),
                Case("isen", size, "branch", "li a0, 1" + nop)]
        # jal: +-1 MiB in halfwords
        for d in (0, 2, -2, 4, 0x12346, -0x76542, (1 << 20) - 2, -(1 << 20), 1 << 20, -(1 << 20) - 2, 1, -1, 3,
                  *bit_by_bit(1, 19)):
            out += [Case("call", size, "branch", f"jal ra, T{nop}", d),
                    Case("tail", size, "branch", f"jal zero, T{nop}", d)]
            if size == 4:  # an asm goto's 4-byte nop becomes j (jal zero) to its target
                out.append(Case("goto", 4, "branch", "jal zero, T", d))
    out += [Case("goto", 4, "off", "nop"), Case("goto", 4, "trap", "ebreak")]
    out += [Case("tail", 2, "off", "c.jr ra"), Case("tail", 2, "trap", "c.ebreak")]
    # c.j: +-2 KiB in halfwords; GNU as makes a farther c.j a 4-byte jal, an odd one is an error
    for d in (0, 2, -2, 0x7E, -0x100, 2046, -2048, 2048, -2050, -1, 2045, -2047, *bit_by_bit(2, 10)):
        out.append(Case("tail", 2, "branch", "c.j T", d, local=True))
    return out


def cases_for(arch: str) -> list[Case]:
    return {"x86_64": lambda: x86_cases(64), "i386": lambda: x86_cases(32), "aarch64": aarch64_cases,
            "riscv64": riscv64_cases}[arch]()


MASK = {"x86_64": (1 << 64) - 1, "i386": (1 << 32) - 1, "aarch64": (1 << 64) - 1, "riscv64": (1 << 64) - 1}
# Sites at addresses low enough for Unicorn to map on either side of the farthest target.
BASE = {"x86_64": 0x1_0000_0000, "i386": 0x1000_0000, "aarch64": 0x1000_0000, "riscv64": 0x1000_0000}
SPACING = 0x100
LOCAL_BASE = 0x2000_0000  # the c.j sections, each with its .skip


@dataclass
class Placed:
    case: Case
    site: int
    target: int
    stub: int
    gnu: bytes | None  # what GNU as and ld put at the site (None: they refused)


def assemble_cases(tmp, arch: str, cases: list[Case]) -> tuple[list[Placed], bytes]:
    """All cases in one link, one section each; ld keeps going past a relocation it cannot fit
    (--noinhibit-exec) and names the section, so each case knows whether GNU encoded it."""
    from elftools.elf.elffile import ELFFile

    gas, ld = cross_tool(arch, "as"), cross_tool(arch, "ld")
    mask = (1 << (32 if arch == "i386" else 64)) - 1
    text = [".option norelax", ".option norvc"] if arch == "riscv64" else []
    script, sites = ["SECTIONS {", f"  .bp {BASE[arch] - 0x1000:#x} : {{ *(.bp) }}"], []
    text += [".section .bp, \"ax\"", BREAKPOINT[arch]]
    for i, c in enumerate(cases):
        text.append(f".section .t{i}, \"ax\"")
        if arch == "riscv64":
            text.append(".option rvc" if c.size == 2 else ".option norvc")
        if c.local:
            addr = LOCAL_BASE + i * 0x2000
            if c.distance > 0:
                text += [f"s{i}:", c.asm.replace("T", f"t{i}"), f".skip {c.distance - 2}" if c.distance > 2 else "",
                         f"t{i}:"]
            elif c.distance == 0:
                text += [f"s{i}:", f"t{i}:", c.asm.replace("T", f"t{i}")]
            else:
                text += [f"t{i}:", f".skip {-c.distance}", f"s{i}:", c.asm.replace("T", f"t{i}")]
        else:
            addr = BASE[arch] + i * SPACING
            site = addr
            text += [f"s{i}:", c.asm.replace("T", f"t{i}").replace("U", f"u{i}")]
            script += [f"  t{i} = {(site + c.distance) & mask:#x};", f"  u{i} = {site + 0x40:#x};"]
        script.append(f"  .t{i} {addr:#x} : {{ *(.t{i}) }}")
        sites.append(addr)
    script.append("}")
    (tmp / "cases.s").write_text("\n".join(text) + "\n")
    (tmp / "cases.ld").write_text("\n".join(script) + "\n")
    run([gas, *AS_FLAGS[arch], "-o", str(tmp / "cases.o"), str(tmp / "cases.s")])
    proc = run([ld, "--noinhibit-exec", "--no-relax", "-T", str(tmp / "cases.ld"), "-o", str(tmp / "cases.elf"),
                str(tmp / "cases.o")], check=False)
    assert (tmp / "cases.elf").exists(), proc.stderr
    with open(tmp / "cases.elf", "rb") as f:
        elf = ELFFile(f)
        syms = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
        bp = elf.get_section_by_name(".bp").data()
        placed = []
        for i, c in enumerate(cases):
            sec = elf.get_section_by_name(f".t{i}")
            at = syms[f"s{i}"] - sec["sh_addr"]
            data = sec.data()[at:at + c.size]
            site = syms[f"s{i}"]
            # the target the case means; GNU's is its label, which GNU as moves when it makes a c.j a jal
            target = (site + c.distance) & MASK[arch] if c.branches or c.form == "cond" else 0
            p = Placed(c, site, target, syms.get(f"u{i}", 0), data)
            if c.branches and (syms[f"t{i}"] != target or not gnu_reaches(arch, p)):
                p.gnu = None
            placed.append(p)
    return placed, bp


def gnu_reaches(arch: str, p: Placed) -> bool:
    """Whether GNU's branch at the site is one instruction of the case's kind that reaches the target: ld
    reports a relocation it cannot fit (and then stops naming them), a veneer is not the target, and
    GNU as makes a c.j that does not reach a 4-byte jal."""
    insns = list(capstone_for(arch).disasm(p.gnu, p.site, 1))
    if not insns or insns[0].size != p.case.size - (4 if p.case.size == 8 else 0):
        return False
    imm = insns[0].operands[-1].imm
    return (p.site + imm if arch == "riscv64" else imm) & MASK[arch] == p.target


def encode(img: ArchImage, placed: list[Placed]) -> list[bytes | None]:
    keep = {"cond": lambda c: 0x80 | c.cc}
    # An asm goto's jump goes to its own target, which the runtime passes where the stub goes (the recorder,
    # given as the case's stub here, must play no part in it).
    rows = [(p.site, p.target if p.case.form == "goto" else p.stub, p.stub if p.case.form == "goto" else p.target,
             FORMS[p.case.form], p.case.size, STATES[p.case.state], keep.get(p.case.form, lambda c: 0)(p.case),
             0xEEEE, 0, b"\xee" * 16) for p in placed]
    out = []
    for p, r in zip(placed, img.cases("sdt_test_encode", ENCODE, rows), strict=True):
        ret, data = r[7], r[9]
        assert ret in (0, p.case.size), (p.case, ret)
        out.append(data[:ret] if ret else None)
    return out


# -- Capstone: one instruction (x86's prefixes included), going where it should --------------------
def capstone_for(arch: str):
    import capstone as cs

    mode = {"x86_64": (cs.CS_ARCH_X86, cs.CS_MODE_64), "i386": (cs.CS_ARCH_X86, cs.CS_MODE_32),
            "aarch64": (cs.CS_ARCH_ARM64, cs.CS_MODE_ARM),
            "riscv64": (cs.CS_ARCH_RISCV, cs.CS_MODE_RISCV64 | cs.CS_MODE_RISCVC)}[arch]
    md = cs.Cs(*mode)
    md.detail = True
    return md


MNEMONICS = {
    "x86": {("call", "off"): {"nop"}, ("tail", "off"): {"ret"}, ("isen", "off"): {"xor"}, ("isen", "trap"): {"mov"},
            ("isen", "branch"): {"mov"}, ("call", "branch"): {"call"}, ("tail", "branch"): {"jmp"},
            ("goto", "off"): {"nop"}, ("goto", "branch"): {"jmp"}},
    "aarch64": {("call", "off"): {"nop"}, ("tail", "off"): {"ret"}, ("isen", "off"): {"mov"},
                ("isen", "trap"): {"mov"}, ("isen", "branch"): {"mov"}, ("call", "branch"): {"bl"},
                ("tail", "branch"): {"b"}, ("call", "trap"): {"brk"}, ("tail", "trap"): {"brk"},
                ("goto", "off"): {"nop"}, ("goto", "branch"): {"b"}, ("goto", "trap"): {"brk"}},
    "riscv64": {("call", "off"): {"nop"}, ("tail", "off"): {"ret", "c.jr"}, ("isen", "off"): {"addi", "li", "mv"},
                ("isen", "trap"): {"addi", "li"}, ("isen", "branch"): {"addi", "li"}, ("call", "branch"): {"jal"},
                ("tail", "branch"): {"j", "c.j"}, ("call", "trap"): {"ebreak"},
                ("tail", "trap"): {"ebreak", "c.ebreak"}, ("goto", "off"): {"nop"}, ("goto", "branch"): {"j"},
                ("goto", "trap"): {"ebreak"}},
}


def check_capstone(arch: str, p: Placed, code: bytes) -> None:
    md = capstone_for(arch)
    x86_trap = arch in ("x86_64", "i386") and p.case.state == "trap" and p.case.form != "isen"
    insns = list(md.disasm(code[:1] if x86_trap else code, p.site))
    assert sum(i.size for i in insns) == (1 if x86_trap else len(code)), (p.case, insns)
    first = insns[0]
    family = "x86" if arch in ("x86_64", "i386") else arch
    if family == "x86":
        assert len(insns) == 1 or p.case.state == "trap" or p.case.form == "tail", (p.case, insns)
        if p.case.state == "trap" and p.case.form != "isen":
            assert first.mnemonic == "int3" and first.size == 1
            return
        if p.case.form == "cond":
            assert (first.mnemonic, first.size) == (f"j{X86_CC[p.case.cc]}", 6)
        else:
            assert first.mnemonic in MNEMONICS[family][(p.case.form, p.case.state)], (p.case, first.mnemonic)
    else:
        assert first.mnemonic in MNEMONICS[family][(p.case.form, p.case.state)], (p.case, first.mnemonic)
        assert all(i.mnemonic == "nop" for i in insns[1:])
    if p.case.branches or p.case.form == "cond":
        imm = first.operands[-1].imm
        target = (p.site + imm if arch == "riscv64" else imm) & ((1 << (32 if arch == "i386" else 64)) - 1)
        assert target == (p.target if p.case.state == "branch" else p.stub), (p.case, hex(target))


# -- Unicorn: run it ---------------------------------------------------------------------------------
RETURN_TO = 0x3000_0000  # where a ret goes (x86: on the stack; elsewhere: the link register)
STACK = 0x3800_0000


def execute(arch: str, p: Placed, code: bytes, taken: bool = True) -> dict:
    """Run the site's instructions (prefixes and all) from the site: where the CPU went, what it trapped on,
    the result register, and the return address a call left."""
    import unicorn as uc
    from unicorn import arm64_const as A
    from unicorn import riscv_const as R
    from unicorn import x86_const as X

    mode = {"x86_64": (uc.UC_ARCH_X86, uc.UC_MODE_64), "i386": (uc.UC_ARCH_X86, uc.UC_MODE_32),
            "aarch64": (uc.UC_ARCH_ARM64, uc.UC_MODE_ARM), "riscv64": (uc.UC_ARCH_RISCV, uc.UC_MODE_RISCV64)}[arch]
    mu = uc.Uc(*mode)
    # each page touched and the one after it (Unicorn's x86 translation reads on past a jump's target)
    pages = {(a & ~0xFFF) + k for a in (p.site, p.site + len(code), p.target, p.stub, RETURN_TO, STACK - 8)
             for k in (0, 0x1000)}
    for page in sorted(pages):
        mu.mem_map(page, 0x1000)
    mu.mem_write(p.site, code)
    trapped = []

    def on_intr(mu, intno, _):
        trapped.append((intno, pc(mu)))
        mu.emu_stop()

    def on_invalid(mu, _):
        trapped.append(("invalid", pc(mu)))
        return False

    mu.hook_add(uc.UC_HOOK_INTR, on_intr)
    mu.hook_add(uc.UC_HOOK_INSN_INVALID, on_invalid)
    word = 4 if arch == "i386" else 8
    if arch in ("x86_64", "i386"):
        sp_reg, pc_reg, ret_reg = ((X.UC_X86_REG_RSP, X.UC_X86_REG_RIP, X.UC_X86_REG_RAX) if word == 8 else
                                   (X.UC_X86_REG_ESP, X.UC_X86_REG_EIP, X.UC_X86_REG_EAX))
        mu.mem_write(STACK - word, RETURN_TO.to_bytes(word, "little"))
        mu.reg_write(sp_reg, STACK - word)
        mu.reg_write(ret_reg, (1 << (8 * word)) - 1)
        mu.reg_write(X.UC_X86_REG_EFLAGS, 2 | (_x86_flags_for(p.case.cc, taken) if p.case.form == "cond" else 0))
        link = None
    elif arch == "aarch64":
        sp_reg, pc_reg, ret_reg, link = A.UC_ARM64_REG_SP, A.UC_ARM64_REG_PC, A.UC_ARM64_REG_X0, A.UC_ARM64_REG_X30
    else:
        sp_reg, pc_reg, ret_reg, link = R.UC_RISCV_REG_SP, R.UC_RISCV_REG_PC, R.UC_RISCV_REG_A0, R.UC_RISCV_REG_RA
    if link is not None:
        mu.reg_write(sp_reg, STACK)
        mu.reg_write(link, RETURN_TO)
        mu.reg_write(ret_reg, (1 << 64) - 1)

    def pc(mu):
        return mu.reg_read(pc_reg)

    # RISC-V's 8-byte sites keep their second NOP: a CPU that does not branch away runs it too
    count = 2 if len(code) == 8 and (p.case.form == "isen" or (p.case.form, p.case.state) == ("call", "off")) else 1
    try:
        mu.emu_start(p.site, 0, 0, count)
    except uc.UcError as e:
        if not trapped:
            raise AssertionError(f"{p.case} at {p.site:#x}: {e} at {pc(mu):#x}") from None
    out = {"pc": pc(mu), "trapped": trapped, "ret": mu.reg_read(ret_reg), "sp": mu.reg_read(sp_reg)}
    if arch in ("x86_64", "i386"):
        sp = mu.reg_read(sp_reg)
        out["pushed"] = int.from_bytes(mu.mem_read(sp, word), "little") if sp == STACK - 2 * word else None
    else:
        out["link"] = mu.reg_read(link)
    return out


def _x86_flags_for(cc: int, taken: bool) -> int:
    """EFLAGS (CF PF ZF SF OF) under which Intel's jcc ``cc`` is (or is not) taken, found by trying them all."""
    for bits in range(32):
        cf, pf, zf, sf, of = (bits >> i & 1 for i in range(5))
        r = [of, cf, zf, cf | zf, sf, pf, sf != of, zf | (sf != of)][cc >> 1]
        if bool(r) ^ bool(cc & 1) == taken:
            return cf | pf << 2 | zf << 6 | sf << 7 | of << 11
    raise AssertionError(cc)


def check_execution(arch: str, p: Placed, code: bytes) -> None:
    c, x86 = p.case, arch in ("x86_64", "i386")
    mask = (1 << (32 if arch == "i386" else 64)) - 1
    end = (p.site + c.size) & mask
    r = execute(arch, p, code)
    if c.state == "trap" and c.form != "isen":
        assert r["trapped"] and r["trapped"][0][1] == (p.site + 1 if x86 else p.site), (c, r)
        if x86:
            assert r["trapped"][0][0] == 3
        return
    assert not r["trapped"], (c, r)
    if c.form == "isen":
        assert (r["ret"], r["pc"]) == (0 if c.state == "off" else 1, end), (c, r)
    elif c.form == "call" and c.state == "off":
        assert r["pc"] == end
    elif c.form == "goto":  # the NOP falls through; armed, a plain jump: no stack, link or result touched
        assert r["pc"] == (end if c.state == "off" else p.target), (c, r)
        assert r["sp"] == (STACK - (4 if arch == "i386" else 8) if x86 else STACK), (c, r)
        assert r["ret"] == (1 << (32 if arch == "i386" else 64)) - 1, (c, r)
        assert x86 or r["link"] == RETURN_TO, (c, r)
    elif c.form == "tail" and c.state == "off":
        assert r["pc"] == RETURN_TO
    elif c.form == "call":
        assert r["pc"] == p.target
        assert (r["pushed"] if x86 else r["link"]) == (end if x86 else p.site + 4), (c, r)
    elif c.form == "tail":
        assert r["pc"] == p.target
        assert r["sp"] == (STACK - (4 if arch == "i386" else 8) if x86 else STACK)
        if not x86:
            assert r["link"] == RETURN_TO
    else:  # cond: taken to the stub (disarmed) or the recorder (armed); not taken, past it
        assert r["pc"] == (p.target if c.state == "branch" else p.stub), (c, r)
        assert execute(arch, p, code, taken=False)["pc"] == end


@pytest.fixture(scope="module")
def encoded(arch_image, tmp_path_factory):
    done = {}

    def get(arch: str):
        if arch not in done:
            img = arch_image(arch)
            placed, bp = assemble_cases(tmp_path_factory.mktemp(f"enc-{arch}"), arch, cases_for(arch))
            done[arch] = placed, encode(img, placed), bp
        return done[arch]

    return get


@pytest.mark.parametrize("arch", ARCHES)
def test_every_encoding_is_what_gnu_as_and_ld_make_of_the_instruction(encoded, arch):
    placed, ours, bp = encoded(arch)
    assert any(o is not None for o in ours) and (arch == "i386" or any(o is None for o in ours))
    for p, code in zip(placed, ours, strict=True):
        want = p.gnu
        if want is not None and p.case.overlay:
            want = bp[:1] + want[1:]
        if want is not None and p.case.branches and arch == "aarch64":
            md = capstone_for(arch)
            if next(md.disasm(want, p.site)).operands[-1].imm != p.target:
                want = None  # GNU ld reached it only through a veneer: no direct branch exists
        assert code == want, (p.case, p.site, p.target, code and code.hex(), want and want.hex())


@pytest.mark.parametrize("arch", ARCHES)
def test_every_encoding_decodes_in_capstone_as_its_instruction(encoded, arch):
    placed, ours, _ = encoded(arch)
    for p, code in zip(placed, ours, strict=True):
        if code is not None:
            check_capstone(arch, p, code)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_encoding_does_its_job_when_unicorn_runs_it(encoded, arch):
    placed, ours, _ = encoded(arch)
    for p, code in zip(placed, ours, strict=True):
        if code is not None:
            check_execution(arch, p, code)


@pytest.mark.parametrize("arch", ARCHES)
def test_branch_distances_reach_each_limit_and_not_past_it(encoded, arch):
    """The limits themselves are encoded, one step past them is not (on i386 rel32 reaches everything)."""
    placed, ours, _ = encoded(arch)
    got = {(p.case.form, p.case.size, (p.target - p.site) & MASK[arch]): code is not None
           for p, code in zip(placed, ours, strict=True) if p.case.branches and p.case.form != "cond"}
    limits = {"x86_64": [(s, s + 0x7FFFFFFF, True) for s in (5, 6)] + [(s, s - 0x80000000, True) for s in (5, 6)]
              + [(s, s + 0x80000000, False) for s in (5, 6)] + [(s, s - 0x80000001, False) for s in (5, 6)],
              "i386": [(s, s + 0x80000000, True) for s in (5, 6)],
              "aarch64": [(4, (1 << 27) - 4, True), (4, -(1 << 27), True), (4, 1 << 27, False),
                          (4, -(1 << 27) - 4, False), (4, 2, False)],
              "riscv64": [(s, (1 << 20) - 2, True) for s in (4, 8)] + [(s, -(1 << 20), True) for s in (4, 8)]
              + [(s, 1 << 20, False) for s in (4, 8)] + [(s, 1, False) for s in (4, 8)]
              + [(2, 2046, True), (2, -2048, True), (2, 2048, False), (2, -2050, False), (2, -1, False)]}[arch]
    goto_size = {"x86_64": 5, "i386": 5, "aarch64": 4, "riscv64": 4}[arch]  # an asm goto's one NOP
    for size, d, reachable in limits:
        for form in ("call", "tail", "goto"):
            if (form == "call" and size == 2) or (form == "goto" and size != goto_size):
                continue
            assert got[(form, size, d & MASK[arch])] == reachable, (form, size, d)


@pytest.mark.parametrize("arch", ARCHES)
def test_a_disabled_form_the_architecture_calls_fixed_is_the_same_bytes_at_every_site(encoded, arch_image, arch):
    """sdt_init encodes a run of sites of one form and size once when sdt_arch_off_is_fixed says their disabled
    form does not depend on the site: at other sites, stubs, recorders and kept bytes it must be the bytes GNU
    as gave for the case (x86's conditional tail keeps its own displacement, so it must not say so)."""
    placed, ours, _ = encoded(arch)
    img = arch_image(arch)
    fixed = {name: img.machine.call(img.symbols["sdt_test_off_is_fixed"], [form]) & 0xFFFFFFFF
             for name, form in FORMS.items()}
    assert any(fixed.values())
    checked = 0
    for p, code in zip(placed, ours, strict=True):
        c = p.case
        if c.state != "off" or code is None:
            continue
        rows = []
        for k in range(1, 9):  # elsewhere: other sites (aligned as the case's), stubs, recorders and kept bytes
            site = (p.site + k * 0x1234 * 4) & MASK[arch]
            keep = 0x80 | (k % 16) if c.form == "cond" else k
            rows.append((site, (site + 0x80 * k) & MASK[arch], (site - 0x40 * k) & MASK[arch], FORMS[c.form],
                         c.size, OFF, keep, 0xEEEE, 0, b"\xee" * 16))
        elsewhere = {r[9][:r[7]] for r in img.cases("sdt_test_encode", ENCODE, rows)}
        if fixed[c.form]:
            assert elsewhere == {code}, (c, code.hex(), [e.hex() for e in elsewhere])
            checked += 1
        else:
            assert len(elsewhere) > 1, c  # not fixed: it does depend on where the site is
    assert checked
