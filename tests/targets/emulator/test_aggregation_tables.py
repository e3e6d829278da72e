"""Predicates and aggregations in the emulated boot of the fixture kernel, on all four architectures, in both
arming modes, with two CPUs firing at once: every CPU's table holds exactly what the native run's firings of the
same calls make (count, sum, min, max, avg, each quantize and lquantize bucket), a division by zero is one error
on the CPU it happened on, and a clause with a predicate and no aggregation records only the firings that pass.
The native run is the fixture's C compiled for this machine (tools/native.py); the expected values are the
test's own (tests/dscript_oracle.py), not the compiler's. (Probes whose arguments depend on memory the CPUs
share, as kobj_ref's count, are left out: two CPUs running kmain at once race on it.)"""

from __future__ import annotations

import io

import pytest
from dscript_oracle import (
    CTYPES,
    CTYPES_ILP32,
    Fault,
    aggregate,
    divides_by_constant_zero,
    evaluate,
    expressions,
    registers,
    render,
)
from guest_programs import GuestPrograms, build_image
from helpers import ARCHES
from hypothesis import given, settings
from hypothesis import strategies as st
from native_oracle import Call, run_native

from sdtgen.arch import by_name
from sdtgen.dscript import compile_script
from sdtgen.errors import SdtError
from sdtgen.layout import SLOT
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

CPUS = 2
CALLS = [Call("kmain", (1,)), Call("kmain", (2,)), Call("sched_run", (40,)), Call("vfs_lookup_id", (1,)),
         Call("vfs_lookup_id", (2,)), Call("kmem_alloc", (-5,)), Call("kmem_alloc", (70000,)),
         Call("kmem_alloc", (300,)), Call("proc_exec", (3,)), Call("kmain", (4,))]
SCRIPT = """
hk:sched:run:tick { @ticks[cpu] = count(); @acc[cpu] = sum(arg1); @lo[cpu] = min(arg1 - 1000);
    @hi[cpu] = max(arg1); @mean[cpu] = avg(arg0); @q[cpu] = quantize(arg1); @lq[cpu] = lquantize(arg0, 0, 40, 3) }
hk:mem:alloc:entry, hk:mem:alloc:fail /arg0 > 0/ @sizes[cpu, probename] = quantize(arg0)
hk:vfs:lookup:component /arg0 == "usr" || arg1 > 3/ @comp[cpu, probefunc] = count()
hk:proc:exec:exec-success @execs[cpu, probename] = sum(arg1)
hk:sched:run:tick /arg1 / (arg0 - 5) > 1000/ @div[cpu] = count()
hk:kern:main:five /arg0 % 2 == 0/
"""


def signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def expected(firings: list[dict], cpu: int) -> tuple[dict, int, int]:
    """Per aggregation, its rows for CPU ``cpu`` from the native firings (the test's reading of the script); the
    divisions by zero; the five-argument firings the predicate passes."""
    def args(probe: str) -> list[list]:
        # native prints int as %d, long as %llu: a long is read back as the signed value C holds
        return [[signed(a) if isinstance(a, int) else a for a in f["args"]] for f in firings if f["probe"] == probe]

    tick = args("hk:sched:run:tick")
    acc, i = [a[1] for a in tick], [a[0] for a in tick]
    rows: dict[str, dict] = {
        "ticks": {(cpu,): aggregate("count", acc)}, "acc": {(cpu,): aggregate("sum", acc)},
        "lo": {(cpu,): aggregate("min", [v - 1000 for v in acc])}, "hi": {(cpu,): aggregate("max", acc)},
        "mean": {(cpu,): aggregate("avg", i)}, "q": {(cpu,): aggregate("quantize", acc)},
        "lq": {(cpu,): aggregate("lquantize", i, 0, 3, 13)}}
    sizes = {}
    for name in ("entry", "fail"):
        vs = [a[0] for a in args(f"hk:mem:alloc:{name}") if a[0] > 0]
        if vs:
            sizes[(cpu, name)] = aggregate("quantize", vs)
    rows["sizes"] = sizes
    comp = [a for a in args("hk:vfs:lookup:component") if a[0] == "usr" or a[1] > 3]
    rows["comp"] = {(cpu, "lookup"): aggregate("count", comp)} if comp else {}
    rows["execs"] = {(cpu, "exec-success"): aggregate("sum", [a[1] for a in args("hk:proc:exec:exec-success")])}
    passing = [1 for a in tick if a[0] != 5 and int(a[1] / (a[0] - 5)) > 1000]  # C divides toward zero
    rows["div"] = {(cpu,): [len(passing)]} if passing else {}
    zero = sum(1 for a in tick if a[0] == 5)
    five = sum(1 for a in args("hk:kern:main:five") if a[0] % 2 == 0)
    return rows, zero, five


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    built: dict[str, object] = {}

    def get(arch: str):
        if arch not in built:
            built[arch] = build_image(tmp_path_factory.mktemp(f"agg-{arch}"), arch)
        return built[arch]

    return get


