"""`sdtgen boot --aggregate` on the fixture kernel, two CPUs, both arming modes: what it prints is exactly what the
native run's firings make (tests/aggregate_expect.py); a script the image cannot run is refused before anything
boots (one line, exit 2); tables a guest spoiled are left out and said; clear() starts the totals again."""

from __future__ import annotations

import io
import json

import pytest
from aggregate_expect import CALLS, SCRIPT, expected, printed, run_args
from helpers import sdtgen
from native_oracle import Call, run_native

from sdtgen.errors import SdtError
from sdtgen.layout import AGG, VALUES
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

CPUS = 2


@pytest.fixture(scope="module")
def firings(native_exe):
    return [e for e in run_native(native_exe, CALLS) if "probe" in e]


@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_boot_prints_exactly_what_the_native_firings_aggregate(kernel, firings, mode):
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--arm", mode, "--json", "-q", "--aggregate", SCRIPT,
                  *run_args(CALLS))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    [aggs] = [e for e in events if e["event"] == "aggregations"]
    assert (aggs["dropped"], aggs["errors"], aggs["nested"]) == (0, 0, 0)
    assert printed(aggs, firings, CPUS) == expected(firings, CPUS)
    assert next(e for e in events if e["event"] == "stats")["hits"] == {}, "aggregating clauses record nothing"


def test_boot_prints_as_printa_does(kernel, firings):
    """Text: a keyless count is dtrace's " %16lld" line; two --aggregate options each keep their own."""
    proc = sdtgen("boot", kernel.image, "--aggregate", "hk:sched:run:tick @ = count()",
                  "--aggregate", "hk:mem:alloc:entry @n[probename] = sum(arg0)", *run_args(CALLS))
    assert proc.returncode == 0, proc.stderr
    ticks = sum(1 for f in firings if f["probe"] == "hk:sched:run:tick")
    total = sum(f["args"][0] for f in firings if f["probe"] == "hk:mem:alloc:entry")
    lines = proc.stdout.splitlines()
    assert f" {ticks:16d}" in lines
    assert f"  {'entry':<50} {total:16d}" in lines


REFUSED = [
    (["hk:sched:run:tick /arg9 > 0/ @ = count()"], "arg9: a probe has at most 6 arguments"),
    (["hk:nothing:: @ = count()"], "matches no probe"),
    (["hk:sched:run:tick @ = sum(arg1 / 0)"], "divides by zero"),
    (["hk:sched:run:tick @a = count()", "hk:mem:alloc:entry @a = count()"], "@a of"),
    (["hk:sched:run:tick @a = count()", "hk:sched:: @b = count()"], "already runs the program of an earlier"),
]


@pytest.mark.parametrize(("scripts", "why"), REFUSED)
def test_a_script_the_image_cannot_run_is_refused_before_anything_boots(kernel, scripts, why):
    options = [w for text in scripts for w in ("--aggregate", text)]
    proc = sdtgen("boot", kernel.image, *options, "--run", "sched_run", "--arg", "3")
    assert proc.returncode == 2
    assert proc.stdout == "", "nothing booted, nothing armed, nothing ran"
    [line] = proc.stderr.splitlines()
    assert line.startswith("--aggregate: error: ") and why in line, line


def session(kernel, out: io.StringIO, **kw):
    return open_session("emulator", str(kernel.image), Reporter(as_json=True, out=out), cpus=CPUS, **kw)


def test_tables_a_guest_spoiled_are_left_out_and_said(kernel):
    out = io.StringIO()
    s = session(kernel, out)
    try:
        s.aggregate("hk:sched:run:tick @ = count()")
        s.run("sched_run:long", [5])
        bits = s.image.arch.bits
        at = s.target.platform.agg(1)  # CPU 1's struct sdt_agg: its frozen half claims more than its arena
        used = at + AGG.offset("used", bits)
        s.target.machine.write(used, (1 << 40).to_bytes(8, "little") * 2)
        totals = s.snapshot()
        assert totals.rows[1][()] == [5], "CPU 0's five firings, CPU 1's left out"
        assert s.damaged == 1
        warnings = [json.loads(x) for x in out.getvalue().splitlines() if '"warning"' in x]
        assert any("CPU 1's aggregation tables left out" in w["text"] for w in warnings)
    finally:
        s.close()


def test_clear_starts_the_totals_again(kernel):
    s = session(kernel, io.StringIO())
    try:
        s.aggregate("hk:sched:run:tick @ = count()")
        s.run("sched_run:long", [5])
        assert s.snapshot().rows[1][()] == [CPUS * 5]
        s.run("sched_run:long", [3])
        s.clear()
        assert s.snapshot().rows.get(1, {}) == {}, "what fired before clear is gone"
        s.run("sched_run:long", [2])
        assert s.snapshot().rows[1][()] == [CPUS * 2]
        assert s.snapshot().rows[1][()] == [CPUS * 2], "a snapshot with nothing new adds nothing"
    finally:
        s.close()


