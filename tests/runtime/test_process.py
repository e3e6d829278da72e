"""The second environment: the fixture kernel as a Linux process on the real CPU (fixtures/process), the
runtime patching its own text with mprotect and membarrier, traps arriving as SIGTRAP, threads as CPUs.

Its firings, decoded from the packets it streams (sdtgen/trace/packets.py), equal the fixture's C built
natively with every probe a function that prints its call; its rings lose exactly what they count; and
its patch protocol survives real threads on real cores.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from helpers import FIXTURE, ROOT, SDTGEN, need_tool, readelf_symbols, run, unavailable
from native_oracle import PROTOTYPES, Call, build_fixture_native, data_symbolizer, run_native
from probe_source import called_probes

from sdtgen.event_format import event_format
from sdtgen.probes import probe_key
from sdtgen.table import SITE_SIZE
from sdtgen.trace.ctf import TASK_EVENT
from sdtgen.trace.packets import Decoder, split

PROCESS = ROOT / "fixtures" / "process"
MASK = (1 << 64) - 1

CALLS = [
    Call("kmain", (1,)), Call("kmain", (2,)), Call("vfs_lookup_id", (2,)), Call("sched_run", (4,)),
    Call("sched_run", (0,)), Call("sched_switch", (7, 8, 3, 1, 5000, 0x40)), Call("kmem_alloc", (100,)),
    Call("kmem_alloc", (1 << 20,)), Call("proc_exec", (1,)), Call("proc_exec", (5,)), Call("proc_exit", (42,)),
    Call("kmain", (3,)),
]
# extra.c: a conditional tail site, a string rewritten after each firing, a NULL string, an is-enabled check,
# 100 sites (more than the 64 the patch protocol once wrote per run)
EXTRA_CALLS = [Call("px_check_big", (2,)), Call("px_check_big", (9,)), Call("px_generations", (4,)),
               Call("px_null", (5,)), Call("px_guarded", (-7,)), Call("px_many", (1000,))]
POINTER_ARGS = {"hk:lib:ref:acquire": 0}  # a struct pointer: compared as the object it points at


def build_process(out: Path, **make_vars: str) -> Path:
    assigns = [f"{k}={v}" for k, v in make_vars.items()]
    run(["make", "-C", str(PROCESS), f"O={out}", f"SDTGEN={SDTGEN}", *assigns])
    return out / "kernel-proc"


@pytest.fixture(scope="module")
def process(tmp_path_factory):
    """kernel-proc built as fixtures/process/Makefile builds it (gcc -O2)."""
    return build_process(tmp_path_factory.mktemp("process"))


@pytest.fixture(scope="module")
def process_goto(tmp_path_factory):
    """kernel-proc with its probes in FreeBSD 15's asm goto form (FORM=goto: sdt.h's SDT_ASM_GOTO)."""
    return build_process(tmp_path_factory.mktemp("process-goto"), FORM="goto")


@pytest.fixture(params=["call", "goto"])
def formed(request, process, process_goto):
    """kernel-proc in each probe form."""
    return process if request.param == "call" else process_goto


@pytest.fixture(scope="module")
def native_all(tmp_path_factory):
    """The fixture's C and extra.c built for this machine, each probe a function printing its call."""
    out = tmp_path_factory.mktemp("native")
    return build_fixture_native(out), build_extra_native(out)


EXTRA_HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void put_string(const char *s) { if (!s) { printf("null"); return; } putchar('"');
  for (; *s; s++) { if (*s == '"' || *s == '\\') putchar('\\'); putchar(*s); } putchar('"'); }
void __dtrace_sdt_px_check_big_hit(unsigned long x) {
  printf("{\"probe\": \"px:check:big:hit\", \"args\": [%lu]}\n", x); }
void __dtrace_sdt_px_name_gen_set(const char *s, int n) { printf("{\"probe\": \"px:name:gen:set\", \"args\": [");
  put_string(s); printf(", %d]}\n", n); }
void __dtrace_sdt_px_guard_costly_value(long v) {
  printf("{\"probe\": \"px:guard:costly:value\", \"args\": [%ld]}\n", v); }
