"""sdt_setjmp/sdt_longjmp (sdt_setjmp.h, runtime/sdt_setjmp.c): the jump a guarded call needs, for the four
architectures, built with each one's cross gcc and kernel flags, run in Unicorn and natively on x86-64, against
the C library's setjmp; and integer registers only: objdump finds no FP or vector instruction in either, and a
RISC-V kernel that runs with its FPU off (xv6's rv64gc with sstatus.FS off) guards calls with it where GCC's
__builtin_setjmp takes an illegal-instruction trap."""

from __future__ import annotations

import re

import pytest
from helpers import ROOT, cross_tool, run

from sdtgen import arch as arches

INCLUDE = ROOT / "sdtgen" / "include"
SETJMP = ROOT / "sdtgen" / "runtime" / "sdt_setjmp.c"
DRIVER = ROOT / "tests" / "runtime" / "setjmp_driver.c"
COMMON = ["-ffreestanding", "-fno-pic", "-O2", "-fno-asynchronous-unwind-tables", "-fno-stack-protector",
          "-fno-common", "-Wall", "-Wextra"]
# Where the emulated image is linked, and its stack. x86-64 runs low, with the small code model instead of
# the kernel's (Unicorn fetches nothing from the top 2 GiB the kernel model reaches); the jump has no model.
BASE = 0x10000
STACK_TOP = 0x800000
SENTINEL = 0x600000  # the return address check() returns to: the run stops there
SEEDS = (5, 77, 123456)
# i386: Linux's -mregparm=3 too, so the header's regparm(0) is what keeps the arguments on the stack.
EXTRA = {"i386": ["-mregparm=3"]}


def tool(arch: str, name: str) -> str:
    return name if arch == "x86_64" else cross_tool(arch, name)


def kernel_flags(arch: str, emulated: bool = False) -> list[str]:
    flags = [*COMMON, *arches.by_name(arch).toolchain.cflags, *EXTRA.get(arch, [])]
    return [f for f in flags if not (emulated and f == "-mcmodel=kernel")]


def build(arch: str, out, flags: list[str], sources: list) -> None:
    objs = []
    for src in sources:
        obj = out / (src.stem + ".o")
        strict = ["-Werror"] if src == SETJMP else []  # the runtime's file builds warning-free, the driver need not
        run([tool(arch, "gcc"), *flags, *strict, f"-I{INCLUDE}", "-c", "-o", str(obj), str(src)])
        objs.append(str(obj))
    relax = ["--no-relax"] if arch == "riscv64" else []  # no gp-relative data: nothing sets gp here
    run([tool(arch, "ld"), "-static", *relax, "-e", "check", f"-Ttext={BASE:#x}", "-o", str(out / "image.elf"),
         *objs])


def native_answer(tmp_path, seed: int, bits: int) -> int:
    """check(seed) with the C library's setjmp and longjmp, natively; on a 32-bit target, the same arithmetic
    mod 2^32 (every operation check() makes wraps the same way)."""
    exe = tmp_path / "libc-check"
    if not exe.exists():
        run(["gcc", "-O2", "-DNATIVE_LIBC", "-o", str(exe), str(DRIVER)])
    value = int(run([str(exe), str(seed)]).stdout)
    if bits == 32:
        value &= 0xFFFFFFFF
        value -= (value >> 31) << 32
    return value


# The registers a call keeps (its caller's values come back), besides the stack pointer.
CALLEE_SAVED = {
    "x86_64": lambda X, A, R: [X.UC_X86_REG_RBX, X.UC_X86_REG_RBP, *(getattr(X, f"UC_X86_REG_R{n}")
                                                                       for n in range(12, 16))],
    "i386": lambda X, A, R: [X.UC_X86_REG_EBX, X.UC_X86_REG_ESI, X.UC_X86_REG_EDI, X.UC_X86_REG_EBP],
    "aarch64": lambda X, A, R: [getattr(A, f"UC_ARM64_REG_X{n}") for n in range(19, 30)],
    "riscv64": lambda X, A, R: [R.UC_RISCV_REG_S0, R.UC_RISCV_REG_S1,
                                *(getattr(R, f"UC_RISCV_REG_S{n}") for n in range(2, 12))],
}


