"""A dlopened module's firings in the process's trace: the trace's metadata (gen's, of the program) declares only
the program's probes, so babeltrace2 stops at the module's first event; the module's own declarations
(fixtures/module's CLOCK_HZ, gen --module --ctf-metadata with the program's clock) appended to it, as
docs/runtime.md says, make babeltrace2 read every event: the module's as its C runs natively, and the program's."""

from __future__ import annotations

import subprocess

from helpers import SDTGEN, need_tool, run
from module_native import MODULE, module_firings
from test_process import build_process

CALLS = [2, 5]


def test_the_modules_declarations_appended_to_the_programs_let_babeltrace_read_its_firings(tmp_path):
    babeltrace = need_tool("babeltrace2", "babeltrace2")
    exe = build_process(tmp_path / "process")
    lib = tmp_path / "lib"
    run(["make", "-C", str(MODULE), "DLOPEN=1", f"O={lib}", f"SDTGEN={SDTGEN}", "CLOCK_HZ=1000000000",
         "CLOCK_NAME=tsc_ns"])  # the clock fixtures/process gives gen: the two headers must agree
    trace = tmp_path / "trace"
    trace.mkdir()
    argv = ["enable", "hkm:::", "trap", "dlopen", str(lib / "libhkm.so"), "enable", "hk:vfs::", "trap"]
    argv += [w for n in CALLS for w in ("run", f"hkm_work,{n}")] + ["run", "vfs_lookup_id,0"]
    run([str(exe), "--trace", str(trace), *argv], timeout=300)

    run(["cp", str(tmp_path / "process" / "metadata"), str(trace / "metadata")])
    alone = run([babeltrace, str(trace)], check=False)
    assert alone.returncode != 0 and "No event class with ID" in alone.stderr  # the module's ids are unknown

    # docs/runtime.md's command: the module's event blocks after the program's metadata
    subprocess.run(f"sed -n '/^event {{/,$p' {lib / 'hkm_metadata'} >> {trace / 'metadata'}", shell=True,
                   check=True)
    shown = run([babeltrace, str(trace)]).stdout.splitlines()
    module = [line.split("] ", 1)[1].split(":", 3)[2:] for line in shown if " hkm:" in line]
    (tmp_path / "native").mkdir()
    native = module_firings(tmp_path / "native", CALLS)
    want = [[e["probe"].split(":", 2)[2], ", ".join(f"arg{i} = {a!r}".replace("'", '"')
                                                   for i, a in enumerate(e["args"]))]
            for e in native if "probe" in e]
    got = [[f"{fn}:{rest.split(':', 1)[0]}", rest.rsplit("{ ", 1)[1].removesuffix(" }")] for fn, rest in module]
    assert got == want and len(got) == sum(CALLS) + 2 * len(CALLS)  # each step, then dev and done
    assert any(" hk:vfs:lookup:entry: " in line for line in shown)  # the program's own events, as before
