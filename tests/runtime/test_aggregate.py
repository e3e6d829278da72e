"""A CPU's aggregation tables (sdt_aggregate.c: sdt_agg_attach, the firing path's updates, sdt_agg_switch), run
natively through sdt_program_fire (program_harness.c) and read where the C declaration of struct sdt_agg puts
them: what a half holds (docs/aggregations.md, "What fits"), that attach makes a table of any memory, and that
the index spreads keys so a firing finds its entry in a few probes."""

from __future__ import annotations

import ctypes

import pytest
from programs import AGG_BYTES, FakeProbe, compile_for

from sdtgen.dscript.tables import read_cpu

PROBE = FakeProbe("t", "m", "f", "n", ("long", "long"), 0x42)
COUNT = "t:m:f:n { @c[arg0] = count() }"


@pytest.fixture
def lib(harness):
    for name in ("h_want", "h_nindex", "h_index", "h_arena", "h_entries", "h_dropped"):
        getattr(harness.lib, name).restype = ctypes.c_ulonglong
    harness.lib.h_agg_size.restype = ctypes.c_ulong
    return harness.lib


def fire_keys(harness, keys) -> None:
    code = compile_for(COUNT, [PROBE]).programs[0].code
    for k in keys:
        assert harness.fire(code, PROBE.key, [k, 0]) == 0


def test_attach_over_memory_that_held_anything_makes_a_table_the_host_reads(harness, lib):
    """A kernel's memory is not zeroed for it (kmalloc, or the struct of a table attached before): every field
    the host reads is set, the half the writer adds to among them."""
    ctypes.memset(lib.h_agg(), 0xA5, lib.h_agg_size())
    harness.attach(AGG_BYTES)
    assert lib.h_want() == 0
    read = lambda a, n: ctypes.string_at(a, n)  # noqa: E731
    assert read_cpu(read, lib.h_agg(), 64, halves=None, given=AGG_BYTES).entries == []
    fire_keys(harness, [7, 7, 9])
    harness.lib.h_switch()
    assert sorted((e.keys, e.values) for e in read_cpu(read, lib.h_agg(), 64, halves=None, given=AGG_BYTES).entries) \
        == [((7,), (2,)), ((9,), (1,))]


# Bytes given to sdt_agg_attach -> index slots of a half (the largest power of two not over half / 64, 8 at
# least) -> entries a half takes (three quarters of its slots; one-key counts of 32 bytes never fill the arena).
FITS = [(2048, 16, 12), (4096 + 1000, 32, 24), (AGG_BYTES, 512, 384)]


@pytest.mark.parametrize(("given", "slots", "entries"), FITS)
def test_a_half_takes_entries_until_three_quarters_of_its_index_is_used(harness, lib, given, slots, entries):
    harness.attach(given)
    assert lib.h_nindex() == slots
    fire_keys(harness, range(entries + 1))  # one key more than fits: dropped, and counted
    fire_keys(harness, [0, entries - 1])  # keys it holds still count
    assert (lib.h_entries(0), lib.h_dropped(0)) == (entries, 1)
    t = read_cpu(lambda a, n: ctypes.string_at(a, n), lib.h_agg(), 64, halves=(0,), given=given)
    got = {e.keys[0]: e.values[0] for e in t.entries}
    assert got == {k: 2 if k in (0, entries - 1) else 1 for k in range(entries)} and t.dropped == 1


@pytest.mark.parametrize("shift", [0, 32], ids=["keys-in-the-low-word", "keys-in-the-high-word"])
def test_the_index_spreads_keys_so_a_firing_finds_its_entry_in_a_few_probes(harness, lib, shift):
    """Open addressing with linear probing: an entry lies some slots past its home slot (its hash's, in the entry),
    and a firing probes them all. A full half of distinct keys (three quarters of the slots used) is 1.5 slots
    away on average when the hash spreads them; a hash that does not mixes its keys puts them in one run."""
    harness.attach(AGG_BYTES)
    fire_keys(harness, [k << shift for k in range(384)])
    mask = lib.h_nindex() - 1
    index = (ctypes.c_uint32 * (mask + 1)).from_address(lib.h_index(0))
    arena = lib.h_arena(0)
    away = [(i - ctypes.c_uint32.from_address(arena + (slot - 1) * 8).value) & mask
            for i, slot in enumerate(index) if slot]
    assert len(away) == 384
    assert sum(away) / len(away) < 4 and max(away) < 64, (sum(away) / len(away), max(away))
