"""The source oracle itself: it must know every probe the compiled fixture calls, by the symbol."""

from __future__ import annotations

from helpers import FIXTURE, run
from probe_source import called_probes, defined_probes


def undefined_probe_symbols(objects) -> set[str]:
    out = set()
    for obj in objects:
        for line in run(["nm", "-u", str(obj)]).stdout.splitlines():
            name = line.split()[-1]
            if name.startswith("__dtrace_sdt_"):
                out.add(name)
    return out


def test_the_oracle_names_every_probe_symbol_the_compiler_emitted(kernel):
    objects = [o for o in kernel.dir.glob("*.o") if o.name not in ("kernel.o",) and "_sdt_" not in o.name]
    assert len(objects) == 6
    assert {p.symbol for p in called_probes(FIXTURE)} == undefined_probe_symbols(objects)


def test_defined_probes_keep_their_declared_types_and_a_direct_call_declares_none():
    by_spec = {p.spec: p for p in called_probes(FIXTURE)}
    assert by_spec["hk:sched:switch:six"].args == ("int", "int", "int", "int", "long", "unsigned long")
    assert by_spec["hk:proc:exec:exec-success"].symbol == "__dtrace_sdt_hk_proc_exec_exec__success"
    assert by_spec["hk:::boot"].symbol == "__dtrace_sdt_hk___boot" and by_spec["hk:::boot"].args == ()
    assert by_spec["raw:::checksum"].args == ()
    assert len(by_spec) == len(defined_probes(FIXTURE)) + 1