def machine(arch: str):
    """A Unicorn CPU of ``arch`` with the stack and the page of return addresses mapped."""
    import unicorn as uc

    mode = {"x86_64": (uc.UC_ARCH_X86, uc.UC_MODE_64), "i386": (uc.UC_ARCH_X86, uc.UC_MODE_32),
            "aarch64": (uc.UC_ARCH_ARM64, uc.UC_MODE_ARM), "riscv64": (uc.UC_ARCH_RISCV, uc.UC_MODE_RISCV64)}[arch]
    mu = uc.Uc(*mode)
    mu.mem_map(STACK_TOP - 0x100000, 0x100000)
    mu.mem_map(SENTINEL, 0x1000)
    return mu


class Fault(Exception):
    pass


def emulate(arch: str, image, seed: int) -> int:
    """Run check(seed) of the linked image in Unicorn, as a kernel's caller would: its return value, or Fault
    when the CPU raised an exception."""
    import unicorn as uc
    from elftools.elf.elffile import ELFFile
    from unicorn import arm64_const as A
    from unicorn import riscv_const as R
    from unicorn import x86_const as X

    mu = machine(arch)
    with open(image, "rb") as f:
        elf = ELFFile(f)
        entry = elf.header.e_entry
        loads = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
        start = min(seg["p_vaddr"] for seg in loads) & ~0xFFF
        end = (max(seg["p_vaddr"] + seg["p_memsz"] for seg in loads) + 0xFFF) & ~0xFFF
        mu.mem_map(start, end - start)
        for seg in loads:
            mu.mem_write(seg["p_vaddr"], seg.data())
    faults = []
    mu.hook_add(uc.UC_HOOK_INTR, lambda m, intno, _: (faults.append(intno), m.emu_stop()))
    mu.hook_add(uc.UC_HOOK_INSN_INVALID, lambda m, _: (faults.append("invalid"), m.emu_stop(), False)[-1])
    sp = STACK_TOP - 0x100
    if arch == "x86_64":
        sp -= 8
        mu.mem_write(sp, SENTINEL.to_bytes(8, "little"))
        mu.reg_write(X.UC_X86_REG_RSP, sp)
        mu.reg_write(X.UC_X86_REG_RDI, seed)
        ret = X.UC_X86_REG_RAX
    elif arch == "i386":
        sp -= 8
        mu.mem_write(sp, SENTINEL.to_bytes(4, "little") + seed.to_bytes(4, "little"))
        mu.reg_write(X.UC_X86_REG_ESP, sp)
        mu.reg_write(X.UC_X86_REG_EAX, seed)  # -mregparm=3: check() takes its argument there
        ret = X.UC_X86_REG_EAX
    elif arch == "aarch64":
        mu.reg_write(A.UC_ARM64_REG_SP, sp)
        mu.reg_write(A.UC_ARM64_REG_X30, SENTINEL)
        mu.reg_write(A.UC_ARM64_REG_X0, seed)
        ret = A.UC_ARM64_REG_X0
    else:
        mu.reg_write(R.UC_RISCV_REG_SP, sp)
        mu.reg_write(R.UC_RISCV_REG_RA, SENTINEL)
        mu.reg_write(R.UC_RISCV_REG_A0, seed)
        ret = R.UC_RISCV_REG_A0
    # The caller's values in every register the ABI says a call keeps: check() must give them back, though
    # deep() took them over and never returned (only the jump back restores them).
    kept = {reg: 0x5EED0000 + 0x1111 * i for i, reg in enumerate(CALLEE_SAVED[arch](X, A, R))}
    for reg, value in kept.items():
        mu.reg_write(reg, value)
    try:
        mu.emu_start(entry, SENTINEL, count=5_000_000)
    except uc.UcError as e:
        raise Fault(f"{arch}: {e}") from None
    if faults:
        raise Fault(f"{arch}: exception {faults[0]}")
    changed = {reg: hex(mu.reg_read(reg)) for reg, value in kept.items() if mu.reg_read(reg) != value}
    assert not changed, f"{arch}: callee-saved registers (Unicorn numbers) not given back: {changed}"
    value = mu.reg_read(ret)
    bits = 32 if arch == "i386" else 64
    value &= (1 << bits) - 1
    return value - ((value >> (bits - 1)) << bits)


