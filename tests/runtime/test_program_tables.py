"""A CPU's tables as the host reads them out of a kernel's memory: what the runtime wrote reads back, and bytes
that are not what it writes (a kernel that scribbled over its tables, a corrupted copy) are one AggTableError
naming the field, never a traceback of another kind, never a read past what the host attached."""

from __future__ import annotations

import ctypes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from programs import AGG_BYTES, FakeProbe, compile_for

from sdtgen.dscript.merge import Totals
from sdtgen.dscript.tables import AggTableError, attach_size, read_cpu
from sdtgen.layout import AGG, AGG_ENTRY

PROBE = FakeProbe("t", "m", "f", "n", ("long", "long"), 0x42)
SCRIPT = "t:m:f:n { @c[arg0] = count(); @q[arg0 & 1] = quantize(arg1); @[probename, arg0 & 3] = avg(arg1) }"


class Copy:
    """The struct sdt_agg and the arena bytes the runtime wrote, as a reader the test may corrupt; a read outside
    them fails as guest memory that is not mapped does."""

    def __init__(self, harness) -> None:
        self.agg = harness.lib.h_agg()
        raw = dict(zip(AGG.names(), AGG.struct(64).unpack(ctypes.string_at(self.agg, AGG.size(64))), strict=True))
        self.arena = raw["arena[0]"]
        self.memory = {self.agg: bytearray(ctypes.string_at(self.agg, AGG.size(64))),
                       self.arena: bytearray(ctypes.string_at(self.arena, raw["arena_size"]))}

    def read(self, addr: int, n: int) -> bytes:
        for base, data in self.memory.items():
            if base <= addr and addr + n <= base + len(data):
                return bytes(data[addr - base:addr - base + n])
        raise MemoryError(f"no memory at {addr:#x}+{n}")

    def field(self, name: str, value: int) -> None:
        off = AGG.offset(name.split("[")[0], 64) + (8 * int(name[-2]) if name.endswith("]") else 0)
        self.memory[self.agg][off:off + 8] = value.to_bytes(8, "little")

    def tables(self):
        return read_cpu(self.read, self.agg, 64, halves=(0,), given=AGG_BYTES)


@pytest.fixture
def filled(harness):
    compiled = compile_for(SCRIPT, [PROBE])
    for v in range(40):
        harness.fire(compiled.programs[0].code, PROBE.key, [v, v * v])
    return compiled, Copy(harness)


def test_the_tables_read_back_as_the_runtime_wrote_them(harness, filled):
    compiled, copy = filled
    t = copy.tables()
    assert len(t.entries) == 40 + 2 + 4 and t.dropped == 0
    assert attach_size(AGG_BYTES) == tuple(dict(zip(AGG.names(), AGG.struct(64).unpack(copy.read(copy.agg,
                                                                                                   AGG.size(64))),
                                                    strict=True))[f] for f in ("nindex", "arena_size"))
    totals = Totals(compiled.aggregations, compiled.names)
    totals.add(t)
    rows = totals.rows[compiled.aggregations[2].id]
    assert {tuple(k.shown for k in keys): v for keys, v in rows.items()} == {
        ("n", r): [10, sum(v * v for v in range(r, 40, 4))] for r in range(4)}


@pytest.mark.parametrize(("corrupt", "says"), [
    (lambda c: c.field("self", 0x1000), r"is not one \(its self field is 0x1000\)"),
    (lambda c: c.field("arena_size", 1 << 40), r"claims \d+ index slots and 1099511627776-byte arenas, not what "
     r"65536 bytes make"),
    (lambda c: c.field("used[0]", 1 << 40), r"half 0 claims 1099511627776 bytes used"),
    (lambda c: c.field("used[0]", 12), r"half 0 claims 12 bytes used"),
    (lambda c: c.field("used[0]", 24), r"half 0's entry at offset 0 \(1 keys, 1 values\) runs past the 24 bytes "
     r"used"),
    (lambda c: c.field("used[0]", 40), r"half 0 ends inside an entry at offset 32"),
    (lambda c: c.field("entries[0]", 3), r"half 0 holds \d+ entries, its count says 3"),
    (lambda c: c.memory[c.arena].__setitem__(slice(8, 10), (5).to_bytes(2, "little")), r"claims 5 keys and 1 values"),
    (lambda c: c.memory[c.arena].__setitem__(slice(10, 12), (0).to_bytes(2, "little")), r"claims 1 keys and 0 values"),
])
def test_tables_that_are_not_what_the_runtime_writes_are_refused_naming_the_field(filled, corrupt, says):
    _, copy = filled
    corrupt(copy)
    with pytest.raises(AggTableError, match=says):
        copy.tables()


