"""Compiled programs run by the runtime's own C (sdt_program_fire, the evaluator, the tables) on this machine,
against the test's model of C's integer semantics (tests/dscript_oracle.py) and DTrace's aggregating
functions written from their definitions, on random inputs."""

from __future__ import annotations

import ctypes

import pytest
from dscript_oracle import (
    CTYPES,
    Fault,
    divides_by_constant_zero,
    evaluate,
    expressions,
    lquantize_bucket,
    quantize_bucket,
    registers,
    render,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from programs import FakeProbe, compile_for

from sdtgen.errors import SdtError
from sdtgen.layout import RANGE, VALUES

M = (1 << 64) - 1
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
TYPES = sorted(CTYPES)


def probe_with(types: list[str], key: int = 0x5EED) -> FakeProbe:
    return FakeProbe("t", "m", "f", "n", tuple(types), key)


def one_program(compiled):
    [program] = compiled.programs
    return program


@SETTINGS
@given(data=st.data())
def test_an_expression_s_value_is_the_key_it_aggregates_under(harness, data):
    types = data.draw(st.lists(st.sampled_from(TYPES), min_size=6, max_size=6), label="types")
    expr = data.draw(expressions(6, depth=4), label="expr")
    text = f"t:m:f:n @[{render(expr, data.draw(st.booleans(), label='minimal'))}] = count()"
    typemap = dict(enumerate(types))
    probe = probe_with(types)
    if divides_by_constant_zero(expr, typemap):
        with pytest.raises(SdtError, match=r"clause 1 .*(divides by zero|remainder of a division by zero)"):
            compile_for(text, [probe])
        return
    program = one_program(compile_for(text, [probe]))
    args = data.draw(st.lists(registers(), min_size=6, max_size=6), label="args")
    cpu = data.draw(st.integers(0, 5), label="cpu")
    harness.attach(cpu=cpu)
    assert harness.fire(program.code, probe.key, args) == 0, "an aggregating clause records nothing"
    tables = harness.tables()
    try:
        expected = evaluate(expr, typemap, args, cpu)
    except Fault:
        assert (tables.entries, tables.errors) == ([], 1), text
        return
    assert [(e.keys, e.values) for e in tables.entries] == [((expected,), (1,))], text
    assert tables.errors == 0


@SETTINGS
@given(data=st.data())
def test_a_predicate_records_a_firing_when_it_is_not_zero(harness, data):
    types = data.draw(st.lists(st.sampled_from(TYPES), min_size=6, max_size=6), label="types")
    expr = data.draw(expressions(6, depth=4), label="expr")
    text = f"t:m:f:n /{render(expr, data.draw(st.booleans(), label='minimal'))}/"
    typemap = dict(enumerate(types))
    if divides_by_constant_zero(expr, typemap):
        return
    probe = probe_with(types)
    program = one_program(compile_for(text, [probe]))
    args = data.draw(st.lists(registers(), min_size=6, max_size=6), label="args")
    harness.attach()
    recorded = harness.fire(program.code, probe.key, args)
    try:
        expected = int(evaluate(expr, typemap, args) != 0)
    except Fault:
        assert (recorded, harness.tables().errors, harness.guarded) == (0, 1, False), text
        return
    assert recorded == expected, text
    assert not (harness.guarded and harness.tables().errors), "a firing the guard turns away runs nothing"


def test_a_conditional_with_a_constant_condition_has_the_type_of_the_whole(harness):
    """`1 ? arg : 0u` is the argument converted as C converts both branches: a char of -128 compared as the
    unsigned 0xff..80, never as the char it was (found by the random tests above)."""
    probe = probe_with(["char"] * 6)
    args = [0, 0, 0, 0, 0, 128]
    program = one_program(compile_for("t:m:f:n /cpu < (1 ? arg5 : 0u)/", [probe]))
    harness.attach()
    assert harness.fire(program.code, probe.key, args) == 1
    program = one_program(compile_for("t:m:f:n @[(1 ? arg5 : 0u) > 5] = count()", [probe]))
    harness.attach()
    harness.fire(program.code, probe.key, args)
    assert [e.keys for e in harness.tables().entries] == [(1,)]


def test_dtraces_slash_divides_inside_a_predicate_and_closes_it_at_its_end(harness):
    probe = probe_with(["int", "int"])
    program = one_program(compile_for("t:m:f:n /arg0 / 2 > arg1 / 3/\n", [probe]))
    assert [harness.fire(program.code, probe.key, [a, b]) for a, b in ((10, 12), (10, 15), (10, 11))] == [1, 0, 1]


EDGES = [0, 127, 128, 255, 256, -129, 2**31 - 1, -2**31, 2**31, 2**32 - 1, -1, 2**63 - 1]


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ctype=st.sampled_from(TYPES), op=st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
       constant=st.one_of(st.integers(-300, 300), st.sampled_from(EDGES)), unsigned=st.booleans(),
       registers=st.lists(registers(), min_size=8, max_size=8))
