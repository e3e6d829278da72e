"""sdt_init puts the site table in address order (sdt_trap bisects it) by moving its entries, whose fields are
relative to where they are. gen writes sites in section order, by name: with -ffunction-sections and a plain
`ld -r`, function k in section .text.g{N-1-k} lies before function k+1 but its sites come after. After the boot
the table holds every entry the linker wrote, in address order, each still naming its own site and probe."""

from __future__ import annotations

import io

import pytest
from helpers import ARCHES, compile_runtime, cross_tool, final_script, include_flag, run, sdtgen
from toolchain import kernel_cflags

from sdtgen.image import Image
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session
from sdtgen.table import read_tables

N = 40
# Each function fires its probe twice: a call, then a tail jump (two forms of site the entries must keep).
SOURCE = "#include <sdt.h>\n" + "".join(
    f'SDT_PROBE_DEFINE1(ord, m, f, p{N - 1 - k:02d}, "int");\n'
    f"__attribute__((noinline)) void g{N - 1 - k:02d}(int x) {{ SDT_PROBE1(ord, m, f, p{N - 1 - k:02d}, x); "
    f"SDT_PROBE1(ord, m, f, p{N - 1 - k:02d}, x + {k}); }}\n" for k in range(N)) + (
    "int kmain(int x) { " + " ".join(f"g{k:02d}(x);" for k in range(N)) + " return x; }\n")


# In address order but for its last entry: zz comes first in the text (and in the source) and last by name.
LAST_ONLY = "#include <sdt.h>\n" + 'SDT_PROBE_DEFINE1(ord, m, f, zz, "int");\n' + \
    "__attribute__((noinline)) int zz(int x) { SDT_PROBE1(ord, m, f, zz, x); return x + 1; }\n" + "".join(
        f'SDT_PROBE_DEFINE1(ord, m, f, p{k:02d}, "int");\n'
        f"__attribute__((noinline)) void g{k:02d}(int x) {{ SDT_PROBE1(ord, m, f, p{k:02d}, x); "
        f"SDT_PROBE1(ord, m, f, p{k:02d}, x + {k}); }}\n" for k in range(N)) + (
        "int kmain(int x) { " + " ".join(f"g{k:02d}(x);" for k in range(N)) + " return zz(x); }\n")


def build(tmp, arch: str, source: str = SOURCE, flags: tuple[str, ...] = ()):
    """The kernel built as sdtgen.mk builds one, but for the partial link: plain `ld -r`, sections kept."""
    gcc, ld = cross_tool(arch, "gcc"), cross_tool(arch, "ld")
    (tmp / "ord.c").write_text(source)
    run([gcc, *kernel_cflags(arch), *flags, "-ffunction-sections", include_flag(), "-c", "-o", str(tmp / "ord.o"),
         str(tmp / "ord.c")])
    run([ld, "-r", "-o", str(tmp / "partial.o"), str(tmp / "ord.o")])
    sdtgen("gen", tmp / "partial.o", "--stubs", tmp / "stubs.c", "--table", tmp / "table.S", check=True)
    objs = compile_runtime(tmp, "ord", tmp / "stubs.c", tmp / "table.S", arch)
    image = tmp / "ord.elf"
    run([ld, "-T", str(final_script(tmp / "final.ld", arch)), "-o", str(image), str(tmp / "partial.o"),
         *map(str, objs)])
    return image


def nm_functions(image, arch: str) -> dict[int, str]:
    out = run([cross_tool(arch, "nm"), str(image)]).stdout.split("\n")
    return {int(f[0], 16): f[2] for f in (line.split() for line in out) if len(f) == 3 and f[1] in "tT"}


@pytest.mark.parametrize(("arch", "case", "form"), [(a, "by-name", f) for a in ARCHES for f in ("call", "goto")] +
                         [("x86_64", "last-only", "call")])
def test_the_boot_leaves_the_table_in_address_order_with_every_entry(arch, tmp_path, case, form):
    """Asm goto entries too: their targets are relative fields like their sites, moved with them."""
    image = build(tmp_path, arch, SOURCE if case == "by-name" else LAST_ONLY,
                  ("-DSDT_ASM_GOTO",) if form == "goto" else ())
    with Image(str(image)) as img:
        linked = read_tables(img.read, img.bounds, img.arch.bits, img.arch.little)
    addrs = [s.addr for s in linked]
    assert addrs != sorted(addrs)  # the case under test: the runtime has to sort
    if case == "last-only":  # the already-sorted shortcut must look at the last entry too
        assert addrs[:-1] == sorted(addrs[:-1]) and addrs[-1] < addrs[-2]
    s = open_session("emulator", str(image), Reporter(out=io.StringIO(), quiet=True))
    try:
        booted = s.target.runtime.sites
        assert [x.addr for x in booted] == sorted(addrs)
        key = lambda x: (x.addr, x.probe.spec, x.form, x.length, x.target)  # noqa: E731
        assert sorted(map(key, booted)) == sorted(map(key, linked))
        functions = nm_functions(image, arch)  # each site in the function that fires its probe (nm is the truth)
        for x in booted:
            owner = max(a for a in functions if a <= x.addr)
            assert "p" + functions[owner][1:] == x.probe.name or functions[owner] == x.probe.name == "zz"
            if form == "goto":  # its out-of-line code: in its own function, after the NOP
                assert max(a for a in functions if a <= x.target) == owner and x.target > x.addr
        assert {x.state for x in booted} == {"off"}
        assert {x.form for x in booted} == ({"call", "tail"} if form == "call" else {"goto"})
    finally:
        s.close()
