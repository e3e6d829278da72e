"""The runtime's layers call only down. sdt_runtime.c, the one file a kernel compiles, includes one layer a file from
the bottom up; a layer calls, and reads or writes the variables of, only itself and the layers included before it
(sdt_state.h is its unit sdt_state.c's). The truth is gcc's own graph of the unit as a kernel compiles it: its call
graph (-fcallgraph-info, each call with the file it is written in), its references to variables (-fdump-ipa-cgraph),
and where nm -l says each variable is defined. Built without inlining, a call to an always_inline function is an edge
of the graph too. The control core (sdt_control.c, a unit of its own) is above every layer: no layer calls it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from helpers import ROOT, need_tool, run

RUNTIME = ROOT / "sdtgen" / "runtime"
INCLUDE = ROOT / "sdtgen" / "include"
# Without inlining (at -O0 gcc still inlines an always_inline function): every call is an edge of the graph.
FLAGS = ("-O0", "-fno-inline", "-Dalways_inline=noinline", "-w", "-ffreestanding", "-g")
NODE = re.compile(r'^node: \{ title: "([^"]+)" label: "([^"\\]+)(?:\\n([^":]+):\d+:\d+)?"')
EDGE = re.compile(r'^edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)" label: "([^":]+):\d+:\d+"')
ENTRY = re.compile(r"^([\w.]+)/\d+ \(")
INDIRECT = "Indirect Call Placeholder"  # a call through a pointer: the kernel's hooks
REFERENCE = re.compile(r"([\w.]+)/\d+ \((?:read|write|addr)\)")


def layers(runtime: Path) -> list[str]:
    """The layer files in the order sdt_runtime.c includes them: the bottom first."""
    return re.findall(r'^#include "(sdt_\w+\.c)"', (runtime / "sdt_runtime.c").read_text(), re.M)


Graph = tuple[dict[str, str], set[tuple[str, str, str]], set[tuple[str, str]]]


def graph(runtime: Path, unit: str, out: Path) -> Graph:
    """Unit ``unit`` of ``runtime`` as gcc sees it: where each function it defines is ({name: file}), its calls
    (caller, callee, the file the call is written in) and its functions' references to variables (function,
    variable)."""
    out.mkdir(parents=True, exist_ok=True)
    obj = out / (Path(unit).stem + ".o")
    run([need_tool("gcc", "gcc"), *FLAGS, f"-I{INCLUDE}", f"-I{runtime}", "-c", str(runtime / unit), "-o", str(obj),
         "-fcallgraph-info", f"-fdump-ipa-cgraph={out / 'cgraph.txt'}"], cwd=out)
    names: dict[str, str] = {}
    calls: set[tuple[str, str, str]] = set()
    for line in obj.with_suffix(".ci").read_text().splitlines():
        if m := NODE.match(line):
            names[m[1]] = m[2]
            if m[3] and "shape : ellipse" not in line:  # a function the unit defines (one it only declares: an ellipse)
                names["@" + m[2]] = Path(m[3]).name
        elif m := EDGE.match(line):
            calls.add((m[1], m[2], Path(m[3]).name))
    defined = {k[1:]: v for k, v in names.items() if k.startswith("@")}
    edges = {(names.get(a, a), names.get(b, b), site) for a, b, site in calls}
    refs: set[tuple[str, str]] = set()
    function = None
    for line in (out / "cgraph.txt").read_text().splitlines():
        if m := ENTRY.match(line):
            function = m[1]
        elif line.startswith("  References:") and function is not None:
            refs |= {(function, v) for v in REFERENCE.findall(line)}
    return defined, edges, refs


def variables(obj: Path) -> dict[str, str]:
    """Each variable the object defines: the file nm -l says it is defined in."""
    out = {}
    for line in run([need_tool("nm", "binutils"), "-l", str(obj)]).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[1] in "bBdDrR" and ":" in parts[3]:
            out[parts[2]] = Path(parts[3].rsplit(":", 1)[0]).name
    return out


def upward(runtime: Path, out: Path) -> list[str]:
    """Every call or reference of sdt_runtime.c from a layer to one above it, and every call of the control core
    from the runtime, said as `caller (its file) -> callee (its file)`."""
    order = layers(runtime)
    rank = {f: i for i, f in enumerate(order)}
    rank |= {f[:-2] + ".h": rank[f] for f in order if (runtime / (f[:-2] + ".h")).exists()}  # a unit's own header
    defined, edges, refs = graph(runtime, "sdt_runtime.c", out / "runtime")
    control = {f for f, where in graph(runtime, "sdt_control.c", out / "control")[0].items()
               if where.startswith("sdt_control")}
    found = []
    for caller, callee, site in sorted(edges):
        where = defined.get(callee)
        if callee in control:
            found.append(f"{caller} ({site}) -> {callee} (the control core)")
        elif site in rank and where in rank and rank[where] > rank[site]:
            found.append(f"{caller} ({site}) -> {callee} ({where})")
    homes = variables(out / "runtime" / "sdt_runtime.o")
    for function, var in sorted(refs):
        site, where = defined.get(function), homes.get(var)
        if site in rank and where in rank and rank[where] > rank[site]:
            found.append(f"{function} ({site}) -> {var} ({where}, a variable)")
    return found


def test_the_runtime_includes_its_shared_state_first_and_every_layer_once():
    order = layers(RUNTIME)
    assert order[0] == "sdt_state.c" and len(order) == len(set(order)), order
    assert sorted(order) == sorted(p.name for p in RUNTIME.glob("sdt_*.c")
                                   if p.name not in ("sdt_runtime.c", "sdt_serial.c", "sdt_setjmp.c")
                                   and not p.name.startswith("sdt_control")), order


def test_no_layer_calls_or_reads_a_layer_above_it(tmp_path):
    defined, edges, refs = graph(RUNTIME, "sdt_runtime.c", tmp_path / "seen")
    assert {"sdt_init", "sdt_trap", "sdt_poke_run", "sdt_module_load", "take"} <= set(defined)  # the graph is read
    assert any(c == "sdt_module_load" and d == "run_marked" for c, d, _ in edges), sorted(edges)[:20]
    assert ("remember", "specs") in refs, sorted(refs)[:20]
    assert upward(RUNTIME, tmp_path) == []


def test_the_patch_protocol_calls_only_the_state_and_the_port(tmp_path):
    """As Linux's text_poke_bp_batch: it takes the marked sites and calls none of its clients."""
    defined, edges, _ = graph(RUNTIME, "sdt_runtime.c", tmp_path)
    assert any(callee == INDIRECT for _, callee, site in edges if site == "sdt_patch.c")  # the hooks seen
    called = {defined.get(callee, "the port" if callee.startswith("sdt_arch_") else callee)
              for _, callee, site in edges if site == "sdt_patch.c" and callee != INDIRECT}  # the kernel's hooks
    assert called <= {"sdt_patch.c", "sdt_state.c", "sdt_state.h", "sdt_internal.h", "the port"}, called


def test_a_call_up_is_seen(tmp_path):
    """The check can fail: a copy of the runtime whose log layer calls management (sdt_enable), and whose state reads
    the patch protocol's variable, is named with both."""
    copy = tmp_path / "runtime"
    shutil.copytree(RUNTIME, copy)
    report = copy / "sdt_report.c"
    report.write_text(report.read_text() + "\nSDT_CODE void sdt_report_up(void)\n{\n\tsdt_enable(\"a:b\", 1);\n}\n")
    patch = copy / "sdt_patch.c"
    patch.write_text(patch.read_text().replace("static int committed;", "int sdt_committed_up;\nstatic int committed;"))
    state = copy / "sdt_state.c"
    state.write_text(state.read_text() + "\nextern int sdt_committed_up;\nSDT_CODE int sdt_state_up(void)\n{\n"
                     "\treturn sdt_committed_up;\n}\n")
    found = upward(copy, tmp_path / "seen")
    assert "sdt_report_up (sdt_report.c) -> sdt_enable (sdt_manage.c)" in found, found
    assert "sdt_state_up (sdt_state.c) -> sdt_committed_up (sdt_patch.c, a variable)" in found, found
