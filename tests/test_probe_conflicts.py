"""Two definitions that cannot both hold are refused, as FreeBSD's link refuses them: two probes whose
names join to one stub symbol, or one probe defined with different argument types in two files. gen
writes nothing and names both records, at the offsets readelf -p shows in .sdt_desc."""

from __future__ import annotations

import re

import pytest
from helpers import compile_c, partial_link, run, sdtgen

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
