"""CTF 1.8: babeltrace2, the reference reader, reads the runtime's packets as they stand with the metadata
sdtgen writes: every event with every field as C typed it, its timestamp and CPU, and exactly the events
each CPU lost, where it lost them."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from helpers import ARCHES, build_c_kernel, need_tool, run, sdtgen, unavailable
from tracing import CPUS, POINTERS, TYPES, boot_with_trace, expected, fired_values

READER = Path(__file__).with_name("bt2_read.py")
DEBIAN_PYTHON = "/usr/bin/python3"


def babeltrace2() -> str:
    return need_tool("babeltrace2", "babeltrace2")


def read_bt2(path: Path) -> list[dict]:
    """The trace as babeltrace2's Python bindings see it (python3-bt2 is Debian's, not the venv's)."""
    if not Path(DEBIAN_PYTHON).exists() or run([DEBIAN_PYTHON, "-c", "import bt2"], check=False).returncode:
        unavailable("babeltrace2's Python bindings not found: apt-get install python3-bt2")
    return [json.loads(line) for line in run([DEBIAN_PYTHON, str(READER), str(path)]).stdout.splitlines()]


@pytest.fixture(scope="module")
def traced(trace_kernel, tmp_path_factory):
    return boot_with_trace(trace_kernel, tmp_path_factory.mktemp("ctf") / "trace", "ctf")


def test_bt2_reads_every_event_field_timestamp_and_cpu(traced):
    rows = [r for r in read_bt2(traced.path) if "name" in r]
    # Each CPU fired everything the C passed, in order; bt2's fields are the C values in each type.
    for cpu in range(CPUS):
        mine = [(r["name"], [r["fields"][f"arg{k}"] for k in range(len(r["fields"]))]) for r in rows
                if r["cpu"] == cpu]
        assert mine == [(p, expected(p, v, unreadable="<unreadable>")) for p, v in fired_values()]
    # The same events, times and CPUs as the run showed them.
    assert Counter((r["name"], r["cpu"], r["ts"]) for r in rows) == \
        Counter((f["probe"], f["cpu"], f["ts"]) for f in traced.fires)
    assert traced.stats["lost"] == 0


def test_metadata_names_the_kernels_clock_and_the_tracer(traced, trace_kernel):
    head = read_bt2(traced.path)[0]
    assert head["clock"]["name"] == "tsc" and head["clock"]["frequency"] > 0
    env = head["trace"]
    assert (env["domain"], env["tracer_name"], env["architecture"]) == ("kernel", "sdtgen", "x86_64")
    assert (traced.path / "metadata").read_bytes().startswith(b"/* CTF 1.8 */")
    assert sorted(p.name for p in traced.path.iterdir()) == ["metadata", *(f"stream_{c}" for c in range(CPUS))]


def test_each_stream_is_the_runtimes_packets_as_they_stand(traced):
    """Magic 0xC1FC1FC1 and stream 0 at each packet's start; packet sequence numbers 0 (the opening packet),
    then 1, 2... (the runtime's)."""
    import struct

    for cpu in range(CPUS):
        data = (traced.path / f"stream_{cpu}").read_bytes()
        at, seqs = 0, []
        while at < len(data):
            magic, stream, _b, _e, content, size, seq, _d, cpu_id, _n = struct.unpack_from("<IIQQQQQQII", data, at)
            assert (magic, stream, cpu_id) == (0xC1FC1FC1, 0, cpu) and content <= size and size % 8 == 0
            seqs.append(seq)
            at += size // 8
        assert at == len(data) and seqs == list(range(len(seqs))) and len(seqs) >= 2


def _cli_value(ctype: str, v) -> str:
    """A field as babeltrace2's text output prints it: decimal, pointers in upper-case hex, strings quoted."""
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return f"0x{v:X}" if ctype in POINTERS else str(v)


def test_babeltrace2_prints_every_event_with_every_field(traced):
    proc = run([babeltrace2(), "--clock-cycles", str(traced.path)])
    line = re.compile(r"\[(\d+)\] \(\+[^)]*\) \S+ (\S+): \{ cpu_id = (\d+), events = \d+ \}, "
                      r"\{ size = \d+, unreadable = (\d+) \}, \{ ?(.*?) ?\}")
    got = Counter()
    for text in proc.stdout.splitlines():
        m = line.fullmatch(text)
        assert m, text
        got[(int(m[1]), m[2], int(m[3]), m[5])] += 1
    want = Counter()
    for f in traced.fires:
        types = TYPES[f["probe"]]
        values = expected(f["probe"], f["args"], unreadable="<unreadable>")
        fields = ", ".join(f"arg{k} = {_cli_value(types[k], values[k])}" for k in range(len(types)))  # as declared
        want[(f["ts"], f["probe"], f["cpu"], fields)] += 1
    assert got == want


def test_lost_events_are_reported_where_they_were_lost(trace_kernel, tmp_path):
    """A drop ring read only when each run ends loses records on every CPU: babeltrace2 reports exactly that
    many discarded events, and every event it reads is one the run showed."""
    traced = boot_with_trace(trace_kernel, tmp_path / "lossy", "ctf", "--buffer-size", "2048", "--no-stream",
                             "--run", "burst", "--arg", "200")
    rows = read_bt2(traced.path)
    events = [r for r in rows if "name" in r]
    discarded = sum(r["discarded"] for r in rows if "discarded" in r)
    assert traced.stats["lost"] > 0 and discarded == traced.stats["lost"]
    assert len(events) == len(traced.fires)