def test_the_recorders_guard_passes_exactly_the_firings_whose_first_test_holds(harness, ctype, op, constant,
                                                                              unsigned, registers):
    """A predicate that is one test of an argument against a constant becomes the program's guard: the recorder
    makes it as one subtraction and one comparison (sdt_guard). The guard sdtgen.dscript computes, and the
    firing through the C guard and the program, against the test itself evaluated as C does, for every
    argument type and comparison."""
    from dscript_oracle import Arg, Bin, Lit, Un

    from sdtgen.dscript.program import NO_GUARD, decode

    suffix = "u" if unsigned and constant >= 0 else ""
    probe = probe_with([ctype])
    program = one_program(compile_for(f"t:m:f:n /arg0 {op} {constant}{suffix}/", [probe]))
    arg, shift, flip, lo, span = decode(program.code).guard
    expr = Bin(op, Arg(0), Un("-", Lit(-constant)) if constant < 0 else Lit(constant, suffix))
    for reg in registers:
        holds = evaluate(expr, {0: ctype}, [reg]) != 0
        assert harness.fire(program.code, probe.key, [reg]) == int(holds), (ctype, op, constant, reg)
        if (arg, shift, flip, lo, span) != NO_GUARD:  # always or never true: the program decides alone
            y = ((reg << shift) & M) ^ (flip << 63)
            assert (((y - lo) & M) <= span) == holds == (not harness.guarded), (ctype, op, constant, reg)


# -- strings ---------------------------------------------------------------------------------------------------
COMPARE = ["==", "!=", "<", "<=", ">", ">="]
MAX_STRING = VALUES["SDT_MAX_STRING"]


def strcmp_holds(op: str, a: bytes, b: bytes) -> bool:
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def c_string(data: bytes) -> str:
    return '"' + "".join(chr(c) if 32 <= c < 127 and c not in b'"\\' else f"\\x{c:02x}" for c in data) + '"'


text_bytes = st.binary(max_size=8).map(lambda b: bytes(c or 1 for c in b))


@SETTINGS
@given(arg=st.one_of(text_bytes, st.binary(min_size=120, max_size=300).map(lambda b: bytes(c or 1 for c in b))),
       constant=text_bytes, op=st.sampled_from(COMPARE), flipped=st.booleans())
def test_a_string_argument_compares_with_a_constant_as_strcmp_orders_them(harness, arg, constant, op, flipped):
    probe = probe_with(["const char *", "int"])
    cond = f"{c_string(constant)} {op} arg0" if flipped else f"arg0 {op} {c_string(constant)}"
    program = one_program(compile_for(f"t:m:f:n /{cond}/", [probe]))
    harness.attach()
    copied = arg[:MAX_STRING]  # what the recorder would copy of it: the kernel compares that
    expected = strcmp_holds(op, constant, copied) if flipped else strcmp_holds(op, copied, constant)
    assert harness.fire(program.code, probe.key, [harness.string(arg), 0]) == int(expected), cond


def test_a_string_argument_is_compared_as_far_as_a_recorder_copies_it(harness):
    """The first SDT_MAX_STRING (127) bytes: a longer string equals its first 127 bytes, as its event would."""
    probe = probe_with(["const char *"])
    program = one_program(compile_for(f't:m:f:n /arg0 == "{"x" * MAX_STRING}"/', [probe]))
    assert harness.fire(program.code, probe.key, [harness.string(b"x" * 200)]) == 1
    assert harness.fire(program.code, probe.key, [harness.string(b"x" * (MAX_STRING - 1))]) == 0


