"""Is-enabled probes in a module (SDT_PROBE_ENABLED): the loader patches the check like the kernel's own, so the
code it guards runs exactly while a spec arms the probe, in both arming modes, on load, after a disable and
after a reload; what the C says the function returns in each state is the truth."""

from __future__ import annotations

import json

import pytest
from helpers import SDTGEN, run, sdtgen
from module_native import MODULE

ISEN = r"""
#include <sdt.h>

SDT_PROVIDER_DEFINE(ism);
SDT_PROBE_DEFINE1(ism, , check, hit, "int");

/* n, or 1000 + n with the probe's firing when it is enabled: the check guards work only a tracer wants. */
long ism_work(int n)
{
	long r = 0;

	if (SDT_PROBE_ENABLED(ism, , check, hit)) {
		r = 1000;
		SDT_PROBE1(ism, , check, hit, n);
	}
	return r + n;
}
"""


@pytest.mark.parametrize(("arch", "arm"), [("x86_64", "trap"), ("x86_64", "branch"), ("riscv64", "branch")])
def test_a_modules_is_enabled_check_follows_its_probe_through_enable_disable_and_reload(tmp_path, arch_kernel, arch,
                                                                                        arm):
    (tmp_path / "ism.c").write_text(ISEN)
    out = tmp_path / "out"
    run(["make", "-C", str(MODULE), f"ARCH={arch}", f"O={out}", f"SDTGEN={SDTGEN}", f"SRCS={tmp_path / 'ism.c'}",
         "MODULE=ism"])
    ko = out / "ism.ko"
    r = sdtgen("boot", arch_kernel(arch).image, "--json", "--arm", arm, "--module", ko,
               "--run", "ism_work", "--arg", "3",  # loaded, not enabled
               "--enable", "ism:::", "--run", "ism_work", "--arg", "4",
               "--disable", "ism:::", "--run", "ism_work", "--arg", "5",
               "--enable", "ism:::", "--unload", "ism", "--module", ko, "--run", "ism_work", "--arg", "6")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    loads = [e["sites"] for e in events if e["event"] == "module" and e["did"] == "loaded"]
    assert loads == [2, 2]  # the call and the check, both patched, at each load
    assert [e["value"] for e in events if e["event"] == "return"] == [3, 1004, 5, 1006]
    assert [(e["probe"], e["args"]) for e in events if e["event"] == "fire"] == [("ism:ism:check:hit", [4]),
                                                                                 ("ism:ism:check:hit", [6])]
