"""Two definitions that cannot both hold are refused, as FreeBSD's link refuses them: two probes whose
names join to one stub symbol, or one probe defined with different argument types in two files. gen
writes nothing and names both records, at the offsets readelf -p shows in .sdt_desc."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import compile_c, compile_runtime, final_script, partial_link, run, sdtgen

NET_IF = """#include <sdt.h>
SDT_PROBE_DEFINE1(e, net_if, up, x, "int");
int a(int v) { SDT_PROBE1(e, net_if, up, x, v); return v; }
"""
NET = """#include <sdt.h>
SDT_PROBE_DEFINE2(e, net, if_up, x, "long", "char *");
int b(long v) { SDT_PROBE2(e, net, if_up, x, v, "up"); return 1; }
"""
NET_IF_AGAIN = NET.replace("net, if_up", "net_if, up").replace("int b(", "int c(")
SAME_AGAIN = NET_IF.replace("int a(", "int d(")


def records(obj) -> list[int]:
    """Offsets of the SDT1 records in .sdt_desc, from readelf's string dump."""
    dump = run(["readelf", "-p", ".sdt_desc", str(obj)]).stdout
    return [int(m[1], 16) for m in re.finditer(r"\[\s*([0-9a-f]+)\]\s+SDT1$", dump, re.M)]