@pytest.mark.parametrize("arch", arches.names())
def test_the_jump_back_gives_the_value_and_the_callers_registers_and_stack_as_the_c_library_does(arch, tmp_path):
    """check() jumps back from 20-odd frames deep four times (once with 0, which comes back as 1), then
    combines the values it kept in callee-saved registers, whether any frame returned, and whether its stack
    pointer moved: what the C library's setjmp gives natively, the runtime's gives on every architecture."""
    build(arch, tmp_path, kernel_flags(arch, emulated=True), [DRIVER, SETJMP])
    bits = 32 if arch == "i386" else 64
    for seed in SEEDS:
        assert emulate(arch, tmp_path / "image.elf", seed) == native_answer(tmp_path, seed, bits), seed


def direct_jump(arch: str, image) -> tuple[dict[int, int], int, int, int]:
    """The registers as the jump leaves them, called as the ABI calls: sdt_setjmp(buf) with every register a
    call keeps holding a known value, returning to RETURN_AT; then every one of them changed and the stack
    pointer moved, sdt_longjmp(buf, 0) called: (which kept registers differ from their values at the setjmp,
    the stack pointer, the pc and the value where it arrives)."""
    from elftools.elf.elffile import ELFFile
    from unicorn import arm64_const as A
    from unicorn import riscv_const as R
    from unicorn import x86_const as X

    mu = machine(arch)
    with open(image, "rb") as f:
        elf = ELFFile(f)
        text = elf.get_section_by_name(".text")
        mu.mem_map(text["sh_addr"] & ~0xFFF, 0x2000)
        mu.mem_write(text["sh_addr"], text.data())
        symbols = {sym.name: sym["st_value"] for sym in elf.get_section_by_name(".symtab").iter_symbols()}
    buf, return_at, word = STACK_TOP - 0x80000, SENTINEL + 0x40, 4 if arch == "i386" else 8
    sp_reg, pc_reg, ret_reg = {"x86_64": (X.UC_X86_REG_RSP, X.UC_X86_REG_RIP, X.UC_X86_REG_RAX),
                               "i386": (X.UC_X86_REG_ESP, X.UC_X86_REG_EIP, X.UC_X86_REG_EAX),
                               "aarch64": (A.UC_ARM64_REG_SP, A.UC_ARM64_REG_PC, A.UC_ARM64_REG_X0),
                               "riscv64": (R.UC_RISCV_REG_SP, R.UC_RISCV_REG_PC, R.UC_RISCV_REG_A0)}[arch]
    kept_regs = CALLEE_SAVED[arch](X, A, R)

    def call(function: str, args: list[int], sp: int, fill: int) -> None:
        for i, reg in enumerate(kept_regs):
            mu.reg_write(reg, fill + 0x1111 * i)
        if arch in ("x86_64", "i386"):  # the return address, then (i386) the arguments, on the stack
            sp -= word * (1 + (len(args) if arch == "i386" else 0))
            mu.mem_write(sp, b"".join(v.to_bytes(word, "little") for v in [return_at, *args]) if arch == "i386"
                         else return_at.to_bytes(word, "little"))
            if arch == "x86_64":
                for reg, v in zip((X.UC_X86_REG_RDI, X.UC_X86_REG_RSI)[:len(args)], args, strict=True):
                    mu.reg_write(reg, v)
        else:
            link, regs = ((A.UC_ARM64_REG_X30, (A.UC_ARM64_REG_X0, A.UC_ARM64_REG_X1)) if arch == "aarch64" else
                          (R.UC_RISCV_REG_RA, (R.UC_RISCV_REG_A0, R.UC_RISCV_REG_A1)))
            mu.reg_write(link, return_at)
            for reg, v in zip(regs[:len(args)], args, strict=True):
                mu.reg_write(reg, v)
        mu.reg_write(sp_reg, sp)
        mu.emu_start(symbols[function], return_at, count=1000)

    setjmp_sp = STACK_TOP - 0x200
    call("sdt_setjmp", [buf], setjmp_sp, 0x5EED0000)
    assert mu.reg_read(ret_reg) & 0xFFFFFFFF == 0  # the first return
    call("sdt_longjmp", [buf, 0], setjmp_sp - 0x1000, 0xBAD00000)
    changed = {i: hex(mu.reg_read(reg)) for i, reg in enumerate(kept_regs)
               if mu.reg_read(reg) != 0x5EED0000 + 0x1111 * i}
    return changed, mu.reg_read(sp_reg), mu.reg_read(pc_reg), mu.reg_read(ret_reg) & 0xFFFFFFFF


