"""`sdtgen torture --keep SPEC` in the emulator: a second session (the host's own) holds SPEC's probes armed and counts
their firings while the default session arms and disarms the same sites (docs/safety.md). Nothing tears or faults,
no execution of a kept site finds it disarmed, and the keeping session counts exactly the native run's firings a call
times the calls made (tests/native_oracle.py). `--exhaustive --keep` tries every landing of every store of the default
session's changes with the kept site held. A runtime whose disable takes a site another session keeps fails both
(checked by hand: sdt_manage.c's let_go disarming whatever the slot's sessions say)."""

from __future__ import annotations

import json
import os

import pytest
from helpers import OTHER_ARCHES, sdtgen
from native_oracle import Call
from session_pair import native

FULL = os.environ.get("SDTGEN_TORTURE_FULL") == "1"  # `make torture`: longer runs, every architecture
KEEP = "hk:sched:run:tick"
CALL = Call("sched_run", (5,))


def torture(image, *options: str) -> tuple[int, dict]:
    r = sdtgen("torture", str(image), "--run", CALL.function, "--arg", str(CALL.args[0]), "--json", "--timeout", "600",
               "--keep", KEEP, *options)
    assert r.stderr == "", r.stderr
    return r.returncode, json.loads(r.stdout)


def per_call(native_exe) -> int:
    return sum(1 for probe, _ in native(native_exe, [CALL]) if probe == KEEP)


def check_kept(t: dict, native_exe) -> None:
    assert (t["torn"], t["faults"], t["wrong"], t["leaked"], t["idle"]) == (0, 0, 0, 0, 0)
    assert t["keep"] == KEEP and t["kept_disarmed"] == 0 and t["kept_dropped"] == 0
    assert t["kept_calls"] == t["calls"] > 0
    assert t["kept"] == t["kept_calls"] * per_call(native_exe) > 0  # no firing lost to the session that kept it
    assert t["firings"] > 0 and t["windows"] > 0  # the default session's toggles armed the same sites and fired


def test_a_second_session_keeps_its_sites_armed_and_loses_no_firing_while_the_first_toggles_them(kernel, native_exe):
    code, t = torture(kernel.image, "--cpus", "2", "--toggles", "300" if FULL else "20", "--spec", "hk:sched:run:")
    check_kept(t, native_exe)
    assert code == 0 and t["passed"]


@pytest.mark.parametrize("arm", ["branch", "trap"])
def test_every_landing_of_every_store_of_the_toggles_leaves_the_kept_site_armed(kernel, arm):
    code, t = torture(kernel.image, "--exhaustive", "--arm", arm)
    assert t["checked"] > 0 and (t["torn"], t["faults"], t["kept_disarmed"]) == (0, 0, 0)
    assert code == 0 and t["passed"]


@pytest.mark.skipif(not FULL, reason="every architecture, at length: make torture")
@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_on_every_architecture_the_kept_session_loses_nothing(arch_kernel, native_exe, arch):
    image = arch_kernel(arch).image
    code, t = torture(image, "--cpus", "3", "--toggles", "150", "--spec", "hk:sched:run:")
    check_kept(t, native_exe)
    code_x, x = torture(image, "--exhaustive")
    assert code == 0 and code_x == 0 and x["kept_disarmed"] == 0 and x["passed"]


def test_keep_is_refused_in_one_line_with_a_module_cycle(kernel, tmp_path):
    r = sdtgen("torture", str(kernel.image), "--run", "sched_run", "--arg", "5", "--keep", KEEP, "--arm", "module",
               "--module", str(tmp_path / "m.o"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("sdtgen: error: --keep holds probes in a second session"), r.stderr
    assert r.stderr.count("\n") == 1
