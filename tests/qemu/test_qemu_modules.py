"""A loadable module on QEMU: the fixture platform's loader (fixtures/qemu/platform.c) copies the module the host
relocated into its sdt_module_area (a fw_cfg file; on RISC-V, QEMU's loader device) and gives it to
sdt_module_load at the control core's `module load`; `module unload` unloads it in place. A spec enabled before
the load arms it; its firings equal its C run natively, on every architecture; the control core's torture in
mode `module` unloads and loads it while the other vCPUs call it."""

from __future__ import annotations

import json
import os

import pytest
from helpers import SDTGEN, run, sdtgen
from module_native import MODULE, module_firings

CALLS = [3, 0, 5]


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return module_firings(tmp_path_factory.mktemp("native-hkm"), CALLS)


def module_for(tmp_path, arch: str):
    run(["make", "-C", str(MODULE), f"ARCH={arch}", f"O={tmp_path / 'module'}", f"SDTGEN={SDTGEN}"])
    return tmp_path / "module" / "hkm.ko"


@pytest.mark.parametrize("arch", ["x86_64", "i386", "aarch64", "riscv64"])
def test_a_module_loaded_on_qemu_fires_as_its_c_runs_natively(tmp_path, qemu_kernel, native, arch):
    image = qemu_kernel(arch)
    ko = module_for(tmp_path, arch)
    runs = [a for n in CALLS for a in ("--run", "hkm_work", "--arg", str(n))]
    r = sdtgen("qemu", str(image), "--json", "--enable", "hkm:::", "--module", str(ko), *runs, "--unload", "hkm",
               "--run", "hkm_work", "--arg", "1", "--timeout", "120")
    events = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 0, r.stderr
    got = [{"probe": e["probe"], "args": e["args"]} if e["event"] == "fire" else {"return": e["value"]}
           for e in events if e["event"] in ("fire", "return")]
    want = [{**e, "probe": e["probe"].replace("hkm::", "hkm:hkm:")} if "probe" in e else e for e in native]
    assert got == [*want, {"return": 1}]  # unloaded: the last call fires nothing
    modules = [(e["did"], e["sites"]) for e in events if e["event"] == "module"]
    assert modules == [("loaded", 3), ("unloaded", 3)]


def test_the_control_cores_module_torture_on_qemu_tears_nothing(tmp_path, qemu_kernel):
    """Two vCPUs call the module's function while the third unloads it and loads it again in place; 2,000 toggles
    (1,000 cycles) with SDTGEN_MODULE_TORTURE=1."""
    image = qemu_kernel("x86_64")
    ko = module_for(tmp_path, "x86_64")
    toggles = 2000 if os.environ.get("SDTGEN_MODULE_TORTURE") == "1" else 100
    r = sdtgen("torture", str(image), "--target", "qemu", "--module", str(ko), "--arm", "module", "--run",
               "hkm_work", "--arg", "3", "--cpus", "2", "--toggles", str(toggles), "--timeout", "1800", "--json")
    summary = json.loads(r.stdout)
    assert (summary["toggles"], summary["torn"], summary["faults"], summary["wrong"]) == (toggles, 0, 0, 0), r.stderr
    assert summary["calls"] > toggles and summary["firings"] > 0
    assert summary["leaked"] == 0 and summary["windows"] > 0, "unloaded, the module's sites fired nothing"