@pytest.mark.parametrize("arch", arches.names())
def test_called_as_the_abi_calls_it_every_register_a_call_keeps_comes_back(arch, tmp_path):
    """Whatever a compiler keeps in which register: after sdt_longjmp(buf, 0), from a deeper stack with every
    callee-saved register changed, each holds its value at sdt_setjmp, the stack pointer is the caller's after
    setjmp's return, and it arrives at setjmp's return address with 1."""
    obj = tmp_path / "sdt_setjmp.o"
    run([tool(arch, "gcc"), *kernel_flags(arch, emulated=True), f"-I{INCLUDE}", "-c", "-o", str(obj), str(SETJMP)])
    image = tmp_path / "setjmp.elf"
    run([tool(arch, "ld"), "-static", "-e", "sdt_setjmp", f"-Ttext={BASE:#x}", "-o",
         str(image), str(obj)])
    changed, sp, pc, value = direct_jump(arch, image)
    # The caller's sp once setjmp returned: its return address popped; on i386 the argument still on the stack
    caller_sp = STACK_TOP - 0x200 - (4 if arch == "i386" else 0)
    assert changed == {}, f"{arch}: callee-saved registers (by ABI order) not given back: {changed}"
    assert (sp, pc, value) == (caller_sp, SENTINEL + 0x40, 1)


def test_natively_a_fault_handler_jumps_back_to_the_guard(tmp_path):
    """x86-64 on this CPU: check() as above, and a guarded read of address 16 three times, SIGSEGV's handler
    jumping back each time, as a kernel's fault handler does in `guarded`."""
    exe = tmp_path / "sdt-check"
    run(["gcc", "-O2", "-DNATIVE_SDT", f"-I{INCLUDE}", "-o", str(exe), str(DRIVER), str(SETJMP)])
    for seed in SEEDS:
        answer, guarded = run([str(exe), str(seed)]).stdout.splitlines()
        assert int(answer) == native_answer(tmp_path, seed, 64)
        assert guarded == "faults 3 signal 11"


RV64GC = ["-march=rv64gc", "-mabi=lp64d"]  # xv6's: F and D in -march, the FPU off at run time


def boot_bare_riscv(out, flags: list[str], seed: int, sources: list) -> str:
    """The driver as a bare M-mode program on QEMU's virt machine as it resets (mstatus.FS off, as xv6 runs):
    what it printed, "check N" or "trap CAUSE"."""
    from helpers import need_tool

    qemu = need_tool("qemu-system-riscv64", "qemu-system-misc")
    objs = []
    for src in sources:
        obj = out / (src.stem + ".o")
        run([tool("riscv64", "gcc"), *flags, "-DBARE_RISCV", f"-DSEED={seed}", f"-I{INCLUDE}", "-c", "-o", str(obj),
             str(src)])
        objs.append(str(obj))
    image = out / "bare.elf"
    run([tool("riscv64", "ld"), "-static", "--no-relax", "-e", "_start", "-Ttext=0x80000000", "-o", str(image),
         *objs])
    proc = run([qemu, "-machine", "virt", "-bios", "none", "-nographic", "-monitor", "none", "-kernel", str(image)],
               timeout=60)
    return proc.stdout.strip()