def test_a_script_refused_in_a_running_session_arms_nothing(kernel):
    s = session(kernel, io.StringIO())
    try:
        s.aggregate("hk:sched:run:tick @a = count()")
        with pytest.raises(SdtError, match="already runs the program"):
            s.aggregate("hk:sched::, hk:mem:alloc:entry @b = count()")
        assert [p.spec for p in s.list_probes() if p.armed] == ["hk:sched:run:tick"]
    finally:
        s.close()


# hk:mem:alloc:entry matches both clauses, the other alloc probes only the second: two programs update @n and @f
SPLIT = ("hk:mem:alloc:entry { @p = count(); }\n"
         "hk:mem:alloc: { @n[probefunc] = count(); @f[probeprov, probemod, probefunc, probename] = count(); }")
SPLIT_CALLS = [Call("kmem_alloc", (300,)), Call("kmem_alloc", (-5,)), Call("kmem_alloc", (70000,))]


def test_probe_names_as_keys_print_as_names_whatever_programs_update_them(kernel, native_exe):
    firings = [e for e in run_native(native_exe, SPLIT_CALLS) if e.get("probe", "").startswith("hk:mem:alloc:")]
    assert len({f["probe"] for f in firings}) > 1, "the calls fire more than one alloc probe"
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--json", "-q", "--aggregate", SPLIT, *run_args(SPLIT_CALLS))
    assert proc.returncode == 0, proc.stderr
    [aggs] = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "aggregations"]
    rows = {a["name"]: {tuple(r["keys"]): r["value"] for r in a["rows"]} for a in aggs["aggregations"]}
    assert rows["n"] == {("alloc",): CPUS * len(firings)}
    by_probe: dict[tuple, int] = {}
    for f in firings:
        by_probe[tuple(f["probe"].split(":"))] = by_probe.get(tuple(f["probe"].split(":")), 0) + CPUS
    assert rows["f"] == by_probe
    text = sdtgen("boot", kernel.image, "--cpus", CPUS, "--aggregate", SPLIT, *run_args(SPLIT_CALLS))
    assert f"  {'alloc':<50} {CPUS * len(firings):16d}" in text.stdout.splitlines()


def test_an_aggregation_of_as_many_keys_as_the_runtime_takes_counts_each_tuple(kernel, native_exe):
    """SDT_AGG_MAX_KEYS keys (sdtgen/layout.py), the most an entry holds: the kernel takes the descriptor and
    counts each (arg0, arg1, arg0, arg1) tuple the native run's ticks give, once per firing."""
    calls = [Call("sched_run", (5,)), Call("sched_run", (3,))]
    ticks = [f for f in run_native(native_exe, calls) if f.get("probe") == "hk:sched:run:tick"]
    want: dict[tuple, int] = {}
    for f in ticks:
        key = (f["args"][0], f["args"][1], f["args"][0], f["args"][1])
        want[key] = want.get(key, 0) + 1
    assert len(key) == VALUES["SDT_AGG_MAX_KEYS"] and max(want.values()) > 1  # one tuple counted more than once
    proc = sdtgen("boot", kernel.image, "--json", "-q", "--aggregate",
                  "hk:sched:run:tick { @k[arg0, arg1, arg0, arg1] = count(); }", *run_args(calls))
    assert proc.returncode == 0, proc.stderr
    [aggs] = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "aggregations"]
    [k] = aggs["aggregations"]
    assert {tuple(r["keys"]): r["value"] for r in k["rows"]} == want


def test_printa_prints_aggregations_in_the_order_the_script_declares_them(kernel):
    """DTrace's order: each aggregation where the script first names it, whichever program updates it first."""
    script = ("hk:mem:alloc:entry { @a[1] = count(); }\nhk:mem:alloc: { @b[2] = count(); }\n"
              "hk:sched:run:tick { @c[3] = count(); }\nhk:mem:alloc:entry { @[4] = count(); }")
    calls = [Call("kmem_alloc", (300,)), Call("kmem_alloc", (-5,)), Call("sched_run", (2,))]
    proc = sdtgen("boot", kernel.image, "--aggregate", script, *run_args(calls))
    assert proc.returncode == 0, proc.stderr
    keys = [int(line.split()[0]) for line in proc.stdout.splitlines() if line.startswith(" " * 15)]
    assert keys == [1, 2, 3, 4]
    proc = sdtgen("boot", kernel.image, "--json", "-q", "--aggregate", script, *run_args(calls))
    [aggs] = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "aggregations"]
    assert [a["name"] for a in aggs["aggregations"]] == ["a", "b", "c", ""]


