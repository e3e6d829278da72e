"""Is-enabled checks and SDT_PROBES_ENABLED() in an emulated boot of fixtures/freebsd, on every architecture,
and the firings of its _XLATE, ARGTYPE and DTRACE_PROBEn probes against a native run of its C source.

An is-enabled check reads 0 with nothing armed, 0 with other probes armed and 1 with its own probe
armed, and asking fires nothing; SDT_PROBES_ENABLED() is 1 exactly while some probe is armed.
"""

from __future__ import annotations

import pytest
from booted import Booted
from helpers import ARCHES, FREEBSD, run, sdtgen
from native import data_symbolizer, print_arg
from probe_source import called_probes

CHECKED = "hk:hot:loop:hash"  # the probe hot.c asks about
OTHER = "ip:::send"
CALLS = [("ip_output", "long", 100), ("route_lookup", "int", 7), ("route_lookup", "int", -3),
         ("hot_loop", "long", 5), ("hot_loop_unguarded", "long", 2)]
POINTERS = {"ip:::send"}  # probes whose arguments are pointers: compared as the object they point at


def ask(b: Booted) -> tuple[int, int, list[dict]]:
    """(SDT_PROBE_ENABLED(hk, hot, loop, hash), SDT_PROBES_ENABLED(), the probes that fired meanwhile)."""
    b.session.run("probe_on:int", [])
    b.session.run("any_on:int", [])
    events = b.events()
    returns = [e["value"] for e in events if e["event"] == "return"]
    return returns[0], returns[1], [e for e in events if e["event"] == "fire"]


@pytest.fixture(params=ARCHES)
def booted_freebsd(request, freebsd_kernel):
    b = Booted(freebsd_kernel(request.param).image)
    b.events()
    yield b
    b.session.close()


def test_checks_read_whether_their_own_probe_is_armed(booted_freebsd):
    b = booted_freebsd
    assert ask(b) == (0, 0, [])
    b.session.enable(OTHER)
    assert ask(b) == (0, 1, [])  # another probe armed: this check still reads 0, the any-probe flag 1
    b.session.enable(CHECKED)
    assert ask(b) == (1, 1, [])  # armed: 1, and asking fired nothing
    b.session.disable(OTHER)
    assert ask(b) == (1, 1, [])
    b.session.disable(CHECKED)
    assert ask(b) == (0, 0, [])


def test_the_guarded_probe_fires_only_where_sdt_probe_is(booted_freebsd):
    b = booted_freebsd
    b.session.run("hot_loop:long", [3])
    assert [e for e in b.events() if e["event"] == "fire"] == []
    b.session.enable(CHECKED)
    b.session.run("hot_loop:long", [3])
    fired = [e for e in b.events() if e["event"] == "fire"]
    assert [(e["probe"], e["args"][0]) for e in fired] == [(CHECKED, 0), (CHECKED, 1), (CHECKED, 2)]


# What Capstone shows a disabled (0) and an armed (1) check as: one instruction setting the result register
# (on x86 filling the whole call with CS prefixes; an 8-byte RISC-V site keeps a NOP after it).
X86 = {0: ("xor", "eax, eax"), 1: ("mov", "eax, 1")}
RESULT = {"x86_64": X86, "i386": X86, "aarch64": {0: ("mov", "w0, #0"), 1: ("mov", "w0, #1")},
          "riscv64": {0: ("mv", "a0, zero"), 1: ("addi", "a0, zero, 1")}}
NOP = {"x86_64": "0f1f440000", "i386": "0f1f440000", "aarch64": "1f2003d5", "riscv64": "13000000"}


def test_the_patched_check_is_one_instruction_setting_the_result_and_never_a_trap(booted_freebsd):
    b = booted_freebsd
    arch = b.session.image.arch
    cs = arch.disassembler()
    checks = [s for s in b.session.target.runtime.sites if s.form == "isen"]
    assert len(checks) >= 2

    def decoded(s) -> list[tuple[str, str]]:
        insns = list(cs.disasm(b.session.target.machine.read(s.addr, s.size), s.addr))
        assert sum(i.size for i in insns) == s.size and all(i.mnemonic == "nop" for i in insns[1:])
        return (insns[0].mnemonic, insns[0].op_str)

    for s in checks:
        assert decoded(s) == RESULT[arch.name][0]
    b.session.enable(CHECKED)
    for s in checks:
        assert decoded(s) == RESULT[arch.name][1]


