"""One CPU bound, SDT_MAX_CPUS (sdtgen/layout.py): the CPU numbers a recording takes and the CPUs a kernel's hello
may say, which every host holds to (sdtgen/limits.py's MAX_CPUS). The runtime refuses a CPU past it where it is
given one, as a kernel builds it: cpu_limit.c, built for this machine under AddressSanitizer, asks at the limit
and one past it."""

from __future__ import annotations

import subprocess

import pytest
from helpers import SDTGEN, need_tool, run
from runtime_support import HERE, include_dir, runtime_dir

from sdtgen import limits
from sdtgen.layout import VALUES

MAX = VALUES["SDT_MAX_CPUS"]


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict[str, int]:
    out = tmp_path_factory.mktemp("cpu-limit") / "cpu_limit"
    rt = runtime_dir()
    run([need_tool("gcc", "gcc"), "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer", "-Wall", "-Wextra",
         "-Werror", f"-I{include_dir()}", f"-I{rt}", "-o", str(out), str(HERE / "cpu_limit.c"),
         str(rt / "sdt_control.c"), str(rt / "arch" / "sdt_x86_64.c")])
    proc = subprocess.run([str(out)], capture_output=True, text=True, timeout=60,
                          env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert proc.returncode == 0 and "AddressSanitizer" not in proc.stderr, proc.stderr
    return {name: int(value) for name, value in (line.split() for line in proc.stdout.splitlines())}


def test_the_hosts_bound_is_the_runtimes():
    assert limits.MAX_CPUS == MAX


def test_a_cpu_number_past_the_bound_gets_no_ring(answers):
    assert answers[f"attach-{MAX - 1}"] == 0
    assert answers[f"attach-{MAX}"] == VALUES["SDT_ERR_CPU"]


def test_a_control_core_of_more_cpus_than_the_bound_is_refused_before_its_hello_could_say_so(answers):
    assert answers[f"control-{MAX}"] == 0
    assert answers[f"control-{MAX + 1}"] == VALUES["SDT_ERR_CPU"]


@pytest.mark.parametrize("kind", ["emulator", "qemu", "attach", "process", "listen"])
def test_no_target_takes_more_cpus_than_the_bound(kind):
    """A target's own bound (the emulator's engines, the hosted platform's threads) lies within the protocol's."""
    from sdtgen.targets import max_cpus

    assert 1 <= max_cpus(kind) <= MAX


def test_the_emulator_runs_its_bound_of_cpus_and_refuses_one_more_in_one_line(kernel):
    from sdtgen.targets import max_cpus

    bound = max_cpus("emulator")
    ok = run([SDTGEN, "boot", str(kernel.image), "--cpus", str(bound), "--buffer-size", "4096", "--run", "kmain"])
    assert [x.split()[0] for x in ok.stdout.splitlines() if "kmain() =" in x] == [f"cpu{k}" for k in range(bound)]
    refused = subprocess.run([SDTGEN, "boot", str(kernel.image), "--cpus", str(bound + 1), "--run", "kmain"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"sdtgen: error: --cpus {bound + 1} is not a number of CPUs from 1 to {bound}"], refused.stderr
