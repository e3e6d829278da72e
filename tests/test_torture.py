"""`sdtgen torture`: probes toggled under running CPUs; the safe protocol never tears, the naive one does."""

from __future__ import annotations

import io
import json

import pytest
from helpers import OTHER_ARCHES, sdtgen
from native_oracle import Call

from sdtgen.boot.session import BootSession, Reporter
from sdtgen.torture import Torture, torture

KEYS = {"protocol", "cpus", "toggles", "calls", "firings", "faults", "torn"}


def run_torture(image, *options: str):
    r = sdtgen("torture", str(image), "--run", "sched_run", "--arg", "20", "--json", *options)
    assert r.stderr == ""
    return r.returncode, json.loads(r.stdout)


@pytest.mark.parametrize(("cpus", "toggles"), [(2, 1000), (4, 1000), (8, 600)])
def test_the_safe_protocol_never_tears_nor_faults_on_x86_64(kernel, cpus, toggles):
    s = torture(str(kernel.image), "sched_run", [20], cpus=cpus, toggles=toggles, protocol="safe", seed=cpus,
                timeout=120)
    assert (s.faults, s.torn) == (0, 0)
    assert s.passed
    # The test exercised what it claims: CPUs ran into the transient breakpoint, armed sites fired.
    assert s.transient > 0 and s.firings > 0
    assert len(s.per_cpu_calls) == cpus and all(n > 0 for n in s.per_cpu_calls)


def test_the_naive_protocol_tears_and_the_same_seed_gives_the_same_summary(kernel):
    code, summary = run_torture(kernel.image, "--cpus", "4", "--toggles", "100", "--protocol", "naive",
                                "--seed", "1")
    assert code == 1
    assert set(summary) == KEYS
    assert summary["torn"] > 0 and summary["faults"] > 0
    assert run_torture(kernel.image, "--cpus", "4", "--toggles", "100", "--protocol", "naive", "--seed", "1") \
        == (code, summary)


def test_the_safe_protocol_passes_with_exit_0_and_replays(kernel):
    first = run_torture(kernel.image, "--cpus", "2", "--toggles", "50", "--seed", "9")
    assert first[0] == 0
    assert first[1]["protocol"] == "safe" and first[1]["cpus"] == 2 and first[1]["toggles"] == 50
    assert first[1]["faults"] == first[1]["torn"] == 0 and first[1]["calls"] > 0
    assert run_torture(kernel.image, "--cpus", "2", "--toggles", "50", "--seed", "9") == first


def test_wrong_values_count_as_faults(kernel, native):
    """The reference a torture call must return is the native value: a CPU returning anything else faults."""
    want = [e["return"] for e in native([Call("sched_run", (20,))]) if "return" in e]
    session = BootSession(str(kernel.image), Reporter(as_json=True, out=io.StringIO()), cpus=2)
    try:
        t = Torture(session, session.image.symbols["sched_run"].value, [20], toggles=0, timeout=20)
        assert [t.reference()] == want
        t.reference = lambda: want[0] + 1  # a wrong expectation stands for a wrong result
        t.prepare("sched_run")
        s = t.run()
        assert s.faults == s.calls == 2
    finally:
        session.close()


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_other_architectures_run_the_torture_test(arch_kernel, arch):
    image = arch_kernel(arch).image
    s = torture(str(image), "sched_run", [20], cpus=4, toggles=300, protocol="safe", seed=2, timeout=120)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0
    if arch == "aarch64":
        assert s.transient == 0  # every write is one aligned store: no breakpoint is ever transient
    if arch == "riscv64":
        assert s.transient > 0  # sched_run's tick site sits at 2 mod 4: written behind a c.ebreak
    naive = torture(str(image), "sched_run", [20], cpus=4, toggles=300, protocol="naive", seed=2, timeout=120)
    assert naive.torn > 0


def test_a_function_without_probes_is_one_line(kernel):
    r = sdtgen("torture", str(kernel.image), "--run", "kstrlen", "--arg", "0")
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1 and "no probe site" in r.stderr


def test_is_enabled_sites_toggle_under_the_protocol_too(freebsd_kernel):
    """hot_loop asks SDT_PROBE_ENABLED() each iteration: its check is rewritten between result 0 and 1."""
    image = str(freebsd_kernel("x86_64").image)
    s = torture(image, "hot_loop", [20], cpus=4, toggles=300, protocol="safe", seed=3, timeout=120)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0 and s.transient > 0
    assert torture(image, "hot_loop", [20], cpus=4, toggles=300, protocol="naive", seed=3, timeout=120).torn > 0


def test_a_function_that_faults_by_itself_is_one_line(kernel):
    r = sdtgen("torture", str(kernel.image), "--run", "vfs_lookup", "--arg", "0")
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1 and "faults on one CPU with nothing armed" in r.stderr


GOT_LOOP = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(gt);
SDT_PROBE_DEFINE1(gt, got, loop, tick, "long");
long spin(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++) {
		SDT_PROBE1(gt, got, loop, tick, i);
		s += i;
	}
	return s;
}
"""


def test_six_byte_x86_sites_are_one_instruction_in_both_states_so_the_safe_protocol_holds(tmp_path):
    """gcc -fPIC -fno-plt calls through the GOT; GNU ld relaxes it to a 6-byte `addr32 call`. Armed, the
    site is a 6-byte `cs call`, so no CPU is ever between two instructions of it when it is written."""
    from helpers import compile_c, final_link, partial_link, run

    obj = compile_c(tmp_path, "got", GOT_LOOP, "-mcmodel=small", "-fPIC", "-fno-plt")
    image = final_link(tmp_path, partial_link(tmp_path, "kernel", obj))
    disasm = run(["objdump", "-d", str(image)]).stdout
    assert "addr32 call" in disasm  # the site is the linker-relaxed 6-byte form
    s = torture(str(image), "spin", [20], cpus=4, toggles=300, protocol="safe", seed=4, timeout=120)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0 and s.transient > 0
    assert torture(str(image), "spin", [20], cpus=4, toggles=300, protocol="naive", seed=4, timeout=120).torn > 0


def test_eight_byte_riscv_sites_change_one_word_so_the_safe_protocol_holds(arch_kernel):
    """Built without relaxation every RISC-V site is auipc+jalr, 8 bytes; armed, only its first word changes."""
    image = arch_kernel("riscv64", RELAX="0").image
    session = BootSession(str(image), Reporter(out=io.StringIO()), cpus=2, arm="branch")
    try:
        session.enable(":::")
        assert {x.length for x in session.runtime.sites.values()} == {8}
        nop = session.image.arch.nop(4)
        for x in session.runtime.sites.values():  # a CPU paused after the first word runs a NOP either way
            assert session.machine.read(x.addr + 4, 4) == nop, hex(x.addr)
    finally:
        session.close()
    s = torture(str(image), "sched_run", [20], cpus=4, toggles=300, protocol="safe", seed=5, timeout=120)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0
