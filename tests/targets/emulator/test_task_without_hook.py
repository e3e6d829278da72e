"""Task context on a kernel that gives no task hook (the emulated platform's: the fixture kernel has no tasks):
a predicate or a key that reads the task (tid, curcontext, execname) records nothing and counts an error at every
firing, said on stderr and in --json's errors, never a task 0 the kernel did not say (docs/runtime.md)."""

from __future__ import annotations

import json

import pytest
from helpers import sdtgen
from native_oracle import Call, run_native

CPUS = 2


CALLS = [Call("sched_run", (5,)), Call("kmem_alloc", (100,)), Call("proc_exit", (42,))]


@pytest.fixture(scope="module")
def fired(native_exe) -> dict[str, int]:
    """The native run's firings of each probe."""
    counts: dict[str, int] = {}
    for e in run_native(native_exe, CALLS):
        if "probe" in e:
            counts[e["probe"]] = counts.get(e["probe"], 0) + 1
    return counts


def test_reading_the_task_of_a_kernel_without_the_hook_is_an_error_each_firing(kernel, fired):
    runs = [w for c in CALLS for w in ("--run", f"{c.function}:long", *[f"--arg={a}" for a in c.args])]
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--json", "--enable", "hk:sched:run:tick /tid == 0/",
                  "--enable", 'hk:mem:alloc:entry /execname == ""/',
                  "--aggregate", "hk:proc:exit:done @[curcontext] = count()", *runs)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert not [e for e in events if e["event"] == "fire"]
    [aggs] = [e for e in events if e["event"] == "aggregations"]
    each = fired["hk:sched:run:tick"] + fired["hk:mem:alloc:entry"] + fired["hk:proc:exit:done"]
    assert [a["rows"] for a in aggs["aggregations"] if a["rows"]] == [] and aggs["errors"] == each * CPUS


def test_the_errors_are_said_with_what_may_have_made_them(kernel, fired):
    ticks = fired["hk:sched:run:tick"]
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--enable", "hk:sched:run:tick /tid == 0/", "--run",
                  "sched_run:long", "--arg", "5")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "error" in line]
    assert said == [f"{kernel.image}: warning: {ticks} errors on CPU {cpu}: a clause divided by zero, met a string "
                    "it could not read or read the task (tid, curcontext, execname) of a kernel that gives no task "
                    "hook, and that firing did nothing more" for cpu in range(CPUS)]