@pytest.mark.parametrize(("second", "message", "fix"), [
    (NET, "probe 'e:net:if_up:x' and probe 'e:net_if:up:x' (defined at .sdt_desc+{first:#x}) have one stub symbol, "
          "'__dtrace_sdt_e_net_if_up_x', so their sites and arguments would be merged",
     "rename one of them: a probe's stub symbol joins its four names with '_', so they must differ there too"),
    (NET_IF_AGAIN, "probe 'e:net_if:up:x' is defined here with arguments (long, char *) and at .sdt_desc+{first:#x} "
                   "with (int)",
     "define the probe once (SDT_PROBE_DEFINE in one file, SDT_PROBE_DECLARE in the others), with one list of "
     "argument types"),
], ids=["one-symbol", "different-types"])
def test_gen_refuses_two_definitions_of_one_stub_symbol(tmp_path, second, message, fix):
    kernel = partial_link(tmp_path, "kernel", compile_c(tmp_path, "one", NET_IF), compile_c(tmp_path, "two", second))
    first, later = records(kernel)
    before = kernel.read_bytes()
    proc = sdtgen("gen", kernel, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"{kernel}: error: .sdt_desc+{later:#x}: {message.format(first=first)}; {fix}\n"
    assert kernel.read_bytes() == before
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()


def test_the_same_definition_in_two_files_is_one_probe(tmp_path):
    kernel = partial_link(tmp_path, "kernel", compile_c(tmp_path, "one", NET_IF),
                          compile_c(tmp_path, "two", SAME_AGAIN))
    assert len(records(kernel)) == 2
    proc = sdtgen("gen", kernel, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s.c").read_text().count("void __dtrace_sdt_e_net_if_up_x(void) {") == 1


def test_check_refuses_two_objects_defining_one_stub_differently(kernel, tmp_path):
    one, two = compile_c(tmp_path, "one", NET_IF), compile_c(tmp_path, "two", NET_IF_AGAIN)
    proc = sdtgen("check", one, two, kernel.image)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"{two}: error: defines probe e:net_if:up:x (long, char *) with stub symbol "
                           f"__dtrace_sdt_e_net_if_up_x, which {one} defines as e:net_if:up:x (int); define each "
                           "probe once, with one list of argument types and names that make distinct stub symbols\n")


def test_two_different_types_for_one_argument_are_refused(tmp_path):
    one = compile_c(tmp_path, "one", NET_IF.replace('"int");', '"int");\nSDT_PROBE_ARGTYPE(e, net_if, up, x, 0, "int", '
                                                    'NULL);'))
    two = compile_c(tmp_path, "two", '#include <sdt.h>\nSDT_PROBE_ARGTYPE(e, net_if, up, x, 0, "long", NULL);\n')
    kernel = partial_link(tmp_path, "kernel", one, two)
    dump = run(["readelf", "-p", ".sdt_desc", str(kernel)]).stdout
    first, later = (int(m[1], 16) for m in re.finditer(r"\[\s*([0-9a-f]+)\]\s+SDTA$", dump, re.M))
    proc = sdtgen("gen", kernel, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{kernel}: error: .sdt_desc+{later:#x}: probe '__dtrace_sdt_e_net_if_up_x' types "
                                  f"argument 0 as 'long' here and as 'int' at .sdt_desc+{first:#x}; define the probe")


# A probe defined with empty module and function lists as hk:::hello; so does a direct call to a stub whose
# name splits at its first '_' into provider hk and name hello. Two stub symbols, one listed name.
DEFINED = """#include <sdt.h>
SDT_PROBE_DEFINE1(hk, , , hello, "int");
int defined(int v) { SDT_PROBE1(hk, , , hello, v); return v; }
"""
DIRECT = """extern void __dtrace_sdt_hk_hello(long, long);
extern int defined(int);
int direct(int v) { __dtrace_sdt_hk_hello(v, 2); return v + 1; }
long kmain(int v) { return direct(v) + defined(v); }
"""
NAME_FIX = ("fire a defined probe only through sdt.h's SDT_PROBE macros, or rename one of the two: a stub called "
            "without SDT_PROBE_DEFINE lists as provider:::name, split at its first '_'")


def call_site(obj, symbol: str) -> str:
    """``.text:function+0xoff`` of the call to ``symbol``, from objdump's disassembly with relocations."""
    function, start = None, 0
    for line in run(["objdump", "-drw", str(obj)]).stdout.splitlines():
        m = re.match(r"([0-9a-f]+) <(\w+)>:$", line)
        if m:
            start, function = int(m[1], 16), m[2]
        m = re.match(r"\s*([0-9a-f]+):\s+(?:[0-9a-f]{2} )+\s*call", line)
        if m and symbol in line:
            return f".text:{function}+{int(m[1], 16) - start:#x}"
    raise AssertionError(f"no call to {symbol} in {obj}")


def test_gen_refuses_a_direct_call_that_lists_under_a_defined_probes_name(tmp_path):
    kernel = partial_link(tmp_path, "kernel", compile_c(tmp_path, "one", DEFINED), compile_c(tmp_path, "two", DIRECT))
    (record,) = records(kernel)
    before = kernel.read_bytes()
    proc = sdtgen("gen", kernel, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"{kernel}: error: {call_site(kernel, '__dtrace_sdt_hk_hello')}: stub symbols "
                           f"__dtrace_sdt_hk_hello and __dtrace_sdt_hk___hello (at .sdt_desc+{record:#x}) both list "
                           f"as probe hk:::hello, so their firings could not be told apart; {NAME_FIX}\n")
    assert kernel.read_bytes() == before
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()


def two_generated_objects(tmp_path) -> tuple[Path, Path, Path]:
    """Each object is fine alone and goes through gen on its own; linked into one image, two of their probes
    list under one name. (The two partial objects, and the image.)"""
    one = partial_link(tmp_path, "one_partial", compile_c(tmp_path, "one", DEFINED))
    two = partial_link(tmp_path, "two_partial", compile_c(tmp_path, "two", DIRECT))
    objs = []
    for name, partial in (("one", one), ("two", two)):
        stubs, table = tmp_path / f"{name}_stubs.c", tmp_path / f"{name}_table.S"
        sdtgen("gen", partial, "--stubs", stubs, "--table", table, check=True)
        compiled = compile_runtime(tmp_path, name, stubs, table)
        objs += compiled if name == "one" else compiled[:2]  # one runtime in the image
    image = tmp_path / "image.elf"
    run(["ld", "-T", str(final_script(tmp_path / "final.ld")), "-o", str(image), str(one), str(two), *map(str, objs)])
    return one, two, image


def test_boot_refuses_an_image_whose_two_probes_list_under_one_name_in_one_line(tmp_path):
    _, _, image = two_generated_objects(tmp_path)
    nm = run(["nm", str(image)]).stdout
    stubs = {ln.split()[-1] for ln in nm.splitlines() if re.search(r" [TW] __dtrace_sdt_hk_", ln)}
    assert stubs == {"__dtrace_sdt_hk_hello", "__dtrace_sdt_hk___hello"}  # both stubs linked, each its own
    proc = sdtgen("boot", image, "--enable", "hk:::hello", "--run", "kmain", "--arg", "1")
    assert proc.returncode == 2 and proc.stdout == ""  # refused before anything was patched or run
    (line,) = proc.stderr.splitlines()
    assert re.fullmatch(
        rf"{re.escape(str(image))}: error: set_sdt_probes_set\+0x[0-9a-f]+: the probes of stubs "
        r"(__dtrace_sdt_hk_hello and __dtrace_sdt_hk___hello|__dtrace_sdt_hk___hello and __dtrace_sdt_hk_hello) "
        r"\(at set_sdt_probes_set\+0x[0-9a-f]+\) both list as hk:::hello, so their firings could not be told apart; "
        r"rename one and rebuild: .*", line), line


def test_check_refuses_two_objects_whose_probes_list_under_one_name(tmp_path):
    one, two, image = two_generated_objects(tmp_path)
    proc = sdtgen("check", one, two, image)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"{two}: error: stub symbol __dtrace_sdt_hk_hello lists as probe hk:::hello, as stub "
                           f"symbol __dtrace_sdt_hk___hello of {one} does, so their firings could not be told apart; "
                           f"{NAME_FIX}\n")


# Two names whose stub symbols hash to one 32-bit FNV-1a event id (found by a birthday search; computed here
# again by the test's own FNV-1a, not sdtgen's).
SAME_ID = ("w66736", "w281300")


def fnv1a(text: str) -> int:
    h = 0x811C9DC5
    for b in text.encode():
        h = ((h ^ b) * 0x01000193) % (1 << 32)
    return h


def test_two_probes_with_one_event_id_are_refused(tmp_path):
    """Events carry a 32-bit id made from the stub symbol: two probes sharing one would be decoded as one."""
    a, b = SAME_ID
    assert fnv1a(f"__dtrace_sdt_kc___{a}") == fnv1a(f"__dtrace_sdt_kc___{b}")
    source = (f'#include <sdt.h>\nSDT_PROBE_DEFINE0(kc, , , {a});\nSDT_PROBE_DEFINE0(kc, , , {b});\n'
              f'void f(void) {{ SDT_PROBE0(kc, , , {a}); SDT_PROBE0(kc, , , {b}); }}\n')
    kernel = partial_link(tmp_path, "kernel", compile_c(tmp_path, "one", source))
    before = kernel.read_bytes()
    proc = sdtgen("gen", kernel, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert (f"probes kc:::{a}" in proc.stderr and f"kc:::{b} have one event id, "
            f"{fnv1a(f'__dtrace_sdt_kc___{a}'):#010x}") in proc.stderr
    assert kernel.read_bytes() == before and not (tmp_path / "s.c").exists()
