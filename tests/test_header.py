"""sdt.h: FreeBSD's macro signatures compile to calls, with descriptors in the object."""

from __future__ import annotations

import json

from helpers import compile_c, run, sdtgen

ALL_ARITIES = """
#include <sdt.h>
SDT_PROVIDER_DEFINE(prov);
SDT_PROVIDER_DECLARE(prov);
SDT_PROBE_DECLARE(prov, mod, fn, zero);
SDT_PROBE_DEFINE(prov, mod, fn, bare);
SDT_PROBE_DEFINE0(prov, mod, fn, zero);
SDT_PROBE_DEFINE1(prov, mod, fn, one, "int");
SDT_PROBE_DEFINE2(prov, mod, fn, two, "int", "char *");
SDT_PROBE_DEFINE3(prov, mod, fn, three, "int", "int", "int");
SDT_PROBE_DEFINE4(prov, mod, fn, four, "int", "int", "int", "int");
SDT_PROBE_DEFINE5(prov, mod, fn, five, "int", "int", "int", "int", "int");
SDT_PROBE_DEFINE6(prov, mod, fn, six, "int", "int", "int", "int", "int", "struct thing *");
SDT_PROBE_DEFINE1(prov, , , exec__success, "const char *");
int f(int x, char *s)
{
	SDT_PROBE0(prov, mod, fn, zero);
	SDT_PROBE1(prov, mod, fn, one, x);
	SDT_PROBE2(prov, mod, fn, two, x, s);
	SDT_PROBE3(prov, mod, fn, three, x, 2, 3);
	SDT_PROBE4(prov, mod, fn, four, x, 2, 3, 4);
	SDT_PROBE5(prov, mod, fn, five, x, 2, 3, 4, 5);
	SDT_PROBE6(prov, mod, fn, six, x, 2, 3, 4, 5, s);
	SDT_PROBE(prov, mod, fn, five, x, 2, 3, 4, 5);
	SDT_PROBE1(prov, , , exec__success, s);
	return x;
}
"""


def test_every_arity_compiles_to_a_call_to_an_undefined_probe_function(tmp_path):
    obj = compile_c(tmp_path, "all", ALL_ARITIES, "-Wall", "-Wextra", "-Werror")
    undefined = {ln.split()[-1] for ln in run(["nm", "-u", str(obj)]).stdout.splitlines()}
    assert undefined == {f"__dtrace_sdt_prov_mod_fn_{n}" for n in
                         ("zero", "one", "two", "three", "four", "five", "six")} | {"__dtrace_sdt_prov___exec__success"}
    sites = json.loads(sdtgen("scan", obj, "--json", check=True).stdout)["sites"]
    assert len(sites) == 9 and {s["form"] for s in sites} <= {"call", "tail"}


def test_descriptors_carry_names_and_types(tmp_path):
    obj = compile_c(tmp_path, "all", ALL_ARITIES)
    probes = {p["name"]: p for p in json.loads(sdtgen("probes", obj, "--json", check=True).stdout)["probes"]}
    assert probes["six"]["args"] == ["int"] * 5 + ["struct thing *"]
    assert probes["two"]["args"] == ["int", "char *"]
    assert probes["bare"]["sites"] == 0 and probes["bare"]["args"] == []
    success = probes["exec-success"]
    assert (success["provider"], success["module"], success["function"]) == ("prov", "", "")
    descs = run(["readelf", "-SW", str(obj)]).stdout
    sdt_desc = next(ln for ln in descs.splitlines() if ".sdt_desc" in ln)
    assert " A " not in sdt_desc  # not allocated: costs nothing in the image


def test_compiled_out_and_classic_forms(tmp_path):
    out = compile_c(tmp_path, "out", ALL_ARITIES, "-DSDT_COMPILED_OUT")
    assert not [ln for ln in run(["nm", "-u", str(out)]).stdout.splitlines() if "__dtrace_sdt_" in ln]
    classic = compile_c(tmp_path, "classic", ALL_ARITIES, "-DSDT_CLASSIC")
    assert run(["nm", "-u", str(classic)]).stdout.split()[-1] == "sdt_probe_func"


def test_direct_call_without_macros_is_named_from_its_symbol(tmp_path):
    obj = compile_c(tmp_path, "raw", "void __dtrace_sdt_net_rx(unsigned long);\n"
                    "int f(int x) { __dtrace_sdt_net_rx(x); return 0; }\n")
    (probe,) = json.loads(sdtgen("probes", obj, "--json", check=True).stdout)["probes"]
    assert (probe["provider"], probe["module"], probe["function"], probe["name"]) == ("net", "", "", "rx")