def test_a_division_by_zero_in_the_kernel_is_said_on_stderr_per_cpu(kernel, native_exe):
    """As drops are: the firings a program stopped (here those whose arg0 is 0) are counted and said in text too."""
    calls = [Call("sched_run", (3,)), Call("sched_run", (2,))]
    ticks = [f for f in run_native(native_exe, calls) if f.get("probe") == "hk:sched:run:tick"]
    zeros = sum(1 for f in ticks if f["args"][0] == 0)
    assert zeros == 2 and len(ticks) > zeros
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--aggregate", "hk:sched:run:tick @ = sum(10 / arg0)",
                  *run_args(calls))
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "error" in line]
    assert said == [f"{kernel.image}: warning: {zeros} errors on CPU {cpu}: a clause divided by zero, met a string "
                    "it could not read or read the task (tid, curcontext, execname) of a kernel that gives no task "
                    "hook, and that firing did nothing more" for cpu in range(CPUS)]
    total = sum(10 // f["args"][0] for f in ticks if f["args"][0]) * CPUS
    assert f" {total:16d}" in proc.stdout.splitlines()


def test_a_flat_300_term_or_runs_as_c_evaluates_it(kernel, native_exe):
    """298 tests of names no probe has, one that holds for alloc:fail, one of an argument: counted as C would."""
    calls = [Call("kmem_alloc", (300,)), Call("kmem_alloc", (-5,)), Call("kmem_alloc", (70000,))]
    alloc = ("hk:mem:alloc:entry", "hk:mem:alloc:fail")
    firings = [f for f in run_native(native_exe, calls) if f.get("probe") in alloc]
    chain = " || ".join(f'probefunc == "f{i}"' for i in range(298)) + ' || probename == "fail" || arg0 == 300'
    want: dict[tuple, int] = {}
    for f in firings:
        if f["probe"].endswith(":fail") or f["args"][0] == 300:
            key = (f["probe"].split(":")[3],)
            want[key] = want.get(key, 0) + CPUS
    assert len(want) == 2
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--json", "-q", "--aggregate",
                  f"hk:mem:alloc:entry, hk:mem:alloc:fail /{chain}/ @[probename] = count()", *run_args(calls))
    assert proc.returncode == 0, proc.stderr
    [aggs] = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "aggregations"]
    assert {tuple(r["keys"]): r["value"] for r in aggs["aggregations"][0]["rows"]} == want


def test_a_refused_aggregate_line_of_a_script_ends_it_after_printing_what_was_gathered(kernel, native_exe, tmp_path):
    """The script's first error ends the session (its later lines may need the refused one), as Ctrl-C does: what
    was aggregated until then is printed, then the error naming the line."""
    ticks = sum(1 for f in run_native(native_exe, [Call("sched_run", (3,))]) if f.get("probe") == "hk:sched:run:tick")
    script = tmp_path / "agg.sdt"
    script.write_text("aggregate hk:sched:run:tick @t = count()\nrun sched_run 3\naggregate hk:nothing:: @x = count()\n"
                      "run sched_run 4\n")
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--script", script)
    assert proc.returncode == 2
    assert proc.stdout.splitlines()[-1] == f" {CPUS * ticks:16d}", proc.stdout
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"{script}:3: error: ") and "matches no probe" in line, line


def test_the_tables_capacity_is_said_and_is_what_the_kernel_keeps(kernel, native_exe):
    """256 KiB of tables a CPU in the emulator: a half's index of 2048 slots, three quarters of them taken (1536
    entries of a one-key count); the first 1536 keys that fired (the native run's order) are kept, the rest dropped,
    and the warning and --json say that number."""
    calls = [Call("sched_run", (2000,))]
    keys = list(dict.fromkeys(f["args"][0] for f in run_native(native_exe, calls)
                              if f.get("probe") == "hk:sched:run:tick"))
    proc = sdtgen("boot", kernel.image, "--cpus", CPUS, "--json", "-q", "--aggregate",
                  "hk:sched:run:tick @[arg0] = count()", *run_args(calls))
    assert proc.returncode == 0, proc.stderr
    [aggs] = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "aggregations"]
    assert aggs["capacity"] == [{"cpu": k, "entries": 1536, "slots": 2048, "arena": 122880} for k in range(CPUS)]
    assert {r["keys"][0]: r["value"] for r in aggs["aggregations"][0]["rows"]} == dict.fromkeys(keys[:1536], CPUS)
    assert aggs["dropped"] == CPUS * (len(keys) - 1536)
    text = sdtgen("boot", kernel.image, "--aggregate", "hk:sched:run:tick @[arg0] = count()", *run_args(calls))
    assert f"warning: {len(keys) - 1536} aggregation drops on CPU 0: its tables were full (a half holds 1536 entries " \
           "of a count with one key, fewer of larger ones): give it more memory, or print more often" in text.stderr


