"""Task context on a kernel that gives no task hook (the emulated platform's: the fixture kernel has no tasks):
a predicate or a key that reads the task (tid, curcontext, execname) records nothing and counts an error at every
firing, said on stderr and in --json's errors, never a task 0 the kernel did not say (docs/runtime.md)."""

from __future__ import annotations

import json

import pytest
from helpers import sdtgen
from native_oracle import Call, run_native

CPUS = 2


@pytest.fixture(scope="module")
def ticks(native_exe) -> int:
    return sum(1 for e in run_native(native_exe, [Call("sched_run", (5,))]) if e.get("probe") == "hk:sched:run:tick")


@pytest.mark.parametrize("clause", ["--enable=hk:sched:run:tick /tid == 0/",
                                    '--enable=hk:sched:run:tick /execname == ""/',
                                    "--aggregate=hk:sched:run:tick @[curcontext] = count()"])
def test_reading_the_task_of_a_kernel_without_the_hook_is_an_error_each_firing(kernel, ticks, clause):
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--json", clause, "--run", "sched_run:long", "--arg", "5")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert ticks and not [e for e in events if e["event"] == "fire"]
    [aggs] = [e for e in events if e["event"] == "aggregations"]
    assert [a["rows"] for a in aggs["aggregations"] if a["rows"]] == [] and aggs["errors"] == ticks * CPUS


def test_the_errors_are_said_with_what_may_have_made_them(kernel, ticks):
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--enable", "hk:sched:run:tick /tid == 0/", "--run",
                  "sched_run:long", "--arg", "5")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "error" in line]
    assert said == [f"{kernel.image}: warning: {ticks} errors on CPU {cpu}: a clause divided by zero, met a string "
                    "it could not read or read the task (tid, curcontext, execname) of a kernel that gives no task "
                    "hook, and that firing did nothing more" for cpu in range(CPUS)]
