"""Signed arithmetic where a plausible bug hides from random inputs: equal operands of an ordered comparison, a
remainder or quotient of operands of opposite signs, an arithmetic shift of a negative value, each folded by the
compiler (constants) and run by the runtime's evaluator (arguments, and an immediate operand), against the same
expression compiled by gcc and run on this machine; min() and max() merged across CPUs that saw a negative and a
positive value, against DTrace's definition (signed) in Python's own integers."""

from __future__ import annotations

import pytest
from helpers import need_tool, run
from programs import FakeProbe, compile_for

from sdtgen.dscript.merge import Totals

M = (1 << 64) - 1

# (the expression, in D and in C alike; the arguments' C types; their values)
CASES = [
    ("arg0 <= arg1", ("long", "long"), (5, 5)),
    ("arg0 <= arg1", ("long", "long"), (-3, -3)),
    ("arg0 <= arg1", ("long", "long"), (-3, 2)),
    ("arg0 <= arg1", ("long", "long"), (2, -3)),
    ("arg0 <= arg1", ("unsigned long", "unsigned long"), (7, 7)),
    ("arg0 >= arg1", ("long", "long"), (-9, -9)),
    ("arg0 < arg1", ("long", "long"), (-9, -9)),
    ("arg0 > arg1", ("long", "long"), (-9, -9)),
    ("arg0 <= 4", ("long",), (4,)),
    ("arg0 <= -4", ("long",), (-4,)),
    ("arg0 >= -4", ("long",), (-4,)),
    ("7 % -2", (), ()),
    ("-7 % 2", (), ()),
    ("arg0 % arg1", ("long", "long"), (7, -2)),
    ("arg0 % arg1", ("long", "long"), (-7, 2)),
    ("arg0 % -2", ("long",), (7,)),
    ("arg0 % 2", ("long",), (-7,)),
    ("-8 >> 1", (), ()),
    ("arg0 >> 1", ("long",), (-8,)),
    ("arg0 >> arg1", ("long", "long"), (-8, 1)),
    ("arg0 >> 1", ("unsigned long",), ((1 << 64) - 8,)),
    ("arg0 >> 1", ("int",), (-8,)),
    ("10 / -3", (), ()),
    ("-10 / 3", (), ()),
    ("arg0 / -3", ("long",), (10,)),
    ("arg0 / arg1", ("long", "long"), (10, -3)),
    ("arg0 / arg1", ("long", "long"), (-10, 3)),
    ("arg0 / arg1", ("int", "int"), (-10, 3)),
]


def c_literal(value: int, ctype: str) -> str:
    return f"({ctype}){value}{'ull' if 'unsigned' in ctype else 'll'}"


@pytest.fixture(scope="module")
def native_values(tmp_path_factory) -> list[int]:
    """Every case's value as gcc computes it on this machine (arguments volatile: computed when it runs), as u64."""
    out = tmp_path_factory.mktemp("signed")
    lines = ["#include <stdio.h>", "int main(void)", "{"]
    for expr, types, values in CASES:
        decls = " ".join(f"volatile {t} arg{k} = {c_literal(v, t)};" for k, (t, v) in enumerate(zip(types, values,
                                                                                                   strict=True)))
        lines.append(f"\t{{ {decls} printf(\"%llu\\n\", (unsigned long long)(long long)({expr})); }}")
    lines += ["\treturn 0;", "}"]
    src = out / "signed.c"
    src.write_text("\n".join(lines) + "\n")
    exe = out / "signed"
    run([need_tool("gcc", "gcc"), "-O0", "-Wall", "-Werror", "-o", str(exe), str(src)])
    return [int(x) for x in run([str(exe)]).stdout.split()]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}@{c[2]}" for c in CASES])
def test_the_evaluator_and_the_compiler_compute_as_c_does(harness, native_values, case):
    expr, types, values = CASES[case]
    probe = FakeProbe("t", "m", "f", "n", types, 0x5EED)
    [program] = compile_for(f"t:m:f:n @[{expr}] = count()", [probe]).programs
    assert harness.fire(program.code, probe.key, [v & M for v in values]) == 0
    assert [(e.keys, e.values) for e in harness.tables().entries] == [((native_values[case],), (1,))], expr


@pytest.mark.parametrize("case", [k for k, c in enumerate(CASES) if c[0].split()[1] in ("<=", ">=", "<", ">")])
def test_a_comparison_as_a_predicate_records_as_c_decides(harness, native_values, case):
    """The same comparisons as predicates (with the recorder's guard when the first test is an argument against a
    constant): recorded exactly when gcc's value is 1."""
    expr, types, values = CASES[case]
    probe = FakeProbe("t", "m", "f", "n", types, 0x5EED)
    [program] = compile_for(f"t:m:f:n /{expr}/", [probe]).programs
    assert harness.fire(program.code, probe.key, [v & M for v in values]) == native_values[case], expr


@pytest.mark.parametrize("seen", [(-5, 3), (3, -5)])
def test_min_and_max_merged_across_cpus_are_signed(harness, seen):
    """Two CPUs' tables, one saw -5 and the other 3: DTrace's min is -5, its max 3 (signed), whichever CPU saw which."""
    probe = FakeProbe("t", "m", "f", "n", ("long",), 0x5EED)
    compiled = compile_for("t:m:f:n { @lo = min(arg0); @hi = max(arg0); @lo1[1] = min(arg0) }", [probe])
    [program] = compiled.programs
    totals = Totals(compiled.aggregations, compiled.names)
    for cpu, value in enumerate(seen):
        harness.attach(cpu=cpu)
        harness.fire(program.code, probe.key, [value & M])
        tables = harness.tables()
        assert tables.cpu == cpu
        totals.add(tables)
    by_name = {a.name: a.id for a in compiled.aggregations}
    signed = {name: {k: v[0] - (1 << 64) if v[0] >> 63 else v[0] for k, v in totals.rows[by_name[name]].items()}
              for name in by_name}
    assert [list(signed[n].values()) for n in ("lo", "hi", "lo1")] == [[min(seen)], [max(seen)], [min(seen)]]
