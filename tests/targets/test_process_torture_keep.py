"""`sdtgen torture --target process --keep SPEC`: the fixture kernel as a Linux process (fixtures/process), its
control core's torture toggling SPEC's sites in the default session on real CPUs while the host's own session keeps
them armed and counts their firings in its aggregation tables. Nothing tears or faults, no disarmed window of the
default session fires, and the keeping session counts the native run's firings a call times every call it saw (the
callers' and each batch's reference call): none lost to it. A runtime whose disable takes a site another session
keeps counts a handful (checked by hand: sdt_manage.c's let_go disarming whatever the slot's sessions say)."""

from __future__ import annotations

import json

from helpers import sdtgen
from native_oracle import Call
from session_pair import native

KEEP = "hk:sched:run:tick"
CALL = Call("sched_run", (5,))


def test_the_process_keeps_every_firing_of_the_kept_probes_while_the_default_session_toggles(kernel_proc, native_exe):
    r = sdtgen("torture", str(kernel_proc), "--target", "process", "--cpus", "2", "--toggles", "40", "--run",
               CALL.function, "--arg", str(CALL.args[0]), "--spec", "hk:sched:run:", "--keep", KEEP, "--json",
               "--timeout", "120")
    assert r.stderr == "", r.stderr
    t = json.loads(r.stdout)
    assert (t["torn"], t["faults"], t["wrong"], t["leaked"]) == (0, 0, 0, 0) and t["windows"] > 0
    each = sum(1 for probe, _ in native(native_exe, [CALL]) if probe == KEEP)
    assert t["kept_calls"] > t["calls"] > 0  # the batches' reference calls too
    assert t["kept"] == t["kept_calls"] * each and t["kept_dropped"] == 0 and t["kept_each"] == each
    assert r.returncode == 0 and t["passed"], json.dumps(t)
