"""What the runtime takes away, it takes only once no CPU still runs it (tests/runtime/hosted/hold.c on the
hosted platform, the real CPU): a thread is held inside sdt_trap for a loaded module's site (the clock its
recorder reads waits) while sdt_module_unload runs, and inside a probe's program (its string read faults, and
the handler waits) while sdt_disable_program runs. Each call must return only after the held thread left: the
thread's own flag, set as it comes out, says whether it had. An unload with no program of its module's to wait
for must not wait for a CPU in another probe's program. No time is measured."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import ROOT, SDTGEN, run
from probe_source import called_probes
from programs import FakeProbe, compile_for

from sdtgen.probes import probe_key

HERE = ROOT / "tests" / "runtime" / "hosted"


@pytest.fixture(scope="module")
def hold(tmp_path_factory):
    out = tmp_path_factory.mktemp("hold")
    run(["make", "-C", str(ROOT / "fixtures" / "process"), f"O={out}", f"SDTGEN={SDTGEN}",
         f"KERNEL_SRCS={HERE / 'hold.c'}", "KERNEL_CFLAGS=", "PROGRAM_SRCS=", "EXE=hold"])
    return out / "hold"


def held(hold, tmp_path, *argv: str) -> list[dict]:
    trace = tmp_path / "trace"
    shutil.rmtree(trace, ignore_errors=True)
    trace.mkdir()
    proc = run([str(hold), str(trace), *argv], timeout=120)
    return [json.loads(x) for x in proc.stdout.splitlines()]


def test_module_unload_waits_for_a_cpu_inside_sdt_trap_for_the_module(hold, tmp_path):
    lib = tmp_path / "lib"
    run(["make", "-C", str(ROOT / "fixtures" / "module"), "DLOPEN=1", f"O={lib}", f"SDTGEN={SDTGEN}"])
    lines = held(hold, tmp_path, "unload", str(lib / "libhkm.so"))
    assert lines[0] == {"returned": 3, "left": 1}  # its three armed sites disarmed, after the held CPU left


def test_disable_program_waits_for_a_cpu_still_running_the_detached_program(hold, tmp_path):
    (probe,) = [p for p in called_probes(HERE) if p.spec == "hh:hold:str:fire"]
    fake = FakeProbe("hh", "hold", "str", "fire", ("char *",), probe_key(probe.symbol))
    (program,) = compile_for('hh:hold:str:fire /arg0 == "held"/ { @n = count(); }', [fake]).programs
    (tmp_path / "program").write_bytes(program.code)
    lines = held(hold, tmp_path, "program", str(tmp_path / "program"))
    assert lines[0] == {"enabled": 1}
    assert lines[1] == {"returned": 1, "left": 1}  # its site disarmed, after the held CPU left the program


def test_module_unload_does_not_wait_for_a_cpu_in_a_program_of_another_probe(hold, tmp_path):
    """A module none of whose probes has a program is unloaded while a CPU runs the kernel's probe's program: the
    unload has no program of its own to wait for, and returns while that CPU is still inside (it stays there
    until the unload returned: an unload that waited for it would return only once the hold gave up)."""
    lib = tmp_path / "lib"
    run(["make", "-C", str(ROOT / "fixtures" / "module"), "DLOPEN=1", f"O={lib}", f"SDTGEN={SDTGEN}"])
    (probe,) = [p for p in called_probes(HERE) if p.spec == "hh:hold:str:fire"]
    fake = FakeProbe("hh", "hold", "str", "fire", ("char *",), probe_key(probe.symbol))
    (program,) = compile_for('hh:hold:str:fire /arg0 == "held"/ { @n = count(); }', [fake]).programs
    (tmp_path / "program").write_bytes(program.code)
    lines = held(hold, tmp_path, "beside", str(tmp_path / "program"), str(lib / "libhkm.so"))
    assert lines[0] == {"enabled": 1}
    assert lines[1] == {"returned": 0, "left": 0}  # no site armed to disarm; the CPU in the program still there
