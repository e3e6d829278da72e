"""`sdtgen qemu --aggregate` on the fixture kernel, several vCPUs, both arming modes: the aggregations printed at the
end are exactly what the native run's firings make (tests/aggregate_expect.py): programs loaded over the serial
line into memory the kernel gives, each vCPU's frozen half read back in a table frame. A script the image cannot
run is refused before QEMU starts."""

from __future__ import annotations

import json

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


@pytest.fixture
def running_kernel(qemu_kernel, tmp_path):
    """The fixture kernel booted by QEMU on its own (sdtgen's command line for it), its UART a TCP server."""
    import socket
    import subprocess
    import time

    from sdtgen import arch as arches
    from sdtgen.targets.qemu import qemu_command

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a = arches.by_name("x86_64")  # fw_cfg, which carries the boot's commands
    boot = tmp_path / "commands"  # its rings attached at boot (an attached host gives it no memory size)
    boot.write_text(f"ring 10000 2000 0 {128 << 20:x}\n")
    argv = qemu_command(a.qemu.binary, a, str(qemu_kernel("x86_64")), CPUS, 128 << 20, 0, str(tmp_path),
                        ["-fw_cfg", f"name=opt/sdtgen/commands,file={boot}"])
    argv[argv.index("stdio")] = f"tcp:127.0.0.1:{port},server=on,wait=off"
    qemu = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    yield f"tcp:127.0.0.1:{port}"
    qemu.kill()
    qemu.wait()


def test_attach_aggregates_a_running_kernel_and_detaches_its_programs_when_it_leaves(running_kernel, qemu_kernel,
                                                                                     firings):
    image = qemu_kernel("x86_64")
    for _ in range(2):  # the second session's programs are taken: the first detached its own when it left
        proc = run([SDTGEN, "attach", "--serial", running_kernel, str(image), "--json", "-q", "--arm", "branch",
                    "--aggregate", SCRIPT, *run_args(CALLS)], check=False, timeout=300)
        assert proc.returncode == 0, proc.stderr
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        [aggs] = [e for e in events if e["event"] == "aggregations"]
        assert printed(aggs, firings, CPUS) == expected(firings, CPUS)
