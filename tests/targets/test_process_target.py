"""`sdtgen torture --target process`: the fixture kernel as a Linux process (threads as CPUs, its control core
on standard input and output), tortured on this machine's real cores with the summary every target gives."""

from __future__ import annotations

import json

from helpers import sdtgen


def torture(image, *options: str) -> tuple[int, dict]:
    r = sdtgen("torture", image, "--target", "process", "--run", "sched_run", "--arg", "20", "--json",
               "--timeout", "300", *options)
    assert r.stderr == "", r.stderr
    return r.returncode, json.loads(r.stdout)


def test_the_safe_protocol_never_tears_under_real_threads(kernel_proc):
    code, s = torture(kernel_proc, "--cpus", "2", "--toggles", "3000", "--arm", "trap")
    assert (s["protocol"], s["toggles"], s["cpus"]) == ("safe", 3000, 2)
    assert (s["torn"], s["faults"], s["wrong"]) == (0, 0, 0) and s["calls"] > 3000 and s["firings"] > 0
    assert code == 0 and s["passed"]