def test_a_trace_replaces_its_own_earlier_trace_and_nothing_else(trace_kernel, tmp_path):
    path = tmp_path / "again"
    boot_with_trace(trace_kernel, path, "ctf")
    boot_with_trace(trace_kernel, path, "ctf")  # over its own: fine
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    proc = sdtgen("boot", trace_kernel, "--trace", other, "--run", "never", "--arg", "1")
    assert proc.returncode == 2 and "would replace a directory that is not a CTF trace" in proc.stderr
    assert (other / "notes.txt").read_text() == "mine" and proc.stdout == ""


# Events of every size class: on a 32-bit kernel one int and three words leave an event 4 bytes short of a
# multiple of 8, a string ends where it ends.
PACKED = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(pk);
SDT_PROBE_DEFINE1(pk, odd, one, a, "int");
SDT_PROBE_DEFINE3(pk, odd, three, a, "int", "long", "int");
SDT_PROBE_DEFINE2(pk, str, one, s, "const char *", "int");
static const char *const names[4] = {"a", "bc", "def", "a longer name"};
long burst(long n)
{
	for (long i = 0; i < n; i++) {
		SDT_PROBE1(pk, odd, one, a, (int)i);
		SDT_PROBE3(pk, odd, three, a, (int)i, -i, (int)(7 * i));
		SDT_PROBE2(pk, str, one, s, names[i & 3], (int)i);
	}
	return n;
}
"""
PACKED_NAMES = ["a", "bc", "def", "a longer name"]
BURST = 300


@pytest.mark.parametrize("arch", ARCHES)
def test_bt2_reads_every_architectures_trace_past_many_full_packets(tmp_path, arch):
    """A packet's content ends at its last event's last byte on every architecture: babeltrace2 reads each
    packet of a long run to its end and the next from its header (a content size that took in the last event's
    padding made it read the next packet's header as an event on i386)."""
    image = build_c_kernel(tmp_path, arch, PACKED, "pk")
    trace = tmp_path / "trace"
    proc = sdtgen("boot", image, "--arm", "branch", "--enable", ":::", "--buffer-size", "8192", "--run", "burst",
                  "--arg", str(BURST), "-q", "--json", "--trace", trace)
    assert proc.returncode == 0, proc.stderr
    (stats,) = [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "stats"]
    assert stats["lost"] == 0
    rows = [(r["name"], [r["fields"][f"arg{k}"] for k in range(len(r["fields"]))]) for r in read_bt2(trace)
            if "name" in r]
    assert rows == [e for i in range(BURST) for e in (("pk:odd:one:a", [i]), ("pk:odd:three:a", [i, -i, 7 * i]),
                                                     ("pk:str:one:s", [PACKED_NAMES[i & 3], i]))]
    data = (trace / "stream_0").read_bytes()
    assert data.count(b"\xc1\x1f\xfc\xc1") > 20  # the packets' magic: many of them full, each read to its end


# A probe whose strings come before and between its integers: the recorder stores them in the probe's order, each
# integer after a string at the next multiple of its size. (No empty
# string: babeltrace2 2.0.4, Debian 12's, prints an empty string field as the value it last read there, a bug its
# change 4528 fixed.)
MIXED = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(mx);
SDT_PROBE_DEFINE4(mx, vfs, walk, step, "const char *", "int", "char *", "long");
SDT_PROBE_DEFINE2(mx, vfs, walk, done, "long", "const char *");
static const char *const parts[] = { "usr/lib", "a", "x86_64-linux-gnu" };
long walk(long n)
{
	long i;

	for (i = 0; i < n; i++)
		SDT_PROBE4(mx, vfs, walk, step, parts[i % 3], (int)i + 3, (char *)parts[(i + 1) % 3], -1000 * i);
	SDT_PROBE2(mx, vfs, walk, done, n, parts[0]);
	return n;
}
"""


@pytest.mark.parametrize("arch", ARCHES)
def test_babeltrace2_prints_each_events_fields_in_its_probes_order(tmp_path, arch):
    """`{ arg0 = "usr/lib", arg1 = 3, ... }`, as the probe declares them: the C's values in the C's order, read by
    babeltrace2 from the trace `boot --trace` wrote (the runtime's packets as they stand), over many packets, on
    every architecture (a word after a string is aligned to its size)."""
    image = build_c_kernel(tmp_path, arch, MIXED, "mx", "-Wall", "-Wextra", "-Werror")  # the recorders too
    trace = tmp_path / "trace"
    n = 300
    proc = sdtgen("boot", image, "--enable", "mx:::", "--buffer-size", "8192", "--json", "--run", "walk", "--arg",
                  str(n), "--trace", trace)
    assert proc.returncode == 0, proc.stderr
    got = [re.search(r"(mx:\S+): .*\}, \{ (.*) \}$", line).groups()
           for line in run([babeltrace2(), str(trace)]).stdout.splitlines()]
    parts = ["usr/lib", "a", "x86_64-linux-gnu"]  # no "": babeltrace2 2.0.4 shows an empty string as the last one
    values = [("mx:vfs:walk:step", [parts[i % 3], i + 3, parts[(i + 1) % 3], -1000 * i]) for i in range(n)]
    values.append(("mx:vfs:walk:done", [n, "usr/lib"]))
    want = [(probe, ", ".join(f'arg{k} = "{v}"' if isinstance(v, str) else f"arg{k} = {v}" for k, v in enumerate(args)))
            for probe, args in values]
    assert got == want
    fired = [(e["probe"], e["args"]) for e in map(json.loads, proc.stdout.splitlines()) if e["event"] == "fire"]
    assert fired == values  # the session's own decoder reads the same packets alike
