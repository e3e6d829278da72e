"""sdt.h: FreeBSD's macro signatures compile to calls, with descriptors in the object."""

from __future__ import annotations

import json

import pytest
from helpers import FREEBSD, compile_c, include_flag, need_tool, run, sdtgen

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


EVERY_FORM = ALL_ARITIES + """
SDT_PROBE_DEFINE2_XLATE(prov, mod, fn, xl, "int", "xint_t", "char *", "xstr_t");
SDT_PROBE_DEFINE(prov, mod, fn, typed);
SDT_PROBE_ARGTYPE(prov, mod, fn, typed, 0, "const char *", NULL);
int g(int x, char *s)
{
	SDT_PROBE2(prov, mod, fn, xl, x, s);
	SDT_PROBE1(prov, mod, fn, typed, s);
	DTRACE_PROBE(anon__zero);
	DTRACE_PROBE1(anon__one, int, x);
	DTRACE_PROBE2(anon__two, int, x, char *, s);
	DTRACE_PROBE3(anon__three, int, x, int, x, int, x);
	DTRACE_PROBE4(anon__four, int, x, int, x, int, x, int, x);
	DTRACE_PROBE5(anon__five, int, x, int, x, int, x, int, x, char *, s);
	if (SDT_PROBE_ENABLED(prov, mod, fn, one))
		x++;
	if (SDT_PROBES_ENABLED())
		x++;
	return x;
}
"""
# C++ and ISO C99, each as strictly as a kernel might build (the probes compiled in, out, and classic).
DIALECTS = {"c++11": ["-x", "c++", "-std=c++11"], "c99": ["-std=c99"]}
STRICT = ["-pedantic", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"]  # unused: compiled-out probes


def probe_symbols(obj) -> set[str]:
    return {ln.split()[-1] for ln in run(["nm", "-u", str(obj)]).stdout.splitlines() if "__dtrace_" in ln}


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_form_compiles_as_cpp_and_pedantic_c99_to_the_same_probes(tmp_path, compiler, dialect):
    """The same calls by the same C names (nm), and the same descriptors (`sdtgen probes`), as the default C
    build: C++ must not mangle a probe or choke on _Bool, C99 must not see C11's _Static_assert."""
    need_tool(compiler, compiler)
    reference = compile_c(tmp_path, "c", EVERY_FORM)
    (tmp_path / "every.c").write_text(EVERY_FORM)
    for mode in ("", "-DSDT_CLASSIC", "-DSDT_COMPILED_OUT"):
        obj = tmp_path / f"every{mode}.o"
        run([compiler, *DIALECTS[dialect], *STRICT, *filter(None, [mode]), include_flag(), "-O2", "-c", "-o",
             str(obj), str(tmp_path / "every.c")])
    built = tmp_path / "every.o"
    assert probe_symbols(built) == probe_symbols(reference) and len(probe_symbols(built)) == 17
    keys = ("provider", "module", "function", "name", "args", "xargs")
    listed = [[tuple(str(p[k]) for k in keys) for p in json.loads(sdtgen("probes", "--json", o, check=True).stdout)
               ["probes"]] for o in (built, reference)]
    assert listed[0] == listed[1] and len(listed[0]) == 17
    assert "sdt_probe_func" in run(["nm", "-u", str(tmp_path / "every-DSDT_CLASSIC.o")]).stdout


def test_a_real_kernel_source_compiles_as_cpp(tmp_path, freebsd_kernel):
    """fixtures/freebsd (every FreeBSD form and is-enabled checks) as C++: the objects call what gcc's C calls."""
    need_tool("g++", "g++")
    build = freebsd_kernel("x86_64")
    for src in sorted(FREEBSD.glob("*.c")):
        obj = tmp_path / f"{src.stem}.o"
        run(["g++", *DIALECTS["c++11"], *STRICT, include_flag(), f"-I{FREEBSD}", "-O2", "-c", "-o", str(obj),
             str(src)])
        assert probe_symbols(obj) == probe_symbols(build.dir / f"{src.stem}.o") != set()


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_asm_goto_form_compiles_as_cpp_and_pedantic_c99_to_the_same_probes(tmp_path, compiler, dialect):
    """-DSDT_ASM_GOTO, as strictly: the same descriptors, and every SDT_PROBEn and DTRACE_PROBEn an asm goto
    record (scan) whose out-of-line code calls the probe's recorder by its C name (nm); C++ built by clang
    keeps the call form (clang++ 14 refuses asm goto labels in other scopes), still the same probes."""
    need_tool(compiler, compiler)
    reference = compile_c(tmp_path, "c", EVERY_FORM)
    (tmp_path / "every.c").write_text(EVERY_FORM)
    obj = tmp_path / "every-goto.o"
    run([compiler, *DIALECTS[dialect], *STRICT, "-DSDT_ASM_GOTO", include_flag(), "-O2", "-c", "-o", str(obj),
         str(tmp_path / "every.c")])
    keys = ("provider", "module", "function", "name", "args", "xargs")
    listed = [[tuple(str(p[k]) for k in keys) for p in json.loads(sdtgen("probes", "--json", o, check=True).stdout)
               ["probes"]] for o in (obj, reference)]
    assert listed[0] == listed[1] and len(listed[0]) == 17
    forms = {s["form"] for s in json.loads(sdtgen("scan", "--json", obj, check=True).stdout)["sites"]}
    undefined = {ln.split()[-1] for ln in run(["nm", "-u", str(obj)]).stdout.splitlines()}
    if compiler == "clang" and dialect == "c++11":
        assert forms <= {"call", "tail", "isen"} and probe_symbols(obj) == probe_symbols(reference)
        return
    assert forms == {"goto", "isen"}  # SDT_PROBE_ENABLED() stays a call in either form
    recorders = {"__sdt_rec_" + s for s in probe_symbols(reference) if s.startswith("__dtrace_sdt_")}
    assert recorders <= undefined and len(recorders) == 16
    words = {s[len("__sdt_rec___dtrace_"):] for s in recorders}  # what each record's probe word names
    assert {s for s in undefined if s.startswith("sdt_")} - {"sdt_probes_enabled"} == words
