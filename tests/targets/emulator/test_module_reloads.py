"""What a module loaded again gets, in the emulated boot: the specs enabled and disabled so far, replayed in order
(a disable of one probe after an enable of its module's provider leaves that probe off), armed in the mode the
runtime arms with now (a switch to branch mode since the spec was enabled), and none of the programs its probes
ran before it was unloaded. Held against fixtures/module's mod.c run natively, and the sites' instructions as
Capstone decodes them."""

from __future__ import annotations

import io

import capstone
import pytest
from helpers import SDTGEN, run
from module_native import MODULE, booted_with_modules, module_firings, session_firings

from sdtgen.layout import SLOT

CALLS = [3, 0, 5]


@pytest.fixture(scope="module")
def ko(tmp_path_factory):
    out = tmp_path_factory.mktemp("module")
    run(["make", "-C", str(MODULE), "ARCH=x86_64", f"O={out}", f"SDTGEN={SDTGEN}"])
    return str(out / "hkm.ko")


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    """The native run's firings and returns, its probes named as the runtime names them (an empty module field
    is the module's name)."""
    return [{**e, "probe": e["probe"].replace("hkm::", "hkm:hkm:")} if "probe" in e else e
            for e in module_firings(tmp_path_factory.mktemp("native"), CALLS)]


def test_a_probe_disabled_after_its_providers_enable_stays_off_in_a_reload(kernel, ko, native):
    out = io.StringIO()
    s = booted_with_modules(kernel.image, out)
    try:
        s.load_module(ko)
        s.enable("hkm:drv::")
        s.disable("hkm:drv:work:dev")
        s.unload_module("hkm")
        s.load_module(ko)
        for n in CALLS:
            s.run("hkm_work", [n])
    finally:
        s.close()
    assert session_firings(out) == [e for e in native if e.get("probe", "hkm:drv:work:done") == "hkm:drv:work:done"]


def test_a_module_loaded_after_a_switch_to_branch_mode_comes_branch_armed(kernel, ko, native):
    """Enabled in trap mode before the module exists, then the switch: each of its sites, once loaded, is a call
    to its probe's recorder (Capstone), not the breakpoint; it fires as the native run."""
    out = io.StringIO()
    s = booted_with_modules(kernel.image, out)
    try:
        s.set_arm("trap")
        s.enable("hkm:::")
        s.set_arm("branch")
        s.load_module(ko)
        t = s.target
        t.runtime.refresh()
        base, size = t.module.base, t.module.size
        sites = [x for x in t.runtime.sites if 0 <= x.addr - base < size]
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        decoded = {x.probe.spec: next(md.disasm(t.machine.read(x.addr, 16), x.addr)) for x in sites}
        recorders = {x.probe.spec: x.probe.recorder for x in sites}
        for n in CALLS:
            s.run("hkm_work", [n])
    finally:
        s.close()
    assert len(decoded) == 3
    assert {p: (i.mnemonic, i.op_str) for p, i in decoded.items()} == \
        {p: ("call", hex(r)) for p, r in recorders.items()}
    assert session_firings(out) == native


def test_an_unloaded_modules_probes_drop_their_programs(kernel, ko, native):
    """A program whose predicate no firing passes runs on hkm:drv:work:dev; the module is unloaded (its slot
    emptied: read from the guest's memory) and loaded again, and a plain enable records every firing, as the
    native run makes them (a program left in the slot would still turn dev's firings away)."""
    out = io.StringIO()
    s = booted_with_modules(kernel.image, out)
    try:
        s.load_module(ko)
        s.aggregate('hkm:drv:work:dev /arg0 == "no such device"/ { @n = count(); }')
        t = s.target
        t.runtime.refresh()
        (dev,) = {x.probe for x in t.runtime.sites if x.probe.spec == "hkm:drv:work:dev"}
        programs = dev.program + SLOT.offset("program", 64)  # each session's program (docs/sessions.md)
        assert dev.program and t.machine.read(programs, 8) != bytes(8)  # the program is in its slot
        s.unload_module("hkm")
        slot = t.machine.read(programs, 8 * SLOT.fields[-1].count)
        s.load_module(ko)
        s.enable("hkm:::")
        for n in CALLS:
            s.run("hkm_work", [n])
    finally:
        s.close()
    assert slot == bytes(8 * SLOT.fields[-1].count)
    assert session_firings(out) == native
