"""Every write the runtime makes to a site checks first that the bytes are what it last wrote (ftrace_verify_code's
rule): a site something else rewrote is reported, left as it is, and written no more.

The tricks kernel's rewrite() copies replacement() (return 1234) over probed() (a probe site, return 42),
as self-modifying code or a module reusing memory would.
"""

from __future__ import annotations

import pytest
from booted import Booted

from sdtgen.elf.reader import ElfFile
from sdtgen.errors import SdtError


def replacement_bytes(image, length: int) -> bytes:
    """What rewrite() leaves at probed(): the first bytes of replacement(), from the image file."""
    with ElfFile(image) as elf:
        syms = elf.symbol_map()
        return elf.read_addr(syms["replacement"].value, length)


def only_site(b: Booted):
    (site,) = b.session.target.runtime.sites
    return site


def test_enable_after_the_guest_rewrote_the_site_refuses_and_marks_it(tricks):
    b = Booted(tricks)
    try:
        site = only_site(b)
        disabled = b.session.target.machine.read(site.addr, site.size)
        b.events()
        b.session.run("rewrite:void", [])
        found = b.session.target.machine.read(site.addr, site.size)
        entry = b.session.image.symbols["probed"].value
        assert found == replacement_bytes(tricks, 16)[site.addr - entry:][:site.size] != disabled
        b.events()
        with pytest.raises(SdtError, match="the guest rewrote every one"):  # nothing armed
            b.session.enable("tk:::")
        (changed,) = b.events()
        assert changed["event"] == "changed" and changed["pc"] == site.addr and changed["bytes"] == found.hex()
        assert changed["expected"] == disabled.hex() and changed["where"].startswith(".text:probed+0x")
        assert b.session.target.machine.read(site.addr, site.size) == found  # no breakpoint written
        assert only_site(b).state == "changed"
        b.session.run("probed:int", [1])
        assert b.events() == [{"event": "return", "symbol": "probed", "value": 1234}]  # and no firing
    finally:
        b.session.close()


def test_disable_after_the_guest_rewrote_an_armed_site_leaves_the_guest_code(tricks):
    b = Booted(tricks)
    try:
        site = only_site(b)
        b.session.enable("tk:::")
        armed = b.session.target.machine.read(site.addr, site.size)
        b.session.run("probed:int", [7])
        b.events()
        b.session.run("rewrite:void", [])
        b.session.disable("tk:::")
        events = b.events()
        assert [e["event"] for e in events] == ["return", "changed"]
        assert events[1]["expected"] == armed.hex() and armed[:1] == b"\xcc"
        b.session.run("probed:int", [7])
        assert b.events() == [{"event": "return", "symbol": "probed", "value": 1234}]  # not the NOP over it
        with pytest.raises(SdtError, match="the guest rewrote every one"):  # unusable from now on
            b.session.enable("tk:::")
    finally:
        b.session.close()


def test_the_cli_says_which_site_and_what_bytes(tricks):
    from helpers import sdtgen

    proc = sdtgen("boot", tricks, "--run", "rewrite:void", "--enable", "tk:::", "--run", "probed:int", "--arg", "3")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(f"{tricks}: warning: .text:probed+0x")
    assert ": tk:code:probed:entry: the site's code changed since the runtime wrote it: found " in lines[0]
    assert lines[1] == f"{tricks}: error: no site of 'tk:::' could be armed: the guest rewrote every one"


def test_switching_arming_modes_after_the_guest_rewrote_an_armed_site_leaves_the_guest_code(tricks):
    b = Booted(tricks, arm="branch")
    try:
        site = only_site(b)
        disabled = b.session.target.machine.read(site.addr, site.size)
        b.session.enable("tk:::")
        armed = b.session.target.machine.read(site.addr, site.size)
        assert armed != disabled and armed[:1] == b"\xe8"  # the call to the recorder
        b.session.run("rewrite:void", [])
        found = b.session.target.machine.read(site.addr, site.size)
        b.events()
        b.session.set_arm("trap")  # would write the NOP back, then the breakpoint
        (changed,) = b.events()
        assert changed["event"] == "changed" and changed["expected"] == armed.hex() and changed["bytes"] == found.hex()
        assert b.session.target.machine.read(site.addr, site.size) == found and only_site(b).state == "changed"
        assert not b.session.target.runtime.armed()
        b.session.run("probed:int", [1])
        assert [e for e in b.events() if e["event"] != "warning"] == [
            {"event": "return", "symbol": "probed", "value": 1234}]
    finally:
        b.session.close()