def test_arming_a_check_whose_bytes_changed_leaves_them_and_says_so(booted_freebsd):
    b = booted_freebsd
    (site, *_) = sorted((s for s in b.session.target.runtime.sites if s.form == "isen"), key=lambda s: s.addr)
    before = b.session.target.machine.read(site.addr, site.size)
    foreign = bytes.fromhex(NOP[b.session.image.arch.name])[:site.size]  # not the runtime's doing
    b.session.target.machine.write(site.addr, foreign)
    b.session.target.machine.invalidate(site.addr, site.addr + len(foreign))
    b.session.enable(CHECKED)
    changed = [e for e in b.events() if e["event"] == "changed"]
    found = b.session.target.machine.read(site.addr, site.size)
    assert [(e["pc"], e["bytes"], e["expected"]) for e in changed] == [(site.addr, found.hex(), before.hex())]
    assert found[:len(foreign)] == foreign
    assert [s.state for s in b.session.target.runtime.sites if s.addr == site.addr] == ["changed"]


@pytest.mark.parametrize("arch", ARCHES)
def test_the_patcher_refuses_a_check_that_is_not_the_call(arch, freebsd_kernel, tmp_path):
    from test_freebsd_macros import without_an_is_enabled_call

    broken, addr = without_an_is_enabled_call(freebsd_kernel(arch), arch, tmp_path)
    b = Booted(broken)
    try:
        refused = [e for e in b.events() if e["event"] == "refused"]
    finally:
        b.session.close()
    assert [(e["probe"], e["pc"]) for e in refused] == [(CHECKED, addr)]


# -- firings against the C source run natively -------------------------------------------------------------

def native_harness() -> str:
    """Every probe the source calls prints its call; every is-enabled check and the any-probe flag say 1."""
    out = ["#include <stdio.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
           "static void put_string(const char *s) { putchar('\"'); for (; *s; s++) {",
           "  if (*s == '\"' || *s == '\\\\') putchar('\\\\'); putchar(*s); } putchar('\"'); }",
           "volatile _Bool sdt_probes_enabled = 1;", "int __dtrace_isenabled_hk_hot_loop_hash(void) { return 1; }"]
    params = ", ".join(f"uintptr_t a{i}" for i in range(6))
    for probe in called_probes(FREEBSD):
        body = ' printf(", "); '.join(print_arg(t, i) for i, t in enumerate(probe.args))
        out.append(f"void {probe.symbol}({params}) {{ printf(\"{{\\\"probe\\\": \\\"{probe.spec}\\\", "
                   f"\\\"args\\\": [\"); {body} printf(\"]}}\\n\"); }}")
    out.append('#include "net.h"')
    out.append("int main(void) {")
    for func, _, arg in CALLS:
        out.append(f'  printf("{{\\"return\\": %ld}}\\n", (long){func}({arg}));')
    out.append("  return 0; }")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("freebsd-native")
    (d / "harness.c").write_text(native_harness())
    include = sdtgen("include-dir", check=True).stdout.strip()
    exe = d / "native"
    run(["gcc", "-O2", "-fno-builtin", "-no-pie", f"-I{FREEBSD}", f"-I{include}", "-o", str(exe),
         str(d / "harness.c"), *sorted(str(p) for p in FREEBSD.glob("*.c"))])
    import json

    return exe, [json.loads(line) for line in run([str(exe)]).stdout.splitlines()]


def normalized(events: list[dict], symbolize) -> list:
    out = []
    for e in events:
        if "probe" in e:
            args = [symbolize(a) if e["probe"] in POINTERS else a for a in e["args"]]
            out.append((e["probe"], args))
        elif "return" in e or e.get("event") == "return":
            out.append(("return", e.get("return", e.get("value"))))
    return out


@pytest.mark.parametrize("form", ["call", "goto"])
@pytest.mark.parametrize("arch", ARCHES)
def test_firings_equal_the_c_sources_strings_included(arch, form, freebsd_kernel, native_run):
    """In both probe forms: FreeBSD-style sources build unchanged with FreeBSD 15's asm goto form too."""
    exe, native = native_run
    build = freebsd_kernel(arch, **({"FORM": "goto"} if form == "goto" else {}))
    b = Booted(build.image)
    try:
        b.events()
        b.session.enable("*:*:*:*")
        for func, ret, arg in CALLS:
            b.session.run(f"{func}:{ret}", [arg])
        emulated = [e for e in b.events() if e["event"] in ("fire", "return")]
    finally:
        b.session.close()
    expected = normalized(native, data_symbolizer(exe))
    assert normalized(emulated, data_symbolizer(build.image)) == expected
    assert {p for p, _ in expected} >= {"ip:::send", "hk:net:route:lookup", "sdt:::route-miss", "sdt:::route-hit",
                                          CHECKED}
    assert ("sdt:::route-miss", ["no route", -3]) in expected
