"""`sdtgen qemu --aggregate` on the fixture kernel, several vCPUs, both arming modes: the aggregations printed at the
end are exactly what the native run's firings make (tests/aggregate_expect.py): programs loaded over the serial
line into memory the kernel gives, each vCPU's frozen half read back in a table frame. A script the image cannot
run is refused before QEMU starts."""

from __future__ import annotations

import pytest
from aggregate_expect import CALLS, SCRIPT, expected, printed, run_args
from helpers import SDTGEN, run
from native_oracle import build_fixture_native, run_native
from qemu_helpers import ALL, EVERY, qemu_json

CPUS = 3


@pytest.fixture(scope="module")
def firings(tmp_path_factory):
    exe = build_fixture_native(tmp_path_factory.mktemp("native"))
    return [e for e in run_native(exe, CALLS) if "probe" in e]


@pytest.mark.parametrize("mode", ["trap", "branch"])
@pytest.mark.parametrize("arch", EVERY if ALL else ("riscv64", "x86_64"))
def test_qemu_prints_exactly_what_the_native_firings_aggregate(qemu_kernel, firings, arch, mode):
    events = qemu_json(qemu_kernel(arch), "--cpus", CPUS, "--arm", mode, "-q", "--aggregate", SCRIPT,
                       *run_args(CALLS))
    [aggs] = [e for e in events if e["event"] == "aggregations"]
    assert (aggs["dropped"], aggs["errors"], aggs["nested"]) == (0, 0, 0)
    assert printed(aggs, firings, CPUS) == expected(firings, CPUS)
    assert next(e for e in events if e["event"] == "stats")["hits"] == {}, "aggregating clauses record nothing"


def test_a_script_the_image_cannot_run_is_refused_before_qemu_starts(qemu_kernel):
    proc = run([SDTGEN, "qemu", str(qemu_kernel("riscv64")), "--aggregate", "hk:sched:run:tick @ = sum(arg7)",
                "--run", "sched_run", "--arg", "3"], check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    [line] = proc.stderr.splitlines()
    assert line.startswith("--aggregate: error: clause 1 (hk:sched:run:tick @ = sum(arg7)): arg7"), line
