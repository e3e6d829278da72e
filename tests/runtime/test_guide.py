"""The porting guide (docs/runtime.md) says what is true of the runtime it describes."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, cross_tool, need_tool, readelf_symbols, run, sdtgen, unavailable

from sdtgen import layout

GUIDE = ROOT / "docs" / "runtime.md"


def section(heading: str) -> str:
    """The text under ``heading`` (a Markdown heading line), up to the next heading of any level (a line starting
    with # outside a fenced block)."""
    lines = GUIDE.read_text().splitlines(keepends=True)
    out, fenced = [], False
    for line in lines[lines.index(f"{heading}\n") + 1:]:
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            break
        out.append(line)
    return "".join(out)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the first Markdown table in ``text``, header and rule left out."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def test_the_hook_table_names_exactly_the_fields_of_struct_sdt_hooks():
    """Every field of sdt_hooks (sdtgen/layout.py renders the struct) has a row, once; the table names nothing
    the struct lacks."""
    named = [re.match(r"\w+", name).group(0) for row in table_rows(section("### The hooks"))
             for name in re.findall(r"`([^`]+)`", row[0])]
    fields = [f.name for f in layout.HOOKS.fields]
    assert sorted(named) == sorted(fields), (set(named) ^ set(fields), named)


# -- a kernel of its own, built as the guide says -------------------------------------------------------
PORTING = ROOT / "fixtures" / "porting"
HARTS, WORK = 3, 200  # what the porting kernel's QEMU machine has, and main.c's WORK


def recipe() -> str:
    """The Makefile recipe of "Building it", as it stands in the guide."""
    (block,) = [b for b in re.findall(r"^```make\n(.*?)^```$", section("## Building it"), re.S | re.M)
                if "linker-script partial" in b]
    return block


def build_with_recipe(out: Path) -> Path:
    """The porting kernel's sources and what it says of itself (kernel.mk), and the guide's recipe for the
    rest: nothing else of sdtgen's. `sdtgen` is the one on PATH, as a user's would be."""
    out.mkdir(parents=True)
    for name in (*PORTING.glob("*.[cSh]"), PORTING / "kernel.ld", PORTING / "kernel.mk"):
        shutil.copy(name, out)
    (out / "Makefile").write_text(
        "include kernel.mk\n"
        "OBJS := $(addprefix build/,$(addsuffix .o,$(basename $(SOURCES))))\n"
        "all: build/kernel.elf\n"
        "build/%.o: %.c\n\t@mkdir -p build\n\t$(CC) $(KERNEL_CFLAGS) -I$(shell sdtgen include-dir) -c -o $@ $<\n"
        "build/%.o: %.S\n\t@mkdir -p build\n\t$(CC) $(KERNEL_CFLAGS) -c -o $@ $<\n"
        + recipe())
    env = {**os.environ, "PATH": f"{Path(SDTGEN).parent}:{os.environ['PATH']}"}
    run(["make", "-C", str(out)], env=env)
    return out / "build" / "kernel.elf"


def build_with_fragment(out: Path) -> Path:
    run(["make", "-C", str(PORTING), f"O={out}", f"SDTGEN={SDTGEN}"])
    return out / "kernel.elf"


@pytest.fixture(scope="module", params=["recipe", "fragment"])
def ported(request, tmp_path_factory) -> Path:
    cross_tool("riscv64", "gcc")
    out = tmp_path_factory.mktemp(f"port-{request.param}")
    return (build_with_recipe if request.param == "recipe" else build_with_fragment)(out / "k")


def boot_and_record(image: Path, tmp: Path) -> tuple[list[str], Path]:
    """QEMU's virt machine with OpenSBI, three harts, the UART into a file the kernel fills until it powers off;
    then `sdtgen record` of that file (nothing dropped or damaged): the kernel's lines, and the trace."""
    from sdtgen import arch as arches

    a = arches.by_name("riscv64")
    serial, trace = tmp / "serial", tmp / "trace"
    run([need_tool(a.qemu.binary, a.qemu.package), "-machine", a.qemu.machine, "-smp", str(HARTS), "-m", "128M",
         "-bios", "default", "-nodefaults", "-display", "none", "-monitor", "none", "-serial", f"file:{serial}",
         "-kernel", str(image)], timeout=300)
    rec = run([SDTGEN, "record", str(image), "--serial", str(serial), "--trace", str(trace), "--json"],
              timeout=120)
    events = [json.loads(x) for x in rec.stdout.splitlines()]
    end = events[-1]
    assert end["event"] == "recorded" and (end["dropped"], end["damaged"]) == (0, 0), end
    return [e["text"] for e in events if e["event"] == "text"], trace


def test_a_kernel_of_its_own_built_as_the_guide_says_boots_and_records_what_its_c_fires(ported, tmp_path):
    """Built with the guide's recipe as it stands, or with the fragment's defaults: its entry first at the
    address OpenSBI jumps to and its init text between its own bounds (the partial link kept both sections), the
    serial transport linked; on QEMU under OpenSBI every hart's events, drained in the notify hook (the name
    probe from the breakpoint handler), are those of work() run natively, none lost."""
    from native import Call, build_native, run_native

    from sdtgen.event_format import event_format
    from sdtgen.image import Image
    from sdtgen.trace.ctf import has_task_context, runtime_stream
    from sdtgen.trace.packets import Decoder, split

    symbols = {name: value for value, _, _, _, _, name in readelf_symbols(ported)}
    assert symbols["_start"] == 0x80200000
    assert symbols["__init_start"] <= symbols["kinit"] < symbols["__init_end"]
    assert "sdt_serial_drain" in symbols and "sdt_serial_info" in symbols
    lines, trace = boot_and_record(ported, tmp_path)
    hello = next(ln for ln in lines if ln.startswith("hello hart "))
    sites = len(json.loads(sdtgen("scan", ported.parent / "kernel.o", "--json", check=True).stdout)["sites"])
    assert f": {sites} sites patched, init text {symbols['__init_end'] - symbols['__init_start']} bytes" in hello
    assert f"harts {HARTS}, started by SBI HSM {HARTS - 1}" in lines and "enabled 1 1" in lines
    assert lines[-1] == "done"
    drains = [re.fullmatch(rf"notify {h} drained (\d+) times, (\d+) in the breakpoint handler", ln)
              for h in range(HARTS) for ln in lines if ln.startswith(f"notify {h} ")]
    assert len(drains) == HARTS and all(int(m[2]) > 0 for m in drains), lines  # drained in the handler, none lost
    with Image(str(ported)) as im:
        decoder = Decoder([event_format(p.key, p.spec, p.args, 64) for p in im.probes()], 64)
    native = build_native(tmp_path, [PORTING / "work.c"], {"work": ("long", ["int", "int"])},
                          sdtgen("include-dir", check=True).stdout.strip())
    fired = []
    assert has_task_context(trace)  # its task hook: every event says its hart's thread in the trace
    for hart in range(HARTS):
        expected = run_native(native, [Call("work", (hart, WORK))])
        assert f"work {hart} = {expected[-1]['return']}" in lines
        packets = list(split(runtime_stream((trace / f"stream_{hart}").read_bytes(), 64), decoder))
        decoded = [e for pk in packets for e in decoder.events(pk)[1]]
        events = [(e.probe, list(e.args)) for e in decoded]
        assert events == [(e["probe"], e["args"]) for e in expected if "probe" in e], f"hart {hart}"
        assert {(e.task.id, e.task.context, e.task.name) for e in decoded} == {(hart + 1, "kernel", f"hart{hart}")}
        assert {p.discarded for p in map(decoder.packet, packets)} == {0}
        fired += [(hart, probe, args) for probe, args in events]
    # The CTF metadata gen wrote at build time (--clock-hz, --clock-name) names the kernel's clock, and
    # babeltrace2 reads the trace `sdtgen record` wrote (each event's arguments in its probe's order).
    metadata = next(ported.parent.glob("*metadata"))
    assert "\tname = rdtime;" in metadata.read_text() and "\tfreq = 10000000;" in metadata.read_text()
    rows = [r for r in bt2_read(trace) if "name" in r and r["name"] != "sdt:task"]
    read = [(r["cpu"], r["name"], [r["fields"][f"arg{k}"] for k in range(len(r["fields"]))])
            for r in rows]  # every CPU's in time order: compared CPU by CPU
    assert sorted(read, key=lambda r: r[0]) == fired
    assert all(r["tid"] == r["cpu"] + 1 for r in rows)  # each event's context: its hart's thread


def bt2_read(trace: Path) -> list[dict]:
    """The trace as babeltrace2 reads it (python3-bt2 is Debian's, not the venv's)."""
    python = "/usr/bin/python3"
    if not Path(python).exists() or run([python, "-c", "import bt2"], check=False).returncode:
        unavailable("babeltrace2's Python bindings not found: apt-get install python3-bt2")
    return [json.loads(x) for x in run([python, str(ROOT / "tests" / "trace" / "bt2_read.py"), str(trace)]).stdout
            .splitlines()]