def test_enable_with_a_predicate_records_only_the_firings_it_passes(kernel, native_exe):
    """DTrace's enabling with a predicate (`--enable 'SPEC /pred/'`): the firings recorded are the native run's
    for which the predicate holds, in their order; the other probes' are as plain --enable records them."""
    calls = [Call("sched_run", (6,)), Call("vfs_lookup_id", (1,)), Call("vfs_lookup_id", (2,)),
             Call("kmem_alloc", (300,))]
    native = [f for f in run_native(native_exe, calls) if "probe" in f]
    probes = ("hk:sched:run:tick", "hk:vfs:lookup:component", "hk:mem:alloc:entry")
    passes = {probes[0]: lambda a: a[1] > 4, probes[1]: lambda a: a[0] == "lib" or a[1] > 3, probes[2]: lambda a: 1}
    want = [{"probe": f["probe"], "args": f["args"]} for f in native if f["probe"] in passes
            and passes[f["probe"]](f["args"])]
    for probe in probes[:2]:  # each predicate passes some of its probe's firings, not all
        assert 0 < sum(f["probe"] == probe for f in want) < sum(f["probe"] == probe for f in native), probe
    proc = sdtgen("boot", kernel.image, "--json", "--enable", f"{probes[0]} /arg1 > 4/",
                  "--enable", f'{probes[1]} /arg0 == "lib" || arg1 > 3/', "--enable", probes[2], *run_args(calls))
    assert proc.returncode == 0, proc.stderr
    fired = [{"probe": e["probe"], "args": e["args"]} for e in map(json.loads, proc.stdout.splitlines())
             if e["event"] == "fire"]
    assert fired == want


def test_a_disable_ends_the_filter_so_a_plain_enable_records_every_firing(kernel, native_exe):
    """`--enable 'SPEC /pred/'`, a run, `--disable SPEC`, a plain `--enable SPEC`, the same run: the first run
    records the native firings the predicate passes, the second every native firing (the filter's program went
    with the disable), and a run while disabled records nothing."""
    probe = "hk:sched:run:tick"
    calls = [Call("sched_run", (6,))]
    native = [{"probe": f["probe"], "args": f["args"]} for f in run_native(native_exe, calls)
              if f.get("probe") == probe]
    passed = [f for f in native if f["args"][1] > 4]
    assert 0 < len(passed) < len(native)
    proc = sdtgen("boot", kernel.image, "--json", "--enable", f"{probe} /arg1 > 4/", *run_args(calls),
                  "--disable", probe, *run_args(calls), "--enable", probe, *run_args(calls))
    assert proc.returncode == 0, proc.stderr
    runs, fired = [], []
    for e in map(json.loads, proc.stdout.splitlines()):
        if e["event"] == "fire":
            fired.append({"probe": e["probe"], "args": e["args"]})
        elif e["event"] == "return":
            runs.append(fired)
            fired = []
    assert runs == [passed, [], native]


def test_an_aggregate_no_run_follows_is_said_to_see_nothing(kernel):
    """The command line is carried out in order: an --aggregate after the last --run aggregates nothing the runs
    did, which is said (once per such clause); before the --run, it counts what the run fires and nothing is said."""
    clause = "hk:sched:run:tick { @n = count(); }"
    late = sdtgen("boot", kernel.image, "--run", "sched_run", "--arg", "3", "--aggregate", clause)
    assert late.returncode == 0 and "@n" not in late.stdout
    assert [ln for ln in late.stderr.splitlines() if "warning" in ln] == [
        f"{kernel.image}: warning: --aggregate {clause!r} comes after the last --run: it sees only what the kernel "
        "does in the moment before the session ends; put it before the --run it should see, or add --interval "
        "SECONDS or -i"], late.stderr
    early = sdtgen("boot", kernel.image, "--aggregate", clause, "--run", "sched_run", "--arg", "3")
    assert early.returncode == 0 and early.stderr == "", early.stderr
    assert early.stdout.split()[-1] == "3"  # sched_run(3) fires its tick probe three times (fixture's C)


def test_enable_with_more_than_a_predicate_is_refused_before_anything_boots(kernel):
    proc = sdtgen("boot", kernel.image, "--enable", "hk:sched:run:tick /arg1 > 4/ @ = count()",
                  "--run", "sched_run", "--arg", "3")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == ["--enable: error: 'hk:sched:run:tick /arg1 > 4/ @ = count()' is more than a "
                                        "spec and a predicate; give SPEC /predicate/ (aggregations: --aggregate "
                                        "CLAUSES)"]