int __dtrace_isenabled_px_guard_costly_value(void) { return 1; }  /* natively, every probe is armed */
void __dtrace_sdt_px_many_site_hit(int k) { printf("{\"probe\": \"px:many:site:hit\", \"args\": [%d]}\n", k); }
volatile _Bool sdt_probes_enabled = 1;
void px_check_big(unsigned long); int px_generations(int); int px_null(int); long px_guarded(long);
int px_many(int);
int main(int argc, char **argv) { for (int i = 1; i < argc; i++) { char *f = strtok(argv[i], ":");
  long v = strtol(strtok(NULL, ","), NULL, 0);
  if (!strcmp(f, "px_check_big")) { px_check_big(v); printf("{\"return\": null}\n"); }
  if (!strcmp(f, "px_generations")) printf("{\"return\": %d}\n", px_generations(v));
  if (!strcmp(f, "px_null")) printf("{\"return\": %d}\n", px_null(v));
  if (!strcmp(f, "px_guarded")) printf("{\"return\": %ld}\n", px_guarded(v));
  if (!strcmp(f, "px_many")) printf("{\"return\": %d}\n", px_many(v)); } return 0; }
"""


def build_extra_native(out: Path) -> Path:
    (out / "extra_harness.c").write_text(EXTRA_HARNESS)
    include = run([SDTGEN, "include-dir"]).stdout.strip()
    exe = out / "extra_native"
    run(["gcc", "-O2", "-fno-builtin", "-no-pie", f"-I{include}", "-o", str(exe), str(out / "extra_harness.c"),
         str(PROCESS / "extra.c")])
    return exe


def native_events(native_all, calls: list[Call]) -> list[dict]:
    """The calls as one native run makes them (the fixture's globals carry over from call to call), extra.c's
    in a run of their own: the two share no state, so their events interleave call by call."""
    per_call: dict[int, list[dict]] = {}
    for exe, mine in zip(native_all, (lambda c: not c.function.startswith("px_"),
                                      lambda c: c.function.startswith("px_")), strict=True):
        indices = [i for i, c in enumerate(calls) if mine(c)]
        chunk: list[dict] = []
        events = iter(run_native(exe, [calls[i] for i in indices]) if indices else [])
        for i in indices:
            for e in events:
                chunk.append(e)
                if "return" in e:
                    break
            per_call[i], chunk = chunk, []
    return [e for i in range(len(calls)) for e in per_call[i]]


def source_probes():
    return called_probes(FIXTURE) + called_probes(PROCESS)


def decoder() -> Decoder:
    return Decoder([event_format(probe_key(p.symbol), p.spec, p.args, 64) for p in source_probes()], 64)


# A run that never ends (a consumer that never releases a packet drains it forever) fails instead: a timeout far
# past any run's, and a cap on the files it writes (the same packet written again and again would fill the disk).
# A torture's trace grows with how long its toggles take and how fast the consumer writes (a CPU whose ring is
# full drops): 30 to 200 MB a CPU on an idle machine, and over 1 GB on one the other worker loads (toggles slowed,
# the calling CPU armed longer: 31 million events in 8.5 s).
RUN_TIMEOUT = 900
FILE_LIMIT = 4 << 30


def limit_files() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


class Run:
    """One kernel-proc run: its JSON lines, and the packets and events of every CPU's stream."""

    def __init__(self, exe: Path, tmp: Path, *argv: str, events: bool = True, trace: bool = True) -> None:
        out = tmp / "trace"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        proc = run([str(exe), *(["--trace", str(out)] if trace else []), *argv], timeout=RUN_TIMEOUT,
                   preexec_fn=limit_files)
        self.lines = [json.loads(x) for x in proc.stdout.splitlines()]
        self.exe, self.dir = exe, out
        dec = decoder()
        self.packets, self.events = [], []
        for path in sorted(out.glob("stream_*"), key=lambda p: int(p.name.split("_")[1])):
            for data in split(path.read_bytes(), dec, f"{path}: "):  # every packet's header checked
                if events:
                    packet, found = dec.events(data)  # an event of an id no probe has is refused
                    self.events += found
                else:
                    packet = dec.packet(data)
                self.packets.append(packet)

    def babeltrace2(self) -> list[dict]:
        """The trace as babeltrace2 reads it, with the CTF metadata `gen --ctf-metadata` wrote at build time
        beside the streams the process wrote (python3-bt2 is Debian's, not the venv's)."""
        python, reader = "/usr/bin/python3", ROOT / "tests" / "trace" / "bt2_read.py"
        if not Path(python).exists() or run([python, "-c", "import bt2"], check=False).returncode:
            unavailable("babeltrace2's Python bindings not found: apt-get install python3-bt2")
        shutil.copy(self.exe.parent / "metadata", self.dir / "metadata")
        return [json.loads(x) for x in run([python, str(reader), str(self.dir)]).stdout.splitlines()]

    def line(self, event: str) -> dict:
        (found,) = [x for x in self.lines if x["event"] == event]
        return found

    def returns(self) -> list[int]:
        return [x["value"] for x in self.lines if x["event"] == "return"]

    def firings(self, symbolize=None) -> list[tuple[str, list]]:
        bias = self.line("init")["load_bias"]
        return [(e.probe, normal(e.probe, list(e.args), symbolize and (lambda a: symbolize(a - bias))))
                for e in self.events]


def normal(probe: str, args: list, symbolize=None) -> list:
    """Integers as 64-bit patterns (the native harness prints wide types unsigned), pointers symbolized."""
    out = [a & MASK if isinstance(a, int) else a for a in args]
    if symbolize and probe in POINTER_ARGS:
        out[POINTER_ARGS[probe]] = symbolize(out[POINTER_ARGS[probe]])
    return out


def native_firings(events: list[dict], symbolize=None) -> list[tuple[str, list]]:
    return [(e["probe"], normal(e["probe"], e["args"], symbolize)) for e in events if "probe" in e]


EXTRA_RETURNS = {"px_check_big": "void", "px_generations": "int", "px_null": "int", "px_guarded": "long",
                 "px_many": "int"}
RETURNS = {name: ret for name, (ret, _) in PROTOTYPES.items()} | EXTRA_RETURNS


def returned(values: list[int], calls: list[Call]) -> list[int]:
    """What non-void calls returned, as their C type holds it (kernel-proc reads every result as a long)."""
    return [v & (0xFFFFFFFF if RETURNS[c.function] == "int" else MASK) for v, c in zip(values, calls, strict=True)
            if RETURNS[c.function] != "void"]


def native_returns(events: list[dict], calls: list[Call]) -> list:
    return returned([0 if e["return"] is None else e["return"] for e in events if "return" in e], calls)


def commands(calls: list[Call]) -> list[str]:
    out = []
    for c in calls:
        out += ["run", ",".join([c.function, *map(str, c.args)])]
    return out


# -- firings equal the native truth ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_every_armed_probe_fires_as_the_native_run_calls_it(formed, native_all, tmp_path, mode):
    process = formed
    calls = CALLS + EXTRA_CALLS
    r = Run(process, tmp_path, "enable", ":::", mode, *commands(calls))
    expected = native_events(native_all, calls)
    ours, theirs = data_symbolizer(process), data_symbolizer(native_all[0])
    assert r.firings(ours) == native_firings(expected, theirs)
    assert returned(r.returns(), calls) == native_returns(expected, calls)
    fired = {p for p, _ in r.firings()}
    assert {"hk:sched:switch:six", "hk:proc:exit:done", "px:name:gen:set", "px:check:big:hit",
            "px:guard:costly:value", "px:many:site:hit"} <= fired
    assert ("px:name:gen:set", [None, 5]) in r.firings()  # a NULL string: unreadable, not read
    assert [a for p, a in r.firings() if p == "px:name:gen:set"][:4] == [[f"gen{i}", i] for i in range(4)]


def test_switching_modes_rearms_every_armed_site(process, native_all, tmp_path):
    calls = CALLS + EXTRA_CALLS
    r = Run(process, tmp_path, "enable", ":::", "branch", *commands(calls), "mode", "trap", *commands(calls),
            "mode", "branch", *commands(calls), "disable", ":::", *commands(calls))
    ours, theirs = data_symbolizer(process), data_symbolizer(native_all[0])
    once = native_firings(native_events(native_all, calls), theirs)
    assert r.firings(ours) == once * 3
    switched = [x["sites"] for x in r.lines if x["event"] == "mode"]
    assert switched[0] == switched[1] == r.line("enabled")["sites"] - 1  # all but the is-enabled site


def test_a_site_that_does_not_verify_is_reported_and_never_written(process, native_all, tmp_path):
    """A table entry one byte off its call: sdt_init refuses it, says so, and no arming touches it (the call
    to the empty stub stays, so sched_switch still runs and returns what it should)."""
    from elftools.elf.elffile import ELFFile

    exe = tmp_path / "kernel-proc"
    data = bytearray(process.read_bytes())
    call = re.search(r"\n\s*([0-9a-f]+):\s+call +[0-9a-f]+ <__dtrace_sdt_hk_sched_switch_six>",
                     run(["objdump", "-d", "--no-show-raw-insn", str(process)]).stdout)
    with open(process, "rb") as f:
        sec = ELFFile(f).get_section_by_name("set_sdt_sites_set")
        base, offset, size = sec["sh_addr"], sec["sh_offset"], sec["sh_size"]
    entries = [i for i in range(0, size, SITE_SIZE)
               if base + i + int.from_bytes(data[offset + i:offset + i + 4], "little", signed=True) == int(call[1], 16)]
    assert len(entries) == 1
    at = offset + entries[0]
    data[at:at + 4] = (int.from_bytes(data[at:at + 4], "little", signed=True) + 1).to_bytes(4, "little", signed=True)
    exe.write_bytes(data)
    exe.chmod(0o755)
    proc = run([str(exe), "enable", ":::", "trap", "run", "sched_switch,7,8,3,1,5000,64", "disable", ":::"])
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[0]["patched"] == len(called_sites(process)) - 1
    assert re.fullmatch(r"sdt: hk:sched:switch:six site at 0x[0-9a-f]{16} is not the expected call or jump to its "
                        r"stub \(found( [0-9a-f]{2})+\)\n", proc.stderr), proc.stderr
    assert lines[2]["value"] == 7 * 1000 + 8 * 100 + 3 * 10 + 1 + 5000 + 64
    r = Run(exe, tmp_path, "enable", ":::", "branch", "run", "sched_switch,7,8,3,1,5000,64")
    assert [p for p, _ in r.firings()] == ["hk:lib:ref:acquire"]  # the other site in sched_switch


def test_a_table_entry_pointing_into_data_is_refused_and_no_text_span_reaches_it(tmp_path):
    """gen's table with one more entry, whose site is the runtime's own sdt_probes_enabled (in .bss, past all
    text): sdt_init refuses it as outside the text ranges the hosted platform gives, and no writable span it
    opens (mprotect read-write-execute, then back to read-execute) reaches it. A span from the lowest to the
    highest entry would end with the data pages read-only, and the process dies at its next store to them."""
    out = tmp_path / "build"
    table = out / "sdt_table.S"
    run(["make", "-C", str(PROCESS), f"O={out}", f"SDTGEN={SDTGEN}", str(table)])
    text = table.read_text()
    head = '\t.section set_sdt_sites_set,"aw"\n\t.balign 4\n'
    assert text.count(head) == 1
    table.write_text(text.replace(head, head + "\t/* an entry pointing into data */\n"
                                  "\t.4byte sdt_probes_enabled - .\n\t.4byte .Lsdt_probe0 - .\n"
                                  "\t.byte 1, 5, 0, 0, 0, 0, 0, 0\n\t.4byte 0\n"))  # no asm goto target
    exe = build_process(out)
    proc = run([str(exe), "enable", ":::", "trap", "run", "kmain,1", "disable", ":::", "run", "kmain,1"], check=False,
               timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[0]["patched"] == len(called_sites(exe))
    (data,) = [int(v, 16) for v in re.findall(r"sdt: \S+ site at 0x([0-9a-f]+) is not in the kernel's text",
                                               proc.stderr)]
    symbols = {name: value for value, _, _, _, _, name in readelf_symbols(exe)}
    assert data - lines[0]["load_bias"] == symbols["sdt_probes_enabled"]
    assert [x["value"] for x in lines if x["event"] == "return"] == [lines[2]["value"]] * 2 and lines[2]["value"]


def called_sites(exe: Path) -> list[str]:
    """Every call or jump to a probe stub in the program, as objdump disassembles it."""
    return re.findall(r"\t(?:call|jmp|j[a-z]+) +[0-9a-f]+ <__dtrace_(?:sdt|isenabled)_\w+>",
                      run(["objdump", "-d", "--no-show-raw-insn", str(exe)]).stdout)


@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_a_spec_arms_exactly_its_probes(formed, native_all, tmp_path, mode):
    r = Run(formed, tmp_path, "enable", "hk:vfs::", mode, "enable", "*:*:*:done", mode, *commands(CALLS))
    want = [(p, a) for p, a in native_firings(native_events(native_all, CALLS))
            if p.startswith("hk:vfs:") or p.endswith(":done")]
    assert r.firings() == want and want


@pytest.fixture(scope="module")
def process_clang_os(tmp_path_factory):
    """kernel-proc built with clang -Os: px_check_big's probe is a conditional tail jump (jae to the stub)."""
    need_tool("clang", "clang")
    exe = build_process(tmp_path_factory.mktemp("process-clang"), CC="clang", OPT="-Os")
    body = run(["objdump", "-d", "--no-show-raw-insn", str(exe)]).stdout.split("<px_check_big>:")[1].split("\n\n")[0]
    assert re.search(r"\tj(?!mp)[a-z]+ +[0-9a-f]+ <__dtrace_sdt_px_check_big_hit>", body), body
    return exe


@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_a_conditional_tail_site_fires_only_when_its_jump_is_taken(process_clang_os, native_all, tmp_path, mode):
    calls = [*EXTRA_CALLS, Call("px_check_big", (3,)), Call("px_check_big", (4,)), *CALLS]
    r = Run(process_clang_os, tmp_path, "enable", ":::", mode, *commands(calls))
    ours, theirs = data_symbolizer(process_clang_os), data_symbolizer(native_all[0])
    assert r.firings(ours) == native_firings(native_events(native_all, calls), theirs)
    assert [a for p, a in r.firings() if p == "px:check:big:hit"] == [[9], [4]]


def args_of(row: dict) -> list:
    return [row["fields"][f"arg{k}"] for k in range(len(row["fields"]))]


def test_babeltrace2_reads_the_streams_as_they_stand(process, native_all, tmp_path):
    """The process's stream files, with sdtgen's CTF metadata beside them, are a CTF 1.8 trace babeltrace2
    reads event for event as packets.py decodes them and as the native run fired them. (No NULL string:
    babeltrace2 2.0.4 shows an empty string as an earlier event's.)"""
    calls = CALLS + [c for c in EXTRA_CALLS if c.function != "px_null"]
    r = Run(process, tmp_path, "--cpus", "2", "enable", ":::", "branch", *commands(calls),
            "run-all", "sched_switch,7,8,3,1,-5000,64")
    read = r.babeltrace2()
    (clock,) = [x["clock"] for x in read if "clock" in x]
    assert clock == {"name": "tsc_ns", "frequency": 1_000_000_000}  # gen's --clock-hz, as the process's clock ticks
    rows = [x for x in read if "name" in x and x["name"] != TASK_EVENT]
    # Each packet's task event (docs/runtime.md), before its first firing: the thread's id, context and name.
    tasks = {(x["cpu"], x["ts"]): x["fields"] for x in read if x.get("name") == TASK_EVENT}
    assert sorted({(cpu, f["tid"], f["context"], f["procname"]) for (cpu, _), f in tasks.items()}) == \
        sorted({(e.cpu, e.task.id, e.task.context, e.task.name) for e in r.events})
    # Each event's fields in its probe's order, as the metadata declares them (px:name:gen:set: a string, an int).
    assert [list(x["fields"]) for x in rows] == [[f"arg{k}" for k in range(len(x["fields"]))] for x in rows]
    assert "px:name:gen:set" in {x["name"] for x in rows}
    ours = [(e.probe, e.cpu, e.ts, normal(e.probe, list(e.args))) for e in r.events]
    theirs = [(x["name"], x["cpu"], x["ts"], normal(x["name"], args_of(x)))
              for x in rows]
    assert sorted(theirs, key=lambda t: (t[1], t[2])) == sorted(ours, key=lambda t: (t[1], t[2]))
    bias, symbols = r.line("init")["load_bias"], data_symbolizer(process)
    on_cpu0 = [(p, normal(p, a, lambda v: symbols(v - bias))) for p, cpu, _, a in theirs if cpu == 0]
    fired = native_firings(native_events(native_all, calls), data_symbolizer(native_all[0]))
    assert on_cpu0[:len(fired)] == fired


def test_each_cpu_records_into_its_own_stream(process, native_all, tmp_path):
    r = Run(process, tmp_path, "--cpus", "3", "enable", ":::", "branch", "run-all", "sched_switch,7,8,3,1,5000,64")
    want = native_firings(native_events(native_all, [Call("sched_switch", (7, 8, 3, 1, 5000, 64))]))
    for cpu in range(3):
        got = [(e.probe, normal(e.probe, list(e.args))) for e in r.events if e.cpu == cpu]
        assert [p for p, _ in got] == [p for p, _ in want]
        assert got[0] == want[0] == ("hk:sched:switch:six", [7, 8, 3, 1, 5000, 64])
    assert {p.cpu for p in r.packets} == {0, 1, 2}


def test_disarmed_nothing_fires_and_results_are_the_native_ones(formed, native_all, tmp_path):
    r = Run(formed, tmp_path, "enable", ":::", "trap", "disable", ":::", *commands(CALLS),
            "run", "px_guarded,3", "enable", "px:guard::", "trap", "run", "px_guarded,3")
    assert r.firings() == [("px:guard:costly:value", [9])]  # only once armed: is-enabled said no before
    assert r.returns()[len(CALLS):] == [0, 1]  # SDT_PROBES_ENABLED(): nothing armed, then one probe
    assert returned(r.returns()[:len(CALLS)], CALLS) == native_returns(native_events(native_all, CALLS), CALLS)


def test_packets_of_any_size_the_runtime_takes_reach_the_trace(process, native_all, tmp_path):
    r = Run(process, tmp_path, "--buffer", str(4 << 20), "--packet", str(2 << 20), "enable", "hk:sched:run:tick",
            "branch", "run", "sched_run,3")
    assert r.firings() == ticks(native_all, 3) and [p.size for p in r.packets] == [2 << 20]


# -- overflow: what a ring keeps and what it counts ------------------------------------------------------
TICK = 16 + 16  # a sched:run:tick event: its header and two words
# Each packet says its task first (docs/runtime.md): a header, the thread's id and context, its name (the
# executable's, kernel-proc, which the threads the process starts inherit) and a NUL, to the next 8 bytes.
TASK = (16 + 16 + len("kernel-proc") + 1 + 7) // 8 * 8
PER_PACKET = (1024 - 64 - TASK) // TICK  # 28: events of a 1024-byte packet after its task event
RING = ["--buffer", "2048", "--packet", "1024", "--consumer", "none"]  # two packets, read only when told


def ticks(native_all, n: int) -> list[tuple[str, list]]:
    return native_firings(native_events(native_all, [Call("sched_run", (n,))]))


@pytest.mark.parametrize("n", [PER_PACKET - 1, PER_PACKET, PER_PACKET + 1, 2 * PER_PACKET, 2 * PER_PACKET + 1, 100])
def test_discard_keeps_the_oldest_and_counts_the_rest(process, native_all, tmp_path, n):
    r = Run(process, tmp_path, *RING, "enable", "hk:sched:run:tick", "branch", "run", f"sched_run,{n}")
    fired = ticks(native_all, n)
    shown, lost = r.firings(), r.line("cpu")["discarded"]
    assert shown == fired[:min(n, 2 * PER_PACKET)]  # the ring holds two packets: the first ones fired
    assert len(shown) + lost == len(fired)
    for p in r.packets:  # a packet's events fill it, and the last one holds the rest
        events = min(PER_PACKET, len(shown) - PER_PACKET * (p.seq - 1))
        assert (p.events, p.content) == (events, 64 + TASK + TICK * events)


def test_the_consumer_thread_reads_closed_packets_while_the_program_runs(process, native_all, tmp_path):
    """A packet's close wakes the consumer thread when it sleeps (and only then: no system call a packet while it
    keeps up): the program waits (`await`) for the packets it closed to be read while it goes on, twice, the
    consumer asleep in between. A consumer never woken would read them only at the end, and `await` would say
    it read none."""
    n1, n2 = 2 * PER_PACKET + 1, 2 * PER_PACKET
    r = Run(process, tmp_path, "--buffer", "8192", "--packet", "1024", "enable", "hk:sched:run:tick", "branch",
            "run", f"sched_run,{n1}", "await", "2", "run", f"sched_run,{n2}", "await", "4")
    first, second = (x["packets"] for x in r.lines if x["event"] == "read")
    assert first >= 2 and second >= 4, (first, second)  # read by then (never woken: what it read before sleeping)
    assert r.firings() == ticks(native_all, n1) + ticks(native_all, n2) and r.line("cpu")["discarded"] == 0


def test_discard_records_again_once_the_consumer_has_read_and_says_where_it_lost(process, native_all, tmp_path):
    r = Run(process, tmp_path, *RING, "enable", "hk:sched:run:tick", "branch", "run", "sched_run,100", "drain",
            "run", "sched_run,5")
    assert r.line("drained")["packets"] == 2
    kept = 2 * PER_PACKET
    assert r.firings() == ticks(native_all, 100)[:kept] + ticks(native_all, 5)
    assert r.line("cpu")["discarded"] == 100 - kept
    assert [(p.seq, p.discarded) for p in r.packets] == [(1, 0), (2, 0), (3, 100 - kept)]  # lost between 2 and 3
    rows = r.babeltrace2()
    assert [x["discarded"] for x in rows if "discarded" in x] == [100 - kept]
    assert [x["fields"]["arg0"] for x in rows if x.get("name", TASK_EVENT) != TASK_EVENT] == \
        [a[0] for _, a in r.firings()]


@pytest.mark.parametrize("n", [2 * PER_PACKET + 1, 100, 3 * PER_PACKET])
def test_overwrite_keeps_the_newest_and_counts_what_it_overwrote(process, native_all, tmp_path, n):
    r = Run(process, tmp_path, *RING[:4], "--overflow", "overwrite", "--consumer", "none", "enable",
            "hk:sched:run:tick", "branch", "run", f"sched_run,{n}")
    fired = ticks(native_all, n)
    shown, cpu = r.firings(), r.line("cpu")
    kept = PER_PACKET + (n % PER_PACKET or PER_PACKET)  # the last full packet and the one being filled
    assert shown == fired[n - kept:]
    assert len(shown) + cpu["overwritten"] + cpu["discarded"] == len(fired) and cpu["discarded"] == 0
    last = (n + PER_PACKET - 1) // PER_PACKET
    assert [p.seq for p in r.packets] == [last - 1, last]  # the gap before them: packets overwritten unread


def test_overwrite_with_a_consumer_reading_meanwhile_counts_each_lost_event_once(process, tmp_path):
    """The consumer thread copies packets while the writer laps it: a packet is either read or overwritten,
    never both (shown + overwritten == fired), and every packet that reaches the trace is whole. (Without a
    trace file the consumer copies faster and meets the writer more often.)"""
    n, runs = 1_000_000, 4
    for trace in (False, True):
        r = Run(process, tmp_path, "--overflow", "overwrite", "--buffer", "2048", "--packet", "1024", "enable",
                "hk:sched:run:tick", "branch", *["run", f"sched_run,{n}"] * runs, events=False, trace=trace)
        cpu, stats = r.line("cpu"), r.line("stats")
        assert stats["events"] + cpu["overwritten"] == n * runs and cpu["discarded"] == 0, trace
    assert sum(p.events for p in r.packets) == stats["events"] > 0
    seqs = [p.seq for p in r.packets]
    assert seqs == sorted(set(seqs))


# -- torture: the patch protocol under real threads on real cores ---------------------------------------
@pytest.mark.parametrize(("arm", "call", "spec", "form"), [("branch", "kmain,1", ":::", "call"),
                                                           ("cycle", "kmain,1", ":::", "call"),
                                                           ("cycle", "px_many,0", "px:many::", "call"),
                                                           ("cycle", "kmain,1", ":::", "goto")])
def test_the_safe_protocol_never_tears_nor_faults_on_real_cores(process, process_goto, tmp_path, arm, call, spec,
                                                                form):
    """Asm goto sites too: their NOP and the jmp that replaces it differ in all five bytes, so every toggle goes
    through the breakpoint protocol."""
    exe = process if form == "call" else process_goto
    r = Run(exe, tmp_path, "--cpus", "2", "--arm", arm, "torture", call, spec, "10000", events=False)
    t = r.line("torture")
    assert (t["protocol"], t["toggles"]) == ("safe", 10000)
    assert (t["faults"], t["torn"]) == (0, 0)
    # the sites ran while they changed (CPU 1 met breakpoints of patches in flight), and fired
    assert t["calls"] > 0 and t["transient"] > 0 and t["firings"] > 0
    assert sum(p.events for p in r.packets) == t["firings"]  # every packet whole: the consumer lost none
    shutil.rmtree(r.dir)  # up to gigabytes, read: not kept with the run's temporary files


def test_make_process_builds_runs_traces_and_tortures_it(tmp_path, native_all):
    """The project's `make process`, run where a user would run it (the worked example of docs/runtime.md)."""
    venv = Path(sys.prefix)
    out = run(["make", "-f", str(ROOT / "Makefile"), "--no-print-directory", "-o", f"{venv}/.installed",
               f"VENV={venv}", "process"], cwd=tmp_path).stdout
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    (t,) = [x for x in lines if x["event"] == "torture"]
    assert (t["toggles"], t["faults"], t["torn"]) == (10000, 0, 0) and t["firings"] > 0
    dec = decoder()
    events = [e for data in split((tmp_path / "build/process/trace/stream_0").read_bytes(), dec)
              for e in dec.events(data)[1]]
    want = native_events(native_all, [Call("vfs_lookup_id", (0,)), Call("sched_run", (3,))])
    assert [(e.probe, normal(e.probe, list(e.args))) for e in events] == \
        [f for f in native_firings(want) if f[0].startswith("hk:vfs:") or f[0] == "hk:sched:run:tick"]


# -- how text is written: never writable and executable at once ----------------------------------------
@pytest.fixture(scope="module")
def deny(tmp_path_factory) -> Path:
    """tests/runtime/hosted/deny.c: a command under a seccomp filter refusing what hardened kernels refuse (any
    mapping writable and executable at once) or memfd_create, or both: the kernel, not the program, says no."""
    exe = tmp_path_factory.mktemp("deny") / "deny"
    run([need_tool("gcc", "gcc"), "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
         str(ROOT / "tests" / "runtime" / "hosted" / "deny.c")])
    return exe


@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_text_written_through_an_alias_is_never_writable_and_executable(process, native_all, deny, tmp_path, mode):
    """Under a kernel that refuses every W+X mapping the text is written through a second, writable mapping of
    its pages, and every probe fires as natively."""
    calls = CALLS + EXTRA_CALLS
    exe = tmp_path / "under-deny"
    exe.write_text(f"#!/bin/sh\nexec {deny} wx {process} \"$@\"\n")
    exe.chmod(0o755)
    r = Run(exe, tmp_path, "--text", "alias", "enable", ":::", mode, *commands(calls))
    assert r.line("init")["text"] == "alias"
    ours, theirs = data_symbolizer(process), data_symbolizer(native_all[0])
    assert r.firings(ours) == native_firings(native_events(native_all, calls), theirs)


def test_the_alias_holds_the_protocol_under_a_running_cpu(process, deny, tmp_path):
    proc = run([str(deny), "wx", str(process), "--cpus", "2", "--arm", "cycle", "torture", "kmain,1", ":::", "2000"])
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    (t,) = [x for x in lines if x["event"] == "torture"]
    assert lines[0]["text"] == "alias" and (t["faults"], t["torn"]) == (0, 0) and t["transient"] > 0


def test_where_memfds_are_refused_text_is_made_writable_by_mprotect(process, native_all, deny, tmp_path):
    exe = tmp_path / "under-deny"
    exe.write_text(f"#!/bin/sh\nexec {deny} memfd {process} \"$@\"\n")
    exe.chmod(0o755)
    r = Run(exe, tmp_path, "enable", ":::", "branch", *commands(CALLS))
    assert r.line("init")["text"] == "mprotect"
    ours, theirs = data_symbolizer(process), data_symbolizer(native_all[0])
    assert r.firings(ours) == native_firings(native_events(native_all, CALLS), theirs)


@pytest.mark.parametrize(("refused", "text", "says"), [
    ("wx", "mprotect", "mprotect refuses to make text writable and executable (Permission denied): use the alias "
                       "(SDT_LINUX_TEXT_AUTO)"),
    ("both", "auto", "mprotect refuses to make text writable and executable (Permission denied), and a writable "
                     "alias of it (memfd) is refused too"),
    ("memfd", "alias", "a writable alias of the text (memfd_create, then mmap of it executable) is refused: "
                       "Permission denied")])
def test_where_text_cannot_be_written_the_platform_says_why_and_patches_nothing(process, deny, refused, text, says):
    proc = run([str(deny), refused, str(process), "--text", text, "enable", ":::", "branch"], check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"sdt_linux: {says}\n"


# -- a kernel of its own under the same harness ---------------------------------------------------------------
FOREIGN = r"""
#include <sdt.h>
#include "net.h"

SDT_PROVIDER_DEFINE(net);
SDT_PROBE_DEFINE3(net, ip, send, packet, "const char *", "int", "long");

static const char *const ifaces[] = {"eth0", "wlan0", "lo"};

long net_send(int n)
{
	long bytes = 0;
	for (int i = 0; i < n; i++) {
		bytes += NET_MTU - i;
		SDT_PROBE3(net, ip, send, packet, ifaces[i % 3], i, bytes);
	}
	return bytes;
}
"""


def test_a_foreign_kernel_reuses_the_process_harness(tmp_path):
    """fixtures/process/Makefile with a kernel's own sources and include directory (no kern.h, no extra.c):
    the interpreter runs its functions, firing as its C does natively."""
    from native import build_native, run_native

    src, include = tmp_path / "src", tmp_path / "src" / "include"
    include.mkdir(parents=True)
    (include / "net.h").write_text("#define NET_MTU 1500\nlong net_send(int n);\n")
    (src / "net.c").write_text(FOREIGN)
    build_process(tmp_path / "build", KERNEL_SRCS=str(src / "net.c"), KERNEL_CFLAGS=f"-I{include}", EXE="net-proc")
    exe = tmp_path / "build" / "net-proc"
    assert not list((tmp_path / "build").rglob("extra.o"))  # the fixture's own, only for the fixture
    native = build_native(tmp_path, [src / "net.c"], {"net_send": ("long", ["int"])},
                          run([SDTGEN, "include-dir"]).stdout.strip(), (f"-I{include}",))
    expected = run_native(native, [Call("net_send", (7,))])
    dec = Decoder([event_format(probe_key(p.symbol), p.spec, p.args, 64) for p in called_probes(src)], 64)
    trace = tmp_path / "trace"
    trace.mkdir()
    proc = run([str(exe), "--trace", str(trace), "enable", "net:::", "trap", "run", "net_send,7"])
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [x["value"] for x in lines if x["event"] == "return"] == [expected[-1]["return"]]
    fired = [(e.probe, list(e.args)) for d in split((trace / "stream_0").read_bytes(), dec) for e in dec.events(d)[1]]
    assert fired == [(e["probe"], e["args"]) for e in expected if "probe" in e]
