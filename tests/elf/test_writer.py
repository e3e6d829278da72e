"""Anchor symbols appended to an object: binutils sees them, and the linker resolves them."""

from __future__ import annotations

from helpers import compile_c, run

from sdtgen.elf.reader import ElfFile
from sdtgen.elf.writer import NewSymbol, add_symbols


def test_appended_symbols_are_hidden_globals_binutils_accepts(tmp_path):
    obj = compile_c(tmp_path, "f", "int f(int x) { return x + 1; }\nint g(int x) { return x * 2; }\n")
    with ElfFile(obj) as elf:
        text = elf.section(".text").index
        data = add_symbols(elf, [NewSymbol("__sdt_site_0", text, 0), NewSymbol("__sdt_site_1", text, 0x10)])
    out = tmp_path / "anchored.o"
    out.write_bytes(data)
    syms = run(["readelf", "-sW", str(out)]).stdout
    assert any(ln.split()[-1] == "__sdt_site_1" and "GLOBAL HIDDEN" in " ".join(ln.split()) and
               ln.split()[1].endswith("10") for ln in syms.splitlines() if "__sdt_site_" in ln)
    # Only e_shoff changes in the original bytes; everything new is appended.
    orig = obj.read_bytes()
    assert data[:0x28] == orig[:0x28] and data[0x30:len(orig)] == orig[0x30:]
    image = tmp_path / "a.elf"
    run(["ld", "-e", "f", "--defsym", "probe=__sdt_site_1", "-o", str(image), str(out)])
    nm = {ln.split()[-1]: int(ln.split()[0], 16) for ln in run(["nm", str(image)]).stdout.splitlines()}
    assert nm["probe"] == nm["f"] + 0x10
    run(["objdump", "-d", str(out)])  # still a well-formed object