def test_an_entry_no_program_made_or_of_another_shape_is_refused_when_merged(filled):
    compiled, copy = filled
    t = copy.tables()
    totals = Totals(compiled.aggregations[1:], compiled.names)
    with pytest.raises(AggTableError, match=r"CPU 0's tables hold aggregation 1, which no program has"):
        totals.add(t)
    other = compile_for("t:m:f:n @c[arg0, arg1] = count()", [PROBE])
    with pytest.raises(AggTableError, match=r"entry of @c has 1 keys and 1 values, not 2 and 1"):
        Totals(other.aggregations, other.names).add(t)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, AGG.size(64) + 400), st.integers(0, 255)), min_size=1, max_size=6))
def test_any_corruption_is_read_or_refused_as_tables_never_a_crash(filled, flips):
    _, base = filled
    copy = Copy.__new__(Copy)
    copy.agg, copy.arena = base.agg, base.arena
    copy.memory = {k: bytearray(v) for k, v in base.memory.items()}
    for at, value in flips:
        region, off = (copy.agg, at) if at < AGG.size(64) else (copy.arena, at - AGG.size(64))
        copy.memory[region][off] = value
    try:
        t = copy.tables()
    except (AggTableError, MemoryError):  # MemoryError: the copy's own "unmapped" (an arena moved by the flips)
        return
    assert all(len(e.keys) <= 4 and 1 <= len(e.values) <= 1024 for e in t.entries)
    assert sum(AGG_ENTRY.size(64) + 8 * (len(e.keys) + len(e.values)) for e in t.entries) <= attach_size(AGG_BYTES)[1]


def test_an_entry_that_exactly_fills_the_rest_of_the_arena_is_kept(harness):
    """One-key quantize() entries (their size read back from the first one written), in memory sized so the
    arena holds exactly N of them: N distinct keys are all kept, the last ending at the arena's last byte, and
    only the (N+1)-th is dropped (counted)."""
    from sdtgen.layout import VALUES

    compiled = compile_for("t:m:f:n { @q[arg0] = quantize(arg1) }", [PROBE])
    code = compiled.programs[0].code

    def agg() -> dict:
        raw = ctypes.string_at(harness.lib.h_agg(), AGG.size(64))
        return dict(zip(AGG.names(), AGG.struct(64).unpack(raw), strict=True))

    harness.attach(AGG_BYTES)
    harness.fire(code, PROBE.key, [0, 1])
    size = agg()["used[0]"]
    assert size
    nbytes = VALUES["SDT_AGG_MIN_BYTES"]
    while True:  # the smallest memory whose arena is a whole number (more than one) of entries
        harness.attach(nbytes)
        a = agg()
        if a["arena_size"] % size == 0 and a["arena_size"] // size > 1:
            break
        nbytes += 8
    n = a["arena_size"] // size
    assert n < a["nindex"] * 3 // 4  # the index has room for every one: only the arena decides
    for k in range(n):
        harness.fire(code, PROBE.key, [k, 1])
    t = harness.tables(halves=(0,))
    assert (len(t.entries), t.dropped, agg()["used[0]"]) == (n, 0, a["arena_size"])
    harness.fire(code, PROBE.key, [n, 1])
    t = harness.tables(halves=(0,))
    assert (len(t.entries), t.dropped) == (n, 1)
