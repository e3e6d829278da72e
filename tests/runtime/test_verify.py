"""sdt_arch_verify accepts exactly the sites GNU as assembles and GNU ld relaxes, and refuses near misses;
sdt_arch_single_store names only stores the architecture lets other CPUs fetch whole; x86's conditional
sites are taken exactly when the CPU takes them. The runtime's C runs in Unicorn, built by each gcc."""

from __future__ import annotations

import pytest
from helpers import ARCHES, cross_tool, run
from runtime_support import COND, STORE, VERIFY
from site_forms import X86_CC, site_forms

from sdtgen.layout import FORMS

UNIT = {"x86_64": 1, "i386": 1, "aarch64": 4, "riscv64": 2}  # instruction alignment


def verify(img, rows: list[tuple[int, int, int, str, int]]) -> list[tuple[int, int]]:
    """(code, site, stub, form, length) -> (what verify returned, what it kept)."""
    out = img.cases("sdt_test_verify", VERIFY, [(c, s, t, FORMS[f], n, 0xEEEE, 0) for c, s, t, f, n in rows])
    return [(r[5], r[6]) for r in out]


@pytest.mark.parametrize("arch", ARCHES)
def test_verify_accepts_what_gnu_makes_and_refuses_near_misses(arch_image, arch):
    img = arch_image(arch)
    _, _, sites = site_forms(arch)
    rows = [(img.symbols[f"v_{s.name}"], img.symbols[f"v_{s.name}"], img.symbols[s.stub], s.form, s.length)
            for s in sites]
    got = verify(img, rows)
    for s, (size, keep) in zip(sites, got, strict=True):
        assert size == s.size, (s, size, img.read(img.symbols[f"v_{s.name}"], 8).hex())
        if size:
            assert keep == s.keep, s
    assert {s.size for s in sites} - {0} and 0 in {s.size for s in sites}


@pytest.mark.parametrize("arch", ARCHES)
def test_a_site_whose_target_is_off_by_one_or_one_instruction_is_refused(arch_image, arch):
    img = arch_image(arch)
    _, _, sites = site_forms(arch)
    good = [s for s in sites if s.size and s.form != "goto"]  # a goto is its NOP: the target is the table's
    rows = [(img.symbols[f"v_{s.name}"], img.symbols[f"v_{s.name}"], img.symbols[s.stub] + d, s.form, s.length)
            for s in good for d in (1, -1, UNIT[arch], -UNIT[arch])]
    assert all(size == 0 for size, _ in verify(img, rows))


@pytest.mark.parametrize("arch", ARCHES)
def test_every_single_bit_flip_of_an_accepted_site_is_refused(arch_image, arch):
    """A bit flipped anywhere in the instruction changes its opcode, register or target: never the expected
    call. The one exception is a jcc's condition, which is still a jump to the stub (and is kept)."""
    img = arch_image(arch)
    _, _, sites = site_forms(arch)
    scratch = img.symbols["sdt_test_cases"] + (1 << 19)  # the far half of the case buffer
    rows, expect = [], []
    for s in (s for s in sites if s.size):
        at = img.symbols[f"v_{s.name}"]
        code = img.read(at, 16)
        flips = [(i, b) for i in range(max(s.size, 6 if s.length == 6 else 0)) for b in range(8)]
        if code[:2] in (b"\xff\x15", b"\xff\x25"):
            flips = [(i, b) for i, b in flips if i < 2 or (i == 2 and b < 3)]  # the slot stays in the image
        for i, b in flips:
            flipped = bytearray(code)
            flipped[i] ^= 1 << b
            where = scratch + 16 * len(rows)
            img.write(where, bytes(flipped))
            rows.append((where, at, img.symbols[s.stub], s.form, s.length))
            cc_bit = s.form == "cond" and i == 1 and b < 4
            expect.append((s.name, i, b, s.size if cc_bit else 0, flipped[1] if cc_bit else None))
    got = verify(img, rows)
    for (name, i, b, size, keep), (ret, kept) in zip(expect, got, strict=True):
        assert ret == size, (name, i, b)
        if keep is not None:
            assert kept == keep


# -- the single-store rule -----------------------------------------------------------------------------
def allowed_stores(arch: str, site: int, size: int) -> list[tuple[int, int]]:
    """(offset, width) of every store a CPU's instruction fetch sees whole, old or new, inside the site:
    x86 its first byte (Intel's cross-modifying code rule); AArch64 its aligned word; RISC-V any aligned
    halfword or word inside it."""
    if arch in ("x86_64", "i386"):
        return [(0, 1)]
    widths = (4,) if arch == "aarch64" else (2, 4)
    return [(at, w) for w in widths for at in range(size) if (site + at) % w == 0 and at + w <= size]


SIZES = {"x86_64": (5, 6), "i386": (5, 6), "aarch64": (4,), "riscv64": (2, 4, 8)}


