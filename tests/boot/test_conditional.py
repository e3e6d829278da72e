"""A conditional tail jump to a probe (clang -Os): returns when taken, fires only when taken."""

from __future__ import annotations

import io
import json

import pytest
from helpers import final_link, need_tool, partial_link, run, sdtgen

from sdtgen.boot.session import BootSession, Reporter

SOURCE = """#include <sdt.h>
SDT_PROBE_DEFINE1(hk, cc, check, big, "unsigned long");
void check_big(unsigned long x) { if (x > 3) SDT_PROBE1(hk, cc, check, big, x); }
unsigned long kmain(unsigned long x) { check_big(x); check_big(x * 2); return x + 1; }
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    need_tool("clang", "clang")
    tmp = tmp_path_factory.mktemp("cond")
    include = sdtgen("include-dir", check=True).stdout.strip()
    (tmp / "cc.c").write_text(SOURCE)
    obj = tmp / "cc.o"
    run(["clang", "-Os", "-ffreestanding", "-fno-pic", "-mcmodel=kernel", "-mno-red-zone", f"-I{include}",
         "-fno-asynchronous-unwind-tables", "-c", "-o", str(obj), str(tmp / "cc.c")])
    partial = partial_link(tmp, "kernel", obj)
    return partial, final_link(tmp, partial)


def test_clang_os_emits_a_conditional_tail_jump_to_the_probe(image):
    partial, _ = image
    objdump = run(["objdump", "-d", str(partial)]).stdout
    sites = json.loads(sdtgen("scan", partial, "--json", check=True).stdout)["sites"]
    cond = [s for s in sites if s["form"] == "cond"]
    assert cond and cond[0]["length"] == 6
    line = next(ln for ln in objdump.splitlines() if ln.strip().startswith(f"{cond[0]['offset']:x}:"))
    assert "\tj" in line and "jmp" not in line  # a jcc
    assert sdtgen("check", partial, image[1]).returncode == 0


def events(buf: io.StringIO) -> list[dict]:
    out = [json.loads(x) for x in buf.getvalue().splitlines()]
    buf.seek(0)
    buf.truncate()
    return out


@pytest.mark.parametrize("arm", ["trap", "branch"])
def test_disarmed_it_returns_and_armed_it_fires_only_when_taken(image, arm):
    buf = io.StringIO()
    s = BootSession(str(image[1]), Reporter(as_json=True, out=buf), arm=arm)
    try:
        assert events(buf)[0]["sites"] >= 1
        assert s.run("check_big:void", [9]) is None and s.run("kmain", [9]) == 10
        assert [e for e in events(buf) if e["event"] == "fire"] == []
        s.enable("hk:cc:check:big")
        s.run("check_big:void", [2])  # condition false: falls through, no firing
        s.run("check_big:void", [9])
        assert s.run("kmain", [2]) == 3  # 2 does not fire, 4 does
        fires = [e["args"] for e in events(buf) if e["event"] == "fire"]
        assert fires == [[9], [4]]
        s.disable("hk:cc:check:big")
        assert s.run("kmain", [9]) == 10
        assert [e for e in events(buf) if e["event"] == "fire"] == []
    finally:
        s.close()


def test_branch_arming_sends_the_jcc_to_the_recorder_and_disarming_puts_it_back(image):
    s = BootSession(str(image[1]), Reporter(as_json=True, out=io.StringIO()), arm="branch")
    try:
        (site,) = [x for x in s.runtime.sites if x.form == "cond"]
        cs = s.image.arch.disassembler()
        original = s.machine.read(site.addr, 6)
        before = next(cs.disasm(original, site.addr))
        s.enable("hk:cc:check:big")
        after = next(cs.disasm(s.machine.read(site.addr, 6), site.addr))
        recorder = s.image.symbols["__sdt_rec___dtrace_sdt_hk_cc_check_big"].value
        assert (after.mnemonic, int(after.op_str, 16)) == (before.mnemonic, recorder)
        assert int(before.op_str, 16) == site.probe.stub
        s.disable("hk:cc:check:big")
        assert s.machine.read(site.addr, 6) == original == s.image.read(site.addr, 6)
    finally:
        s.close()