@pytest.mark.parametrize("mode", ["trap", "branch"])
@pytest.mark.parametrize("arch", ARCHES)
def test_the_cpus_tables_hold_exactly_what_the_native_firings_make(images, native_exe, arch, mode):
    image = images(arch)
    firings = [e for e in run_native(native_exe, CALLS) if "probe" in e]
    s = open_session("emulator", str(image), Reporter(as_json=True, out=io.StringIO()), cpus=CPUS, arm=mode)
    try:
        programs = GuestPrograms(s)
        compiled = compile_script(SCRIPT, s.probes, s.image.arch.bits, source="test")
        assert programs.enable(compiled, mode) > 0
        for c in CALLS:
            s.run(f"{c.function}:long", list(c.args))
        totals = programs.totals(compiled)
        got = {a.name: {tuple(k.shown for k in keys): v for keys, v in totals.rows.get(a.id, {}).items()}
               for a in compiled.aggregations}
        want: dict[str, dict] = {a.name: {} for a in compiled.aggregations}
        for cpu in range(CPUS):
            rows, zero, five = expected(firings, cpu)
            for name, r in rows.items():
                want[name].update(r)
            assert totals.errors[cpu] == zero, f"CPU {cpu}'s divisions by zero"
            assert totals.nested[cpu] == 0 and totals.dropped[cpu] == 0
        assert got == want
        assert s.hits.get("hk:kern:main:five", 0) == CPUS * five, "the predicate-only clause records what passes"
        assert five < len([f for f in firings if f["probe"] == "hk:kern:main:five"]), "and not the others"
        assert set(s.hits) == {"hk:kern:main:five"}, "aggregating clauses record nothing"

        # Detached and disarmed: the slots are NULL again, the sites off; armed plainly, every firing records.
        assert programs.disable("hk:::") > 0
        bits = by_name(arch).bits  # every session's program in the slot NULL (docs/sessions.md)
        programs_at, width = SLOT.offset("program", bits), bits // 8
        assert all(s.target.machine.read(p.program + programs_at, 8 * width) == bytes(8 * width) for p in s.probes)
        s.enable("hk:sched:run:tick")
        before = s.hits.get("hk:sched:run:tick", 0)
        s.run("sched_run:long", [7])
        assert s.hits["hk:sched:run:tick"] - before == CPUS * 7
        assert programs.totals(compiled).rows == totals.rows, "a detached program aggregates nothing more"
    finally:
        s.close()


# -- the evaluator of each architecture's cross build, against the test's model of C ---------------------------
@pytest.fixture(scope="module")
def evaluators(images):
    """arch -> a boot of the image with CPU 0's program state attached, for firings one at a time."""
    made: dict[str, GuestPrograms] = {}

    def get(arch: str) -> GuestPrograms:
        if arch not in made:
            made[arch] = GuestPrograms(open_session("emulator", str(images(arch)),
                                                    Reporter(as_json=True, out=io.StringIO())))
        return made[arch]

    yield get
    for g in made.values():
        g.s.close()


class FiringProbe:
    """agg_support.c's probe as the random expressions are compiled for it: its key, the argument types drawn."""

    def __init__(self, key: int, types: tuple[str, ...]) -> None:
        self.provider, self.module, self.function, self.name = "agg", "test", "fire", "six"
        self.args, self.key, self.spec = types, key, "agg:test:fire:six"


@pytest.mark.parametrize("arch", ARCHES)
def test_each_architecture_s_evaluator_computes_what_c_does(evaluators, arch):
    """Random expressions as keys and predicates of a probe armed in either mode: its site, its recorder (the
    guard there), sdt_program_fire and the tables of the architecture's cross build, against the model of C."""
    g = evaluators(arch)
    bits = g.bits
    table = CTYPES if bits == 64 else CTYPES_ILP32
    word = (1 << bits) - 1
    key = next(p.key for p in g.s.probes if p.spec == "agg:test:fire:six")

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(data=st.data())
    def check(data):
        types = data.draw(st.lists(st.sampled_from(sorted(table)), min_size=6, max_size=6), label="types")
        expr = data.draw(expressions(6, depth=4, table=table), label="expr")
        predicate = data.draw(st.booleans(), label="predicate")
        mode = data.draw(st.sampled_from(["trap", "branch"]), label="mode")
        source = render(expr, data.draw(st.booleans(), label="minimal"))
        text = f"agg:test:fire:six /{source}/" if predicate else f"agg:test:fire:six @[{source}] = count()"
        typemap = dict(enumerate(types))
        probe = FiringProbe(key, tuple(types))
        if divides_by_constant_zero(expr, typemap, table):
            with pytest.raises(SdtError, match="by zero"):
                compile_script(text, [probe], bits)
            return
        compiled = compile_script(text, [probe], bits)
        args = [a & word for a in data.draw(st.lists(registers(), min_size=6, max_size=6), label="args")]
        recorded = g.fire(compiled, mode, args)
        tables = g.cpu_tables()
        try:
            value = evaluate(expr, typemap, args, 0, table)
        except Fault:
            assert (recorded, tables.entries, tables.errors) == (0, [], 1), text
            return
        if predicate:
            assert recorded == int(value != 0), text
        else:
            assert (recorded, [(e.keys, e.values) for e in tables.entries]) == (0, [((value,), (1,))]), text

    check()