@pytest.mark.parametrize("arch", ARCHES)
def test_single_stores_lie_inside_the_site_aligned_and_cover_the_change(arch_image, arch):
    img = arch_image(arch)
    base = 0x1000_0000
    rows = [(base + align, size, lo, hi, 0xEEEE, 0xEEEE, 0xEEEE) for size in SIZES[arch]
            for align in ((0, 2) if arch == "riscv64" else (0,)) for lo in range(size) for hi in range(lo, size)]
    out = img.cases("sdt_test_single_store", STORE, rows)
    for site, size, lo, hi, ret, at, width in out:
        fits = [(a, w) for a, w in allowed_stores(arch, site, size) if a <= lo and hi < a + w]
        assert bool(ret) == bool(fits), (hex(site), size, lo, hi)
        if ret:
            assert (at, width) in fits, (hex(site), size, lo, hi, at, width)


def test_a_riscv_two_byte_site_two_mod_four_is_one_halfword_store_of_its_own_bytes(arch_image):
    img = arch_image("riscv64")
    (row,) = img.cases("sdt_test_single_store", STORE, [(0x1000_0002, 2, 0, 1, 0, 0, 0)])
    assert row[4:] == (1, 0, 2)


# -- x86's conditional tail sites ----------------------------------------------------------------------
FLAGS = {"cf": 1 << 0, "pf": 1 << 2, "zf": 1 << 6, "sf": 1 << 7, "of": 1 << 11}


def unicorn_takes(bits: int, cc: int, eflags: int) -> bool:
    """Whether the CPU takes `j<cc> rel32`, as Unicorn executes it."""
    import unicorn as uc
    from unicorn import x86_const as X

    mu = uc.Uc(uc.UC_ARCH_X86, uc.UC_MODE_64 if bits == 64 else uc.UC_MODE_32)
    mu.mem_map(0x10000, 0x2000)
    mu.mem_write(0x10000, bytes([0x0F, 0x80 | cc]) + (0x100).to_bytes(4, "little"))
    mu.reg_write(X.UC_X86_REG_EFLAGS, 2 | eflags)
    mu.emu_start(0x10000, 0, 0, 1)
    return mu.reg_read(X.UC_X86_REG_RIP if bits == 64 else X.UC_X86_REG_EIP) == 0x10106


@pytest.mark.parametrize("arch", ["x86_64", "i386"])
def test_a_conditional_site_is_taken_exactly_when_the_cpu_takes_its_jcc(arch_image, arch):
    img = arch_image(arch)
    combos = [sum(v for k, v in enumerate(FLAGS.values()) if bits >> k & 1) for bits in range(32)]
    rows = [(flags, 0x80 | cc, 0xEEEE) for cc in range(16) for flags in combos]
    for flags, keep, taken in img.cases("sdt_test_cond", COND, rows):
        assert bool(taken) == unicorn_takes(img.arch.bits, keep & 15, flags), (X86_CC[keep & 15], hex(flags))


# -- the breakpoint ----------------------------------------------------------------------------------
BREAKPOINT = {"x86_64": ("int3", ["--64"]), "i386": ("int3", ["--32"]), "aarch64": ("brk #0x5d7", []),
              "riscv64": ("c.ebreak", ["-march=rv64gc"])}
# what an armed (trap) site starts with, beside the protocol's own breakpoint: a trap must recognise both
ARMED = {"riscv64": ("ebreak", ["-march=rv64ima"])}  # without C: the 4-byte ebreak


def gnu_text(arch: str, text: str, flags: list[str], tmp_path) -> bytes:
    from elftools.elf.elffile import ELFFile

    (tmp_path / "bp.s").write_text(f".text\n{text}\n")
    run([cross_tool(arch, "as"), *flags, "-o", str(tmp_path / "bp.o"), str(tmp_path / "bp.s")])
    with open(tmp_path / "bp.o", "rb") as f:
        return ELFFile(f).get_section_by_name(".text").data()


@pytest.mark.parametrize("arch", ARCHES)
def test_the_breakpoint_is_what_gnu_as_assembles_and_is_recognised(arch_image, arch, tmp_path):
    img = arch_image(arch)
    n = int.from_bytes(img.read(img.symbols["sdt_arch_bp_len"], 4), "little")
    ours = img.read(img.symbols["sdt_arch_bp"], n)
    text, flags = BREAKPOINT[arch]
    gnu, nop = gnu_text(arch, text, flags, tmp_path), gnu_text(arch, "nop", flags, tmp_path)
    assert ours == gnu  # the whole instruction, and only it
    armed = [gnu_text(arch, ARMED[arch][0], ARMED[arch][1], tmp_path)] if arch in ARMED else []
    scratch = img.symbols["sdt_test_cases"]
    for code, want in ((gnu + nop, 1), *((a + nop, 1) for a in armed), (nop + gnu, 0), (bytes(16), 0)):
        img.write(scratch, code.ljust(16, b"\0"))
        assert img.machine.call(img.symbols["sdt_test_is_breakpoint"], [scratch]) == want, code.hex()