def test_a_string_is_read_only_inside_readable_memory(harness):
    """NULL, or a pointer outside the kernel's ranges: the clause stops and the CPU counts an error; a string
    running to the end of a range is the bytes up to there."""
    probe = probe_with(["const char *"])
    program = one_program(compile_for('t:m:f:n /arg0 == "abc"/', [probe]))
    text = ctypes.create_string_buffer(b"abcdef")
    ranges = (ctypes.c_uint64 * 2)(ctypes.addressof(text), 3)  # only "abc" is readable
    assert RANGE.size(64) == 16
    harness.lib.h_readable(ranges, 1)
    try:
        harness.attach()
        assert harness.fire(program.code, probe.key, [ctypes.addressof(text)]) == 1
        assert harness.fire(program.code, probe.key, [ctypes.addressof(text) + 1]) == 0  # "bc"
        assert harness.tables().errors == 0
        assert harness.fire(program.code, probe.key, [0]) == 0
        assert harness.fire(program.code, probe.key, [ctypes.addressof(text) + 3]) == 0
        assert harness.tables().errors == 2
    finally:
        harness.lib.h_readable(None, 0)


# -- names -----------------------------------------------------------------------------------------------------
NAMED = [FakeProbe("io", "disk", "read", "entry", ("int",), 0x101), FakeProbe("io", "disk", "read", "return", ("int",),
         0x102), FakeProbe("io", "net", "send", "entry", ("int",), 0x203), FakeProbe("fs", "vfs", "read", "entry",
         ("int",), 0x304)]


def test_probe_names_are_resolved_on_the_host_into_sets_of_probe_keys(harness):
    compiled = compile_for('io:::,fs::: /probefunc == "read" && probename != "return" || probemod > "m"/ '
                           "@[probefunc, probename, probeprov] = sum(arg0)", NAMED)
    [program] = compiled.programs
    assert program.keys == tuple(sorted(p.key for p in NAMED))
    harness.attach()
    for p in NAMED:
        for v in (1, 2, 3):
            harness.fire(program.code, p.key, [v * p.key])
    rows = harness.totals(compiled).rows[compiled.aggregations[0].id]
    shown = {tuple(k.shown for k in keys): v for keys, v in rows.items()}
    # read:entry of io and fs pass; read:return does not; send (module "net" > "m") passes
    assert shown == {("read", "entry", "io"): [6 * 0x101], ("send", "entry", "io"): [6 * 0x203],
                     ("read", "entry", "fs"): [6 * 0x304]}


# -- the aggregating functions ---------------------------------------------------------------------------------
def signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


values64 = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-3000, 3000),
                     st.sampled_from([0, 1, -1, 1 << 62, -(1 << 62), (1 << 62) - 1, -(1 << 63), (1 << 63) - 1]))


@SETTINGS
@given(firings=st.lists(st.tuples(st.integers(0, 3), values64), min_size=1, max_size=60),
       low=st.integers(-50, 50), width=st.integers(1, 40), step=st.integers(1, 9))
def test_the_aggregating_functions_keep_what_dtrace_defines(harness, firings, low, width, step):
    high = low + width * step
    probe = probe_with(["int", "long"])
    compiled = compile_for(f"t:m:f:n {{ @c[arg0] = count(); @s[arg0] = sum(arg1); @mn[arg0] = min(arg1); "
                           f"@mx[arg0] = max(arg1); @a[arg0] = avg(arg1); @q[arg0] = quantize(arg1); "
                           f"@l[arg0] = lquantize(arg1, {low}, {high}, {step}) }}", [probe])
    program = one_program(compiled)
    harness.attach(1 << 18)
    for k, v in firings:
        assert harness.fire(program.code, probe.key, [k, v & M]) == 0
    totals = harness.totals(compiled)
    by = {a.name: totals.rows[a.id] for a in compiled.aggregations}
    levels = (high - low) // step
    for k in {k for k, _ in firings}:
        vs = [v for kk, v in firings if kk == k]
        key = next(keys for keys in by["c"] if keys[0].shown == k)
        assert by["c"][key] == [len(vs)]
        assert by["s"][key] == [sum(vs) & M]
        assert signed(by["mn"][key][0]) == min(vs) and signed(by["mx"][key][0]) == max(vs)
        assert by["a"][key] == [len(vs), sum(vs) & M]
        q = [0] * 127
        for v in vs:
            q[quantize_bucket(v)] += 1
        assert by["q"][key] == q
        lq = [0] * (levels + 2)
        for v in vs:
            lq[lquantize_bucket(v, low, step, levels)] += 1
        assert by["l"][key] == lq