def test_a_riscv_machine_with_its_fpu_off_guards_with_it_where_gccs_builtin_traps(tmp_path):
    """rv64gc on QEMU, mstatus.FS off as at reset: GCC's __builtin_setjmp saves fs0-fs11 and takes the
    illegal-instruction exception (cause 2: what xv6 hit); sdt_setjmp runs check() to the C library's answer.
    (Unicorn runs FP instructions whatever mstatus.FS says, so this one is QEMU's.)"""
    flags = [f for f in kernel_flags("riscv64") if not f.startswith(("-march", "-mabi"))] + RV64GC
    (tmp_path / "builtin").mkdir()
    assert boot_bare_riscv(tmp_path / "builtin", [*flags, "-DGCC_BUILTIN"], SEEDS[0], [DRIVER]) == "trap 2"
    for seed in SEEDS:
        printed = boot_bare_riscv(tmp_path, flags, seed, [DRIVER, SETJMP])
        assert printed == f"check {native_answer(tmp_path, seed, 64)}"


# The FP and vector units in objdump's spelling: (mnemonics, operands).
X86_FP = (re.compile(r"^(f\w+|\w*mxcsr|fxsave\w*|fxrstor\w*|xsave\w*|xrstor\w*|\w*ps|\w*pd|\w*ss|\w*sd|emms)$"),
          re.compile(r"%([xyz]mm\d+|st|mm\d)"))
FP = {
    "x86_64": X86_FP,
    "i386": X86_FP,
    "aarch64": (re.compile(r"^f\w+"), re.compile(r"\b([bhsdqvz]\d+|fpcr|fpsr)\b")),
    "riscv64": (re.compile(r"^f(?!ence)[\w.]+"), re.compile(r"\b(f[tsa]\d+|fcsr|frm|fflags)\b")),
}


def instructions(arch: str, obj) -> list[str]:
    """The mnemonic and operands of every instruction objdump finds in sdt_setjmp and sdt_longjmp."""
    out = run([tool(arch, "objdump"), "-d", "--no-show-raw-insn", str(obj)]).stdout
    rows, inside = [], False
    for line in out.splitlines():
        if m := re.match(r"[0-9a-f]+ <(\w+)>:", line):
            inside = m[1] in ("sdt_setjmp", "sdt_longjmp")
        elif inside and (m := re.match(r"\s+[0-9a-f]+:\s+(.*)", line)):
            rows.append(m[1].split("#")[0].split("//")[0].split("<")[0].strip())
    return rows


@pytest.mark.parametrize("arch", arches.names())
def test_objdump_finds_no_fp_or_vector_instruction_in_it(arch, tmp_path):
    """Built with the kernel's flags (RISC-V with F and D allowed, rv64gc, as xv6 builds): integer instructions
    only, both functions found."""
    flags = [*kernel_flags(arch)]
    if arch == "riscv64":
        flags = [f for f in flags if not f.startswith(("-march", "-mabi"))] + RV64GC
    obj = tmp_path / "sdt_setjmp.o"
    run([tool(arch, "gcc"), *flags, "-Werror", f"-I{INCLUDE}", "-c", "-o", str(obj), str(SETJMP)])
    insns = instructions(arch, obj)
    assert len(insns) >= 16, insns  # both functions were found
    mnemonic, operand = FP[arch]
    fp = [i for i in insns if mnemonic.search(i.split()[0]) or operand.search(i)]
    assert fp == [], insns