def test_a_full_table_drops_updates_and_counts_every_one(harness):
    probe = probe_with(["long"])
    compiled = compile_for("t:m:f:n @[arg0] = count()", [probe])
    program = one_program(compiled)
    harness.attach(VALUES["SDT_AGG_MIN_BYTES"])  # 8 index slots a half: 6 entries
    for v in range(100):
        harness.fire(program.code, probe.key, [v % 20])
    tables = harness.tables()
    kept = sum(e.values[0] for e in tables.entries)
    assert len(tables.entries) == 6 and kept + tables.dropped == 100
    assert sorted(e.keys[0] for e in tables.entries) == [0, 1, 2, 3, 4, 5]


def test_a_switch_freezes_one_half_for_the_consumer_while_the_cpu_fills_the_other(harness):
    probe = probe_with(["long"])
    compiled = compile_for("t:m:f:n @[arg0] = sum(arg0)", [probe])
    program = one_program(compiled)
    for v in (1, 2, 2):
        harness.fire(program.code, probe.key, [v])
    assert harness.lib.h_switch() == 1
    for v in (2, 3):
        harness.fire(program.code, probe.key, [v])
    frozen = {e.keys[0]: e.values[0] for e in harness.tables(halves=(0,)).entries}
    live = {e.keys[0]: e.values[0] for e in harness.tables(halves=(1,)).entries}
    assert (frozen, live) == ({1: 1, 2: 4}, {2: 2, 3: 3})
    assert harness.lib.h_switch() == 1  # back to half 0, emptied first
    assert {e.keys[0]: e.values[0] for e in harness.tables(halves=(0,)).entries} == {}
    assert {e.keys[0]: e.values[0] for e in harness.tables(halves=(1,)).entries} == live


def test_a_cpu_without_program_state_records_nothing_of_a_probe_with_a_program(harness):
    probe = probe_with(["long"])
    program = one_program(compile_for("t:m:f:n /arg0 > 0/", [probe]))
    harness.attach(0)
    assert harness.fire(program.code, probe.key, [5]) == 0
    assert harness.lib.h_discarded() == 1


def test_a_firing_while_the_cpu_runs_a_program_is_counted_and_not_run(harness):
    """The CPU's seq is odd while it runs a program: what fires then (an interrupt) is counted in ``nested``.
    (test_program_threads.py interrupts real firings with signals.)"""
    from sdtgen.layout import AGG

    probe = probe_with(["long"])
    compiled = compile_for("t:m:f:n @ = count()", [probe])
    program = one_program(compiled)
    seq = ctypes.c_uint64.from_address(harness.lib.h_agg() + AGG.offset("seq", 64))
    harness.fire(program.code, probe.key, [1])
    seq.value |= 1
    assert harness.fire(program.code, probe.key, [1]) == 0
    seq.value += 1
    harness.fire(program.code, probe.key, [1])
    tables = harness.tables()
    assert [e.values for e in tables.entries] == [(2,)] and tables.nested == 1


def test_a_probe_is_keyed_only_by_the_probes_of_its_group():
    """Probes whose arguments differ in type get programs of their own; every program lists its probes."""
    probes = [FakeProbe("p", "m", "f", "a", ("int",), 1), FakeProbe("p", "m", "f", "b", ("unsigned int",), 2),
              FakeProbe("p", "m", "f", "c", ("int",), 3)]
    compiled = compile_for("p::: /arg0 < 0/", probes)
    assert sorted(p.keys for p in compiled.programs) == [(1, 3), (2,)]
    assert all(p.specs == ("p:::",) for p in compiled.programs)


def test_probes_only_some_clauses_match_get_programs_of_those_clauses():
    probes = [FakeProbe("p", "m", "f", "a", ("int",), 1), FakeProbe("p", "m", "f", "b", ("int",), 2)]
    compiled = compile_for("p:::a @x = count()\np::: /arg0 > 1/", probes)
    assert sorted((p.keys, p.clauses) for p in compiled.programs) == [((1,), (1, 2)), ((2,), (2,))]

