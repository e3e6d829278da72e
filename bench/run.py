"""`make bench`: sdtgen at kernel scale and the real cost of a probe, each beside a baseline.

Builds its own inputs (cached under build/bench), prints a table and writes BENCHMARKS.md.
Times are best-of-N wall clock on this machine; every figure is reported as a ratio to a
baseline measured in the same run. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tools")]
SDTGEN = str(Path(sys.executable).with_name("sdtgen"))
os.environ["SDTGEN"] = SDTGEN  # what tools/toolchain.py drives

import synth  # noqa: E402
import toolchain  # noqa: E402

from sdtgen.image import Image  # noqa: E402
from sdtgen.session.reporter import Reporter  # noqa: E402
from sdtgen.session.starts import open_session  # noqa: E402
from sdtgen.targets.emulator.machine import Machine  # noqa: E402


@dataclass
class Row:
    what: str
    value: str
    baseline: str
    ratio: float
    target: str
    met: bool | None

    def cells(self) -> list[str]:
        met = "" if self.met is None else ("yes" if self.met else "NO")
        return [self.what, self.value, self.baseline, f"{self.ratio:.3g}x", self.target, met]


def run_measured(cmd: list[str] | str, shell: bool = False) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one process (and, for a shell pipeline, the largest child).

    Linux carries a process's peak RSS across fork and exec, so the figure is only the child's own
    while this process is smaller than the child: main() measures the tools first."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"bench: {cmd} failed: {proc.stderr.read().decode()[-500:]}")
    return elapsed, usage.ru_maxrss * 1024


def best(n: int, fn) -> tuple[float, int]:
    results = [fn() for _ in range(n)]
    return min(r[0] for r in results), max(r[1] for r in results)


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def pyelftools_scan(path: Path, prefix: str = "__dtrace_sdt_") -> int:
    """The naive baseline: every relocation section, every relocation, its symbol's name."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection

    found = 0
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        for sec in elf.iter_sections():
            if isinstance(sec, RelocationSection):
                for r in sec.iter_relocations():
                    if symtab.get_symbol(r["r_info_sym"]).name.startswith(prefix):
                        found += 1
    return found


def link_image(obj: Path, work: Path, build: toolchain.Build) -> Path:
    """`sdtgen gen` on the partial link, then the stubs, table and runtime compiled with ``build``'s flags (the
    synthetic kernels: the kernel flags, not the -fno-inline their units need) and the final link."""
    toolchain.gen(obj, work / "s.c", work / "t.S")
    sdt_objs = toolchain.compile_table(build, work / "s.c", work / "t.S", work)
    return toolchain.final_link(build, obj, sdt_objs, work / "kernel.elf")


def link_many(work: Path, name: str, partial: Path) -> Path:
    """An image of a synthetic kernel (gen rewrites the object in reloc mode: a copy of it)."""
    d = work / name
    d.mkdir(exist_ok=True)
    shutil.copy(partial, d / "kernel.o")
    return link_image(d / "kernel.o", d, toolchain.Build())


# -- build-time tools -----------------------------------------------------------------
def startup_rows(fixture: Path) -> list[Row]:
    """sdtgen's start-up, the rows `make bench-startup` measures alone: `--version` and a scan of the fixture
    object (each build step runs it), against the interpreter's own start-up in the same run."""
    floor, _ = best(20, lambda: run_measured([sys.executable, "-c", "pass"]))
    version, _ = best(20, lambda: run_measured([SDTGEN, "--version"]))
    ours, _ = best(20, lambda: run_measured([SDTGEN, "scan", "--json", str(fixture)]))
    return [Row("sdtgen --version", f"{version:.4f} s", f"python -c pass: {floor:.4f} s", version / floor,
                "<= 2x", version / floor <= 2),
            Row(f"scan, fixture object ({fixture.stat().st_size >> 10} KiB)", f"{ours:.4f} s",
                f"python -c pass: {floor:.4f} s", ours / floor, "<= 3x", ours / floor <= 3)]


def update_rows(path: Path, rows: list[Row], note: str, append: bool = False) -> None:
    """The rows of ``path`` (BENCHMARKS.md) whose measure is one of ``rows``' replaced by them (``append``: those it
    has not yet added after its last row), ``note`` added below the header's run line in place of the last note of
    the same rows (its words before " are from "): the rest stay as the last whole run wrote them."""
    lines = path.read_text().splitlines()
    fresh = {r.what.split(" (")[0]: "| " + " | ".join(r.cells()) + " |" for r in rows}
    missing = list(fresh)
    for i, line in enumerate(lines):
        measure = line.split(" | ")[0].removeprefix("| ").split(" (")[0]
        if line.startswith("| ") and measure in fresh:
            lines[i] = fresh[measure]
            missing.remove(measure)
    if missing and not append:
        raise SystemExit(f"{path}: no row {', '.join(sorted(missing))}: run `make bench` once")
    order = list(fresh)
    for m in missing:  # after the row before it in ``rows`` (there by now), or after the table's last row
        before = order[:order.index(m)]
        at = [i for i, line in enumerate(lines) if line.startswith("| ") and
              (not before or line.split(" | ")[0].removeprefix("| ").split(" (")[0] == before[-1])]
        lines.insert(at[-1] + 1, fresh[m])
    lines = [line for line in lines if not line.startswith(note.split(" are from ")[0] + " are from ")]
    lines.insert(next(i for i, line in enumerate(lines) if line.startswith("Run by ")) + 1, note)
    path.write_text("\n".join(lines) + "\n")


def tools_rows(large: Path, fixture: Path, work: Path) -> list[Row]:
    rows = startup_rows(fixture)
    scan_time, mem = best(3, lambda: run_measured([SDTGEN, "scan", "--json", str(large)]))
    theirs, _ = best(3, lambda: run_measured(f"readelf -rW {large} | grep __dtrace_sdt_", shell=True))
    size = large.stat().st_size
    rows.append(Row(f"scan, large object ({size >> 10} KiB)", f"{scan_time:.3f} s",
                    f"readelf -rW | grep: {theirs:.3f} s", scan_time / theirs, "<= 0.1x", scan_time / theirs <= 0.1))
    rows.append(Row("scan peak memory, large object", f"{mem / 2**20:.0f} MiB", f"object size: {size / 2**20:.0f} MiB",
                    mem / size, "<= 3x", mem / size <= 3))
    copy = work / "large-copy.o"

    def gen_once() -> tuple[float, int]:
        shutil.copy(large, copy)
        return run_measured([SDTGEN, "gen", str(copy), "--stubs", str(work / "s.c"), "--table", str(work / "t.S")])

    gen_time, _ = best(3, gen_once)
    rows.append(Row("gen, large object", f"{gen_time:.3f} s", f"scan: {scan_time:.3f} s", gen_time / scan_time,
                    "<= 2x", gen_time / scan_time <= 2))
    linked = work / "large-linked.o"
    shutil.copy(large, linked)
    image = link_image(linked, work, toolchain.Build())
    check_time, _ = best(3, lambda: run_measured([SDTGEN, "check", "--quiet", str(linked), str(image)]))
    rows.append(Row("check, large image", f"{check_time:.3f} s", f"scan: {scan_time:.3f} s",
                    check_time / scan_time, "<= 1.5x", check_time / scan_time <= 1.5))
    naive, count = timed(lambda: pyelftools_scan(large))
    rows.append(Row(f"scan vs a pyelftools loop ({count} sites)", f"{scan_time:.3f} s", f"pyelftools: {naive:.1f} s",
                    naive / scan_time, ">= 10x faster", naive / scan_time >= 10))
    return rows


def noop_make_row(work: Path) -> Row:
    """A `make` of the README's Makefile with nothing to do, beside `make -n` of it (which expands the same
    $(shell ...) lines): the fixed cost sdtgen adds to every incremental kernel build."""
    import re

    tree = work / "readme"
    tree.mkdir(exist_ok=True)
    text = (ROOT / "README.md").read_text()
    blocks = {info: re.findall(rf"^```{info}\n(.*?)^```$", text, re.S | re.M) for info in ("c", "make")}
    (tree / "main.c").write_text(next(b for b in blocks["c"] if b.startswith("/* main.c")))
    (tree / "Makefile").write_text(next(b for b in blocks["make"] if b.startswith("# Makefile")))
    env = {**os.environ, "PATH": f"{Path(SDTGEN).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["make", "-s", "-C", str(tree)], env=env, check=True, stdout=subprocess.DEVNULL)

    def make(*args: str) -> tuple[float, int]:
        start = time.perf_counter()
        subprocess.run(["make", "-C", str(tree), *args], env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start, 0

    noop, _ = best(10, make)
    dry, _ = best(10, lambda: make("-n"))
    return Row("no-op make of the README's Makefile", f"{noop:.3f} s", f"make -n: {dry:.3f} s", noop / dry,
               "<= 0.15 s in all", noop <= 0.15)


# -- probe tables binaries already carry ------------------------------------------------
def tables_rows(work: Path) -> list[Row]:
    import tables

    rows = []
    if tables.VMLINUX_O.exists():
        obj, what = tables.VMLINUX_O, "Linux vmlinux.o"
    else:  # a stand-in of the realworld object's size and __fentry__ count, said so in the row
        print("bench: no build/realworld vmlinux.o (run `make realworld`): the __fentry__ row measures a "
              "synthetic stand-in", file=sys.stderr)
        obj, what = synth.fentry_standin(work, str(ROOT / "sdtgen" / "include")), "SYNTHETIC stand-in for vmlinux.o"
    ours, _ = best(10, lambda: run_measured([SDTGEN, "scan", "--prefix", "__fentry__", str(obj)]))
    theirs, _ = best(10, lambda: run_measured(f"readelf -rW {obj} | grep -c __fentry__", shell=True))
    rows.append(Row(f"scan --prefix __fentry__, {what} ({obj.stat().st_size >> 10} KiB)", f"{ours:.3f} s",
                    f"readelf -rW | grep -c: {theirs:.3f} s", ours / theirs, "<= 1.0x", ours / theirs <= 1.0))
    rows += floor_rows(theirs, "readelf -rW | grep -c", "sdtgen.scan")
    lib = tables.usdt_library(work)
    if lib is None:
        print("bench: no sys/sdt.h (apt-get install systemtap-sdt-dev): the USDT row is left out", file=sys.stderr)
    installed = tables.largest_usdt_binary()
    for what, path in (("shared object with 500 USDT notes", lib), ("the largest installed binary with USDT notes, "
                                                                     f"{path_name(installed)}", installed)):
        if path is None:
            continue
        ours, _ = best(10, lambda path=path: run_measured([SDTGEN, "probes", "--kind", "stapsdt", str(path)]))
        theirs, _ = best(10, lambda path=path: run_measured(["readelf", "-n", str(path)]))
        start, _ = best(10, lambda: run_measured([sys.executable, "-c", "pass"]))  # the measure: beyond it
        rows.append(Row(f"probes --kind stapsdt beyond the interpreter's start-up, {what} "
                        f"({path.stat().st_size >> 10} KiB)", f"{ours - start:.4f} s ({ours:.3f} s in all)",
                        f"readelf -n: {theirs:.4f} s", (ours - start) / theirs, "<= 1.0x",
                        (ours - start) / theirs <= 1.0))
        rows += floor_rows(theirs, "readelf -n", "sdtgen.listing")
    return rows


def path_name(path: Path | None) -> str:
    return f"{path.parent.name}/{path.name}" if path else ""


def floor_rows(theirs: float, baseline: str, module: str) -> list[Row]:
    """The fixed cost of a command against a native tool's whole run: the interpreter's start-up, and the
    start-up with what the command imports (sdtgen.cli and ``module``); the rest of the command's time is its
    work on the file."""
    floor, _ = best(10, lambda: run_measured([sys.executable, "-c", "pass"]))
    imports, _ = best(10, lambda: run_measured([sys.executable, "-c", f"import sdtgen.cli, {module}"]))
    return [Row("  of which the interpreter's start-up", f"python -c pass: {floor:.4f} s",
                f"{baseline}: {theirs:.4f} s", floor / theirs, "(the floor)", None),
            Row(f"  of which start-up and imports (sdtgen.cli, {module})", f"{imports:.4f} s",
                f"{baseline}: {theirs:.4f} s", imports / theirs, "(the floor)", None)]


# -- the emulated boot -------------------------------------------------------------------
def quiet() -> Reporter:
    """A reporter that shows no firing and prints nowhere: what is timed is the boot, not its output."""
    return Reporter(out=io.StringIO(), err=io.StringIO(), quiet=True)


def boot_command(image: Path, arm: str, n: int, trace: Path, func: str = "sched_run",
                 enable: tuple[str, ...] = ("hk:sched:run:tick",)) -> list[str]:
    """`sdtgen boot` arming ``enable`` with ``arm`` and running ``func(n)``, its events to a CTF trace, -q."""
    return [SDTGEN, "boot", str(image), "--arm", arm, *(a for spec in enable for a in ("--enable", spec)),
            "--run", func, "--arg", str(n), "-q", "--trace", str(trace), "--timeout", "3600"]


def sdt_init_time(image: Path, count: bool = False) -> tuple[float, float, int, int]:
    """Best of 3: (seconds of the guest's sdt_init, seconds of the boot's whole patching step: sdt_init and the
    table read back with each site's state, sites patched, and with ``count`` sdt_init's guest instructions,
    counted in a run of its own) on a boot of ``image`` made with nothing patched."""
    def sdt_init(s) -> int:
        return s.target.runtime.call(s.target.machine, "sdt_init", [s.target.platform.hooks_address])

    guest, whole, patched = [], [], 0
    for _ in range(3):
        s = open_session("emulator", str(image), quiet(), patch=False)
        try:
            guest.append(timed(lambda s=s: sdt_init(s))[0])
        finally:
            s.close()
        s = open_session("emulator", str(image), quiet(), patch=False)
        try:
            t, result = timed(s.target.runtime.init)
            whole.append(t)
            patched = len(result.of("off"))
        finally:
            s.close()
    if not count:
        return min(guest), min(whole), patched, 0
    s = open_session("emulator", str(image), quiet(), patch=False, timeout=3600)  # a hook call an instruction: slow
    try:
        insns = counted(s.target.machine, lambda: sdt_init(s))
    finally:
        s.close()
    return min(guest), min(whole), patched, insns


def patch_rows(image: Path, unsorted: Path) -> list[Row]:
    """The guest runtime's sdt_init over every site of a large image (verify, write the NOP, sync the cores), beside
    loading the image into the emulator; ``unsorted`` is the same kernel with its table in name order. The floor:
    sdt_init's guest instructions a site, at the time an instruction of its own mix takes under Unicorn."""
    def load() -> None:
        with Image(str(image)) as img:
            Machine(img.elf, img.arch).close()

    load_time = min(timed(load)[0] for _ in range(3))
    guest, whole, count, insns = sdt_init_time(image, count=True)
    guest_u, _, count_u, _ = sdt_init_time(unsorted)
    rate = count / guest
    per_insn = guest / insns
    return [Row(f"boot: sdt_init patches {count:,} sites (table in address order, as the fragment links)",
                f"{rate:,.0f} sites/s", f"loading the image: {load_time:.3f} s", guest / load_time,
                ">= 1,000,000 sites/s", rate >= 1_000_000),
            Row("  the floor: sdt_init's guest instructions a site (x86-64, counted)", f"{insns / count:.0f} insns",
                f"emulated: {per_insn * 1e9:.2f} ns an instruction", insns / count * per_insn / 1e-6,
                f"(1 us a site allows {1e-6 / per_insn:.0f})", None),
            Row("  the boot's whole step: sdt_init, then the host reads the table back",
                f"{count / whole:,.0f} sites/s", f"sdt_init alone: {guest * 1e3:.1f} ms", whole / guest, "", None),
            Row("  sdt_init, a table in section-name order (plain ld -r): sorted at boot", f"{count_u / guest_u:,.0f} "
                "sites/s", f"in address order: {rate:,.0f} sites/s", guest_u / guest, "", None)]


VARIANTS = {"out": (["-DSDT_COMPILED_OUT"], ()), "classic": (["-DSDT_CLASSIC"], ("classic.c",)), "calls": ([], ()),
            "mix": ([], ("mix.c",))}


@functools.cache
def fixture_build(work: Path, variant: str, fixture: str = "kernel") -> Path:
    """A fixture kernel, probes compiled out / as calls / classic / with bench/mix.c, built with sdtgen's steps
    (once a run: the sources, sdtgen and its runtime may have changed since the last)."""
    sources = sorted((ROOT / "fixtures" / fixture).glob("*.c"))
    define, extra = VARIANTS[variant]
    b = toolchain.Build(cflags=(*toolchain.kernel_cflags("x86_64"), *define),
                        extra_sources=tuple(ROOT / "bench" / name for name in extra))
    d = work / (f"fixture-{variant}" if fixture == "kernel" else f"{fixture}-{variant}")
    d.mkdir(parents=True, exist_ok=True)
    objs = toolchain.compile_sources(b, sources, d)
    partial = toolchain.partial_link(b, objs, d / "kernel.o")
    return link_image(partial, d, b)


def run_loop(image: Path, arm: str, n: int, count: int = 0, patch: bool | None = None) -> tuple[float, int]:
    """Emulated seconds (best of 5) of sched_run(n) on a booted image, hk:sched:run:tick armed with ``arm``
    (or nothing armed); with ``count``, guest instructions of ``count`` iterations of its loop. The ring is
    read between runs only (--no-stream): what is timed is the guest."""
    s = open_session("emulator", str(image), quiet(), patch=patch, buffer_size=DATAPATH_BUFFER, stream=False)
    try:
        if arm:
            s.set_arm(arm)
            s.enable("hk:sched:run:tick")
        func = s.image.symbols["sched_run"].value

        def once() -> float:
            s.drain()  # each run starts with an empty ring (the drain is not timed)
            return timed(lambda: s.target.machine.call(func, [n]))[0]

        elapsed = min(once() for _ in range(5))
        return elapsed, session_count(s, "sched_run", count) if count else 0
    finally:
        s.close()


def counted(m: Machine, fn) -> int:
    """Guest instructions CPU ``m`` runs in ``fn()``. Counting hooks every instruction: it runs only in calls
    of its own, untimed."""
    from unicorn import UC_HOOK_CODE

    counter = [0]
    h = m.uc.hook_add(UC_HOOK_CODE, lambda uc, a, size, u: counter.__setitem__(0, counter[0] + 1))
    try:
        m.uc.ctl_flush_tb()  # code translated before the hook would not count
        fn()
        return counter[0]
    finally:
        m.uc.hook_del(h)


def count_instructions(m: Machine, func: int, n: int) -> int:
    """Guest instructions of ``func(2n)`` less those of ``func(n)`` on CPU ``m``: n iterations of its loop,
    without the call's own set-up."""
    return counted(m, lambda: m.call(func, [2 * n])) - counted(m, lambda: m.call(func, [n]))


def session_count(s, func: str, n: int) -> int:
    try:
        return count_instructions(s.target.machine, s.image.symbols[func].value, n)
    finally:
        s.drain()


def booted_count(image: Path, func: str, n: int, arm: str = "") -> int:
    s = open_session("emulator", str(image), quiet())
    try:
        if arm:
            s.enable(arm)
        return session_count(s, func, n)
    finally:
        s.close()


def unbooted_count(image: Path, func: str, n: int) -> int:
    """The same count on the image loaded as it is: a build whose probes are all compiled out (or classic) has
    nothing to boot (the session refuses its stubs without sites)."""
    with Image(str(image)) as img:
        m = Machine(img.elf, img.arch)
        try:
            return count_instructions(m, img.symbols[func].value, n)
        finally:
            m.close()


def guarded_loop_rows(work: Path) -> list[Row]:
    """fixtures/freebsd's hot loop: its probe's argument is a string hash, asked for through
    SDT_PROBE_ENABLED(); guest instructions per iteration with the probe disabled."""
    n = 20_000
    out, calls, classic = (fixture_build(work, v, "freebsd") for v in ("out", "calls", "classic"))
    per = lambda i: f"{i / n:.2f} insns/iteration"  # noqa: E731
    i_out = unbooted_count(out, "hot_loop", n)
    i_guarded = booted_count(calls, "hot_loop", n)
    i_unguarded = booted_count(calls, "hot_loop_unguarded", n)
    i_classic = unbooted_count(classic, "hot_loop", n)
    i_other = booted_count(calls, "hot_loop", n, "ip:::send")
    extra = (i_guarded - i_out) / n
    return [
        Row("is-enabled guard, expensive argument, disabled: guest instructions", per(i_guarded),
            f"compiled out: {per(i_out)}", i_guarded / i_out, "<= 3 more", extra <= 3),
        Row("  guarded vs the same probe unguarded (hash always computed)", per(i_guarded),
            f"unguarded: {per(i_unguarded)}", i_guarded / i_unguarded, "< 1x", i_guarded < i_unguarded),
        Row("  guarded vs classic if (sdt_probe_func)", per(i_guarded), f"classic: {per(i_classic)}",
            i_guarded / i_classic, "", None),
        Row("  guarded, another probe armed (ip:::send)", per(i_other), f"nothing armed: {per(i_guarded)}",
            i_other / i_guarded, "1x", i_other == i_guarded),
    ]


def probe_cost_rows(work: Path, small: bool) -> list[Row]:
    n, n_count = (500_000, 20_000) if small else (5_000_000, 200_000)
    out, calls, classic = (fixture_build(work, v) for v in ("out", "calls", "classic"))
    t_out, i_out = run_loop(out, "", n, n_count)
    t_stub, i_stub = run_loop(calls, "", n, n_count, patch=False)
    t_nop, i_nop = run_loop(calls, "", n, n_count)
    t_classic, i_classic = run_loop(classic, "", n, n_count)
    per = lambda i: f"{i / n_count:.2f} insns/iteration"  # noqa: E731
    return [
        Row("disabled probe, hot loop: patched NOP, emulated time", f"{t_nop * 1e3:.1f} ms",
            f"compiled out: {t_out * 1e3:.1f} ms", t_nop / t_out, "<= 1.05x", t_nop / t_out <= 1.05),
        Row("  guest instructions: patched NOP", per(i_nop), f"compiled out: {per(i_out)}", i_nop / i_out, "", None),
        Row("  guest instructions: patched NOP vs stub calls", per(i_nop), f"unpatched stubs: {per(i_stub)}",
            i_nop / i_stub, "< 1x", i_nop < i_stub),
        Row("  guest instructions: patched NOP vs classic", per(i_nop), f"if (sdt_probe_func): {per(i_classic)}",
            i_nop / i_classic, "< 1x", i_nop < i_classic),
        Row("  emulated time: stub calls, classic", f"{t_stub * 1e3:.1f} ms, {t_classic * 1e3:.1f} ms",
            f"compiled out: {t_out * 1e3:.1f} ms", t_stub / t_out, "", None),
    ]


GOTO_FORMS = {"out": ("-DSDT_COMPILED_OUT",), "call": (), "goto": ("-DSDT_ASM_GOTO",)}


@functools.cache
def goto_build(work: Path, arch: str, form: str) -> Path:
    """bench/goto_cost.c for ``arch``, its probes compiled out, as calls or as asm gotos (FreeBSD 15's form)."""
    b = toolchain.Build(arch=arch, cflags=(*toolchain.kernel_cflags(arch), *GOTO_FORMS[form]), entry="bench_loop")
    d = work / f"goto-{arch}-{form}"
    d.mkdir(parents=True, exist_ok=True)
    objs = toolchain.compile_sources(b, [ROOT / "bench" / "goto_cost.c"], d)
    return link_image(toolchain.partial_link(b, objs, d / "kernel.o"), d, b)


def stepped(m: Machine, func: int, size: int, args: list[int]) -> tuple[int, int]:
    """(guest instructions, of which outside the function: its callees') of one call, each instruction seen by a
    code hook, as single-stepping sees it."""
    from unicorn import UC_HOOK_CODE

    seen = [0, 0]

    def hook(uc, a, n, u) -> None:
        seen[0] += 1
        seen[1] += not func <= a < func + size

    h = m.uc.hook_add(UC_HOOK_CODE, hook)
    try:
        m.uc.ctl_flush_tb()
        m.call(func, args)
    finally:
        m.uc.hook_del(h)
    return seen[0], seen[1]


def goto_counts(image: Path, booted: bool, n: int) -> dict[str, tuple[float, float]]:
    """Per iteration of bench_loop (the count of 2n iterations less n's), and per call of bench_handle: (guest
    instructions, callee instructions), the probes disabled (booted: sdt_init wrote every site; or compiled out)."""
    if booted:
        s = open_session("emulator", str(image), quiet())
        m, symbols, close = s.target.machine, s.image.symbols, s.close
    else:
        img = Image(str(image))
        m, symbols = Machine(img.elf, img.arch), img.symbols

        def close() -> None:
            m.close()
            img.close()
    try:
        loop, handle = symbols["bench_loop"], symbols["bench_handle"]
        data, req = symbols["bench_data"].value, symbols["bench_req"].value
        (a, ac), (b, bc) = (stepped(m, loop.value, loop.size, [data, k]) for k in (2 * n, n))
        return {"loop": ((a - b) / n, (ac - bc) / n), "handle": stepped(m, handle.value, handle.size, [req])}
    finally:
        close()


def asm_goto_rows(work: Path) -> list[Row]:
    """FreeBSD 15's asm goto form against the same function compiled out, on every architecture: a disabled probe
    whose argument is a call (bench/goto_cost.c), guest instructions counted instruction by instruction in
    Unicorn; the call form beside it. `sdtgen cost` says where the difference goes (docs/cli.md)."""
    n, rows = 64, []
    for arch in toolchain.arch_names():
        out = goto_counts(goto_build(work, arch, "out"), False, n)
        goto = goto_counts(goto_build(work, arch, "goto"), True, n)
        call = goto_counts(goto_build(work, arch, "call"), True, n)
        for what, unit in (("loop", "insns/iteration"), ("handle", "insns/call")):
            (g, gc), (o, oc), (c, cc) = goto[what], out[what], call[what]
            place = "in a hot loop" if what == "loop" else "in a function that calls another"
            # no calls: no more instructions in callees than the function without the probe runs
            rows.append(Row(f"asm goto probe, expensive argument, disabled, {place} ({arch})",
                            f"{g:g} {unit}, {gc:g} in callees", f"compiled out: {o:g}, {oc:g} in callees", g / o,
                            "<= 2 more, no calls", g - o <= 2 and gc == oc))
            rows.append(Row(f"  the call form, disabled, same function ({arch})", f"{c:g} {unit}, {cc:g} in callees",
                            f"compiled out: {o:g}, {oc:g} in callees", c / o, "", None))
    return rows


DATAPATH_BUFFER = 16 << 20  # per CPU: the in-process loops below never fill a ring


def datapath_rows(work: Path, small: bool) -> list[Row]:
    """The data path end to end: `sdtgen boot -q --trace` with the probe armed by trap and by branch, each firing's
    host time; then where a branch firing's time goes: the guest's recorder, the host's drain and decode."""
    calls = fixture_build(work, "calls")
    trace = work / "firing-trace"
    per: dict[str, float] = {}
    for arm, n in (("trap", 2_000 if small else 20_000), ("branch", 100_000 if small else 1_000_000)):
        idle, _ = best(3, lambda arm=arm: run_measured(boot_command(calls, arm, 0, trace)))
        full, _ = best(3, lambda arm=arm, n=n: run_measured(boot_command(calls, arm, n, trace)))
        per[arm] = max(full - idle, 1e-9) / n
    shutil.rmtree(trace, ignore_errors=True)
    n, n_count = (20_000, 20_000) if small else (200_000, 20_000)
    t_disarmed, i_disarmed = run_loop(calls, "", n, n_count)
    t_branch, i_branch = run_loop(calls, "branch", n, n_count)
    guest = max(t_branch - t_disarmed, 1e-9) / n
    per_event = (i_branch - i_disarmed) / n_count
    drained, t_drain = drain_rate(calls, 60_000)
    return [
        Row("armed probe, end to end (boot -q --trace, CTF): host time per firing, branch",
            f"{per['branch'] * 1e6:.3f} us", f"trap: {per['trap'] * 1e6:.1f} us", per["trap"] / per["branch"],
            ">= 100x cheaper", per["trap"] / per["branch"] >= 100),
        Row("  of which the guest's recorder (branch, emulated)", f"{guest * 1e6:.3f} us",
            f"end to end: {per['branch'] * 1e6:.3f} us", guest / per["branch"], "(share)", None),
        Row("  the floor: trap end to end against the guest's recorder alone (no host work)",
            f"{per['trap'] / guest:.0f}x cheaper", f"trap: {per['trap'] * 1e6:.1f} us", per["trap"] / guest,
            "(the floor)", None),
        Row("  guest instructions per recorded event (x86-64, branch, 2 arguments)", f"{per_event:.1f} insns",
            f"disarmed: {i_disarmed / n_count:.2f} insns/iteration", per_event, "<= 50", per_event <= 50),
        Row("  host drain and decode (Session.drain, -q)", f"{drained / t_drain:,.0f} events/s",
            f"{drained} events: {t_drain * 1e3:.1f} ms", drained / t_drain / 500_000, ">= 500,000 events/s",
            drained / t_drain >= 500_000),
    ]


def drain_rate(image: Path, n: int) -> tuple[int, float]:
    """Events and seconds of draining and decoding one ring the guest filled with n two-argument records."""
    s = open_session("emulator", str(image), quiet(), arm="branch", buffer_size=DATAPATH_BUFFER, stream=False)
    try:
        s.enable("hk:sched:run:tick")
        s.target.machine.call(s.image.symbols["sched_run"].value, [n])
        elapsed = timed(s.drain)[0]
        return s.hits["hk:sched:run:tick"], elapsed
    finally:
        s.close()


def memory_row(work: Path, small: bool) -> Row:
    """Peak RSS of `sdtgen boot` recording n events into a CTF trace (through /usr/bin/time, whose own small
    process is what the boot forks from: Linux carries a parent's peak RSS across fork and exec)."""
    image = fixture_build(work, "calls")
    trace = work / "memory-trace"
    n = 300_000 if small else 3_000_000

    def peak(n: int) -> int:
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", *boot_command(image, "branch", n, trace)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
        return int(proc.stderr.strip().splitlines()[-1]) * 1024

    try:
        full, idle = peak(n), peak(0)
    finally:
        shutil.rmtree(trace, ignore_errors=True)
    return Row(f"peak memory: a boot recording {n:,} events into a CTF trace", f"{full / 1e6:.0f} MB",
               f"recording none: {idle / 1e6:.0f} MB", full / idle, "<= 200 MB", full <= 200e6)


# -- several CPUs ------------------------------------------------------------------------
@functools.cache
def unicorn_rates(image: Path, arm: str, n: int) -> dict[int, float]:
    """Firings a second of sched_run(n) on every CPU at once (parallel), its tick probe armed with ``arm``, with 1,
    2 and 4 CPUs, best of 3; measured once a run, for the rows of several CPUs and QEMU's."""
    rates = {}
    for cpus in (1, 2, 4):
        s = open_session("emulator", str(image), quiet(), cpus=cpus, arm=arm)
        try:
            s.enable("hk:sched:run:tick")
            s.run("sched_run", [100])  # every CPU's code translated before the clock starts
            rates[cpus] = cpus * n / min(timed(lambda s=s: s.run("sched_run", [n]))[0] for _ in range(3))
        finally:
            s.close()
    return rates


def smp_rows(work: Path, small: bool) -> list[Row]:
    """Firings a second of a pure function on 1, 2 and 4 CPUs in parallel; arming and disarming with several
    CPUs; the torture test; what --cpus 1 costs."""
    image = fixture_build(work, "calls")
    rows = []
    for arm, n, target in (("branch", 50_000 if small else 400_000, 1.7), ("trap", 1_000 if small else 5_000, None)):
        rates = unicorn_rates(image, arm, n)
        for c in (2, 4):
            met = rates[c] / rates[1] >= target if target and c == 2 else None
            rows.append(Row(f"--cpus {c} --arm {arm}: firings a second (sched_run({n:,}) on every CPU, parallel)",
                            f"{rates[c]:,.0f} firings/s", f"--cpus 1: {rates[1]:,.0f} firings/s", rates[c] / rates[1],
                            f">= {target}x on {os.cpu_count()} cores" if met is not None else "", met))
            if target and c == 2:
                rows += smp_floor_rows(image, n, rates[1])
    toggle = {}
    for cpus in (1, 4):  # sdt_enable/sdt_disable of one site: the x86 breakpoint protocol, a sync_cores a store
        s = open_session("emulator", str(image), quiet(), cpus=cpus, arm="branch")
        try:
            s.run("sched_run", [10])  # every CPU has the code translated: every flush has work to do
            k = 100 if small else 500

            def toggles(s=s, k=k) -> None:
                for _ in range(k):
                    s.enable("hk:sched:run:tick")
                    s.disable("hk:sched:run:tick")

            toggle[cpus] = min(timed(toggles)[0] for _ in range(3)) / (2 * k)
        finally:
            s.close()
    rows.append(Row("arm or disarm one site (Session.enable/disable, x86 breakpoint protocol), 4 CPUs",
                    f"{toggle[4] * 1e6:.0f} us", f"1 CPU: {toggle[1] * 1e6:.0f} us", toggle[4] / toggle[1], "", None))
    k = 200 if small else 1_000  # some 40 ms a toggle under 4 CPUs: the CPUs run in seeded quanta
    running = {}
    for cpus in (1, 4):  # toggles while the CPUs call sched_run, seeded quanta between the runtime's stores
        cmd = [SDTGEN, "torture", str(image), "--run", "sched_run", "--arg", "20", "--cpus", str(cpus),
               "--toggles", str(k), "--seed", "1", "--json", "--timeout", "3600"]
        t, proc = timed(lambda cmd=cmd: subprocess.run(cmd, capture_output=True, text=True))
        if proc.returncode not in (0, 1):
            raise SystemExit(f"bench: {cmd} failed: {proc.stderr[-500:]}")
        running[cpus] = (t / k, json.loads(proc.stdout))
    s1, s4 = running[1][1], running[4][1]
    rows.append(Row(f"torture: {s4['toggles']} toggles under 4 CPUs ({s4['calls']} calls, {s4['torn']} torn, "
                    f"{s4['faults']} faults)", f"{running[4][0] * 1e6:.0f} us/toggle",
                    f"under 1 CPU: {running[1][0] * 1e6:.0f} us/toggle ({s1['torn']} torn, {s1['faults']} faults)",
                    running[4][0] / running[1][0], "0 torn, 0 faults", s4["passed"] and s1["passed"]))
    m = 500_000 if small else 5_000_000

    def on_cpu0(cpus: int) -> float:  # on a 4-CPU machine CPU 0's memory is host buffers shared by four engines
        s = open_session("emulator", str(image), quiet(), cpus=cpus)
        try:
            func = s.image.symbols["sched_run"].value
            return min(timed(lambda: s.target.machine.call(func, [m]))[0] for _ in range(5))
        finally:
            s.close()

    # One session's time for this call varies from 10 to 22 ms from session to session, whatever its CPUs or
    # rings (measured): the best of several fresh sessions of each, taken in turn.
    best: dict[int, float] = {1: float("inf"), 4: float("inf")}
    for _ in range(4):
        for cpus in best:
            best[cpus] = min(best[cpus], on_cpu0(cpus))
    one, shared = best[1], best[4]
    rows.append(Row(f"--cpus 1: sched_run({m:,}), disarmed", f"{one * 1e3:.1f} ms",
                    f"one CPU of --cpus 4: {shared * 1e3:.1f} ms", one / shared, "<= 1.05x", one / shared <= 1.05))
    return rows


def smp_floor_rows(image: Path, n: int, one: float) -> list[Row]:
    """What two CPUs can give on this machine at best: two independent 1-CPU boots as processes (no shared
    interpreter, no shared guest memory), --cpus 2 running guest code that stores nothing, and the bound the
    host's decoding sets (it holds the GIL: at most Session.drain's events a second in all, against
    ``one``, the firings a second of --cpus 1)."""
    cmd = lambda n: [SDTGEN, "boot", str(image), "--arm", "branch", "--enable", "hk:sched:run:tick",  # noqa: E731
                     "--run", "sched_run", "--arg", str(n), "-q", "--timeout", "3600"]

    def at_once(copies: int, n: int) -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen(cmd(n), stdout=subprocess.DEVNULL) for _ in range(copies)]
        if any(p.wait() for p in procs):
            raise SystemExit(f"bench: {cmd(n)} failed")
        return time.perf_counter() - start

    rate = {k: k * n / max(min(at_once(k, n) for _ in range(3)) - min(at_once(k, 0) for _ in range(3)), 1e-9)
            for k in (1, 2)}
    m = 3_000_000 if n < 100_000 else 30_000_000
    loops = {}
    for cpus in (1, 2):
        s = open_session("emulator", str(image), quiet(), cpus=cpus)
        try:
            s.run("sched_run", [100])
            loops[cpus] = cpus * m / min(timed(lambda s=s: s.run("sched_run", [m]))[0] for _ in range(3))
        finally:
            s.close()
    drained, t_drain = drain_rate(image, 60_000)
    return [Row("  the floor: two 1-CPU boots at once, as processes (nothing shared)", f"{rate[2]:,.0f} firings/s",
                f"one boot: {rate[1]:,.0f} firings/s", rate[2] / rate[1], "(the floor)", None),
            Row(f"  the floor: --cpus 2, sched_run({m:,}) disarmed (guest code with no stores)",
                f"{loops[2]:,.0f} iterations/s", f"--cpus 1: {loops[1]:,.0f} iterations/s", loops[2] / loops[1],
                "(the floor)", None),
            Row("  the floor: the host's decoding under the GIL (Session.drain)", f"{drained / t_drain:,.0f} "
                "events/s", f"--cpus 1: {one:,.0f} firings/s", drained / t_drain / one, "(the floor)", None)]


# -- QEMU --------------------------------------------------------------------------------
QEMU_TOGGLES = 1_000


MODULE_FIXTURE = ROOT / "fixtures" / "module"


def module_source(path: Path, sites: int, per_function: int = 10, probes: int = 100) -> Path:
    """A module of ``sites`` probe sites: functions of ``per_function`` sites each over ``probes`` probes (each
    function its own arguments: gcc would fold identical ones into one)."""
    lines = ["#include <sdt.h>"] + [f'SDT_PROBE_DEFINE1(bmod, , f, hit{k}, "int");' for k in range(probes)]
    for f in range(sites // per_function):
        body = " ".join(f"SDT_PROBE1(bmod, , f, hit{(f * per_function + k) % probes}, x + {f * per_function + k});"
                        for k in range(per_function))
        lines.append(f"int bm_f{f}(int x) {{ {body} return x; }}")
    path.write_text("\n".join(lines) + "\n")
    return path


def module_build(work: Path, src: Path | None, name: str) -> Path:
    """fixtures/module's Makefile on ``src`` (None: its own mod.c) as module ``name``, for x86-64."""
    out = work / f"module-{name}"
    extra = [f"SRCS={src}", f"MODULE={name}"] if src else []
    subprocess.run(["make", "-s", "-C", str(MODULE_FIXTURE), f"O={out}", f"SDTGEN={SDTGEN}", *extra], check=True)
    return out / f"{name}.ko"


def module_rows(work: Path, small: bool) -> list[Row]:
    """sdt_module_load over a module of 10,000 sites (verify, write the NOP, sync: a fresh copy each time), beside
    sdt_init over the same sites linked into the kernel; then unload and load round trips of the fixture's module
    with a spec armed (each load verifies its sites and arms them again)."""
    from sdtgen.modlink import link_module
    from sdtgen.session.session import Session

    n = 1000 if small else 10_000
    src = module_source(work / f"bm{n}.c", n)
    big = module_build(work, src, f"bm{n}")
    # the same sites in the kernel: the fixture kernel with the module's C among its sources
    b = toolchain.Build(cflags=toolchain.kernel_cflags("x86_64"), extra_sources=(src,))
    d = work / f"fixture-with-bm{n}"
    d.mkdir(parents=True, exist_ok=True)
    objs = toolchain.compile_sources(b, sorted((ROOT / "fixtures" / "kernel").glob("*.c")), d)
    inside = link_image(toolchain.partial_link(b, objs, d / "kernel.o"), d, b)
    init_guest, _, init_sites, _ = sdt_init_time(inside)
    kernel = fixture_build(work, "calls")

    def session() -> Session:
        return open_session("emulator", str(kernel), quiet(), modules=True)

    s = session()
    try:
        t = s.target
        linked = link_module(t.image, str(big), t.module_base)
        where = t.module_struct()
        times, patched = [], 0
        for _ in range(3):
            t.machine.write(t.module_base, bytes(linked.size))
            for addr, data, _size in linked.segments:
                t.machine.write(addr, data)
            t.runtime.flush_all(t.machine)
            took, patched = timed(lambda: t.runtime.call(t.machine, "sdt_module_load",
                                                         [where, linked.table, *linked.text]))
            times.append(took)
            t.runtime.call(t.machine, "sdt_module_unload", [where])
    finally:
        s.close()
    load_rate, init_rate = patched / min(times), init_sites / init_guest
    cycles = 50 if small else 500
    s = session()
    try:
        s.set_arm("branch")
        s.enable("hkm:::")
        s.load_module(str(module_build(work, None, "hkm")))
        t = s.target
        where = t.module_struct()
        args = [where, t.module.table, *t.module.text]

        def trips() -> None:
            for _ in range(cycles):
                t.runtime.call(t.machine, "sdt_module_unload", [where])
                t.runtime.call(t.machine, "sdt_module_load", args)

        trip = min(timed(trips)[0] for _ in range(3)) / cycles
        t.runtime.refresh()
        armed = len(t.runtime.armed())
    finally:
        s.close()
    return [Row(f"modules: sdt_module_load registers a module of {patched:,} sites (x86-64, emulated)",
                f"{load_rate:,.0f} sites/s", f"sdt_init, the same sites in the kernel: {init_rate:,.0f} sites/s",
                load_rate / init_rate, "", None),
            Row(f"  unload and load round trips, {armed} sites of a spec armed on each load (the fixture's module)",
                f"{1 / trip:,.0f} round trips/s", f"one round trip: {trip * 1e6:,.0f} us", 1.0, "", None)]


def qemu_rows(work: Path, small: bool) -> list[Row]:
    """The fixture kernel on QEMU (multi-threaded TCG, x86-64): firings a second on 1, 2 and 4 vCPUs in both modes
    beside the emulated boot's figure for as many CPUs, the time from QEMU's start to the first firing, and the
    torture test of both patch protocols under 4 vCPUs."""
    import qemu

    image, emulated = qemu.build(work, "x86_64"), fixture_build(work, "calls")
    n = 2_000 if small else 20_000
    rows = []
    for arm, n_unicorn in (("branch", 50_000 if small else 400_000), ("trap", 1_000 if small else 5_000)):
        unicorn = unicorn_rates(emulated, arm, n_unicorn)
        for cpus in (1, 2, 4):
            guest, host = qemu.firings_per_second(image, cpus, arm, n)
            what = f"QEMU x86-64, {cpus} vCPU{'s' if cpus > 1 else ''}, --arm {arm}: firings a second"
            rows.append(Row(f"{what} (sched_run({n:,}) on each, by the guest's clock)", f"{guest:,.0f} firings/s",
                            f"Unicorn, --cpus {cpus}: {unicorn[cpus]:,.0f} firings/s", guest / unicorn[cpus],
                            "(measured)", None))
            rows.append(Row(f"{what}, end to end (--transport serial: sent over the serial line, decoded on the host)",
                            f"{host:,.0f} firings/s", f"in the guest: {guest:,.0f} firings/s", host / guest,
                            "(measured)", None))
    n = 20_000 if small else 250_000
    for arch, built in (("x86-64", image), ("riscv64", qemu.build(work, "riscv64"))):
        r = qemu.shared_stream(built, work / f"shared-{arch}", 4, n)
        whole = r["events"] == r["expected"] and r["lost"] == 0
        rows.append(Row(f"QEMU {arch}, 4 vCPUs, --arm branch: events a second into a CTF trace, read in the machine's "
                        f"shared RAM (sched_run({n:,}) on each; babeltrace2 read {r['events']:,} of "
                        f"{r['expected']:,}, {r['lost']:,} lost)", f"{r['host']:,.0f} events/s",
                        f"the guest's firing rate: {r['guest']:,.0f} events/s", r["host"] / r["guest"], ">= 0.5x",
                        whole and r["host"] >= 0.5 * r["guest"]))
    hello, first = qemu.first_firing(image)
    rows.append(Row("QEMU x86-64: from starting QEMU to the first firing on the host", f"{first * 1e3:.0f} ms",
                    f"to the kernel's hello: {hello * 1e3:.0f} ms", first / hello, "(measured)", None))
    tinyk = qemu.build_tinyk(work)
    hello, first = qemu.first_firing(tinyk, "tk:net:rx:", ("net_rx", [4]), qemu.TINYK_ARGS)
    rows.append(Row("QEMU riscv64, examples/tinyk under OpenSBI (-- -bios default): from starting QEMU to the first "
                    "firing on the host", f"{first * 1e3:.0f} ms", f"to the kernel's hello: {hello * 1e3:.0f} ms",
                    first / hello, "(measured)", None))
    for what, built, spec, args in (("x86-64, the fixture platform", image, "hk:sched:run:tick", ()),
                                    ("riscv64, examples/tinyk", tinyk, "tk:sched:tick:run", qemu.TINYK_ARGS)):
        rate = qemu.commands_per_second(built, spec, args, 50 if small else 500)
        rows.append(Row(f"QEMU {what}: control commands a second over the serial line (enable and disable round "
                        "trips, one site)", f"{rate:,.0f} commands/s", "one a millisecond: 1,000 commands/s",
                        rate / 1000, "(measured)", None))
    toggles = 100 if small else QEMU_TOGGLES
    for arch in ("riscv64", "x86_64"):
        for naive in (False, True):
            built = qemu.build(work, arch, naive)
            for arm in ("branch", "trap"):
                t = qemu.torture(built, arm, toggles)
                bad = t.torn + t.faults + t.wrong
                rows.append(Row(f"QEMU {arch} torture, {t.protocol} protocol, --arm {arm}: {t.toggles:,} toggles "
                                f"under 4 vCPUs", f"{t.torn:,} torn, {t.faults:,} faulted, {t.wrong:,} wrong",
                                f"{t.calls:,} calls", bad / max(t.calls, 1),
                                "(measured)" if naive else "0 torn, 0 faulted", None if naive else bad == 0))
    return rows


def qemu_aggregation_rows(work: Path, small: bool) -> list[Row]:
    """The fixture kernel on QEMU (x86-64, 2 vCPUs, --arm branch): sched_run on each vCPU with count() and
    quantize(arg0) of its tick probe aggregated in the kernel, 10 million firings (100,000 with --small), checked
    against the values the loop makes (counted arithmetically, not by sdtgen); its end-to-end time beside the
    same firings recorded and streamed over the serial line, at the rate measured on a run that fits the rings
    (the whole run would take minutes at the line's speed)."""
    import qemu

    image, cpus = qemu.build(work, "x86_64"), 2
    n = 50_000 if small else 5_000_000
    seconds, got = qemu.aggregated_run(image, cpus, n)
    rows = {a["name"]: a["rows"] for a in got["aggregations"]}
    buckets = {(b["min"], b["max"]): b["count"] for b in rows["q"][0]["buckets"]}
    exact = (rows["n"] == [{"keys": [], "value": cpus * n}] and buckets == qemu.quantize_expected(n, cpus)
             and (got["dropped"], got["errors"], got["nested"]) == (0, 0, 0))
    n_rec = 10_000 if small else 100_000
    _, host = qemu.firings_per_second(image, cpus, "branch", n_rec)
    recorded = cpus * n / host
    return [Row(f"QEMU x86-64, {cpus} vCPUs, --arm branch: sched_run({n:,}) on each, {cpus * n:,} firings "
                "aggregated in the kernel with count() and quantize(arg0), end to end (the command sent to the "
                "merged aggregations on the host)", f"{seconds:.2f} s, {'exact' if exact else 'NOT exact'}",
                f"recorded and streamed over the serial line: {recorded:,.0f} s (at the {host:,.0f} firings/s "
                f"measured on {cpus * n_rec:,})", recorded / seconds, "exact counts and buckets", exact)]


# -- predicates and aggregations on the real CPU ---------------------------------------------------------------
AGG_PROGRAMS = {"count()": "bench:agg:loop:fire @ = count()",
                "quantize(arg0)": "bench:agg:loop:fire @ = quantize(arg0)",
                "a false predicate": "bench:agg:loop:fire /arg0 < 0/"}


def aggregation_rows(work: Path, small: bool) -> list[Row]:
    """Nanoseconds per firing on this machine's CPU (bench/aggregate.c, built with gen's recorder and the
    runtime as a process builds them, its site armed with a branch): count(), quantize(arg0) and a false
    predicate attached to the probe, beside the same firing recorded into a ring, in one run of one process (the
    best of rounds that measure each in turn)."""
    from sdtgen.dscript import compile_script

    d = work / "aggregate"
    d.mkdir(parents=True, exist_ok=True)
    include, rt = toolchain.include_dir(), toolchain.runtime_dir()
    cflags = ["-O2", "-fPIE", "-fno-asynchronous-unwind-tables", "-fno-stack-protector", f"-I{include}"]
    toolchain.run_tool("compile", ["gcc", *cflags, "-c", "-o", str(d / "aggregate.o"), str(ROOT / "bench" /
                                                                                             "aggregate.c")])
    script = str(toolchain.script_path("x86_64", "partial", d))
    toolchain.run_tool("partial link", ["ld", "-r", "-T", script, "-o", str(d / "kernel.o"), str(d / "aggregate.o")])
    toolchain.gen(d / "kernel.o", d / "stubs.c", d / "table.S")
    objs = [d / "kernel.o"]
    for name, src in (("stubs", d / "stubs.c"), ("table", d / "table.S"), ("runtime", rt / "sdt_runtime.c"),
                      ("arch", rt / "arch" / "sdt_x86_64.c")):
        objs.append(d / f"{name}.o")
        toolchain.run_tool("compile", ["gcc", *cflags, "-ffreestanding", "-fno-lto", "-c", "-o", str(objs[-1]),
                                       str(src)])
    exe = d / "aggregate"
    toolchain.run_tool("link", ["gcc", "-pie", "-o", str(exe), *map(str, objs)])
    with Image(str(exe)) as img:
        probes = img.probes()
    files = []
    for what, text in AGG_PROGRAMS.items():
        [program] = compile_script(text, probes, 64).programs
        path = d / what.replace(" ", "-").replace("(", "_").replace(")", "")
        path.write_bytes(program.code)
        files.append((what, path))
    n = 300_000 if small else 3_000_000
    out = json.loads(subprocess.run([str(exe), str(n), *(str(p) for _, p in files)], capture_output=True, text=True,
                                    check=True).stdout)
    record = out["record"]
    targets = {"count()": 1.0, "a false predicate": 0.25}
    rows = []
    for what, path in files:
        ns = out[str(path)]
        target = targets.get(what)
        rows.append(Row(f"firing on this CPU (x86-64 process, gen's recorder): {what}", f"{ns:.2f} ns",
                        f"the event recorded: {record:.2f} ns", ns / record,
                        f"<= {target:g}x" if target else "", ns / record <= target if target else None))
    return rows


# -- the real CPU beside LTTng-UST and barectf -----------------------------------------------------------------
def cpu_rows(work: Path, small: bool) -> list[Row]:
    """ns per iteration of one loop on this machine's CPU (bench/cpu.py): sdtgen's branch-armed event beside
    LTTng-UST's tracepoint in a session and barectf writing packets to a file, the disabled probe beside the
    function compiled out, a trap-armed firing beside a branch-armed one. A comparison whose trace (read back by
    babeltrace2) holds fewer events than it fired says so, and is not met."""
    import cpu

    runs, why = cpu.measure(work / "cpu", small)
    for k, reason in why.items():
        print(f"bench: the {k} rows are left out: {reason}", file=sys.stderr)
    if "sdtgen" not in runs:
        return []
    ours = runs["sdtgen"]

    def recorded(r: cpu.Run) -> str:
        return f"{r.recorded:,} of {r.fired:,} events in its trace"

    def valid(r: cpu.Run) -> bool:
        return r.fired > 0 and r.recorded == r.fired

    ns = ours.ns
    rows = []
    what = "real CPU (x86-64 process): event with 2 integer arguments, clock included, branch-armed"
    for k, name, target in (("lttng", "LTTng-UST 2.13 tracepoint, a session", 0.25),
                            ("barectf", "barectf 3.1.2, a file platform", 1.0)):
        if k not in runs:
            continue
        theirs = runs[k]
        ok = valid(ours) and valid(theirs)
        rows.append(Row(f"{what}, vs {name}" + ("" if ok else f" (INVALID: sdtgen {recorded(ours)}, {k} "
                                                            f"{recorded(theirs)})"),
                        f"{ns['branch']:.1f} ns/event", f"{name}: {theirs.ns['event']:.1f} ns/event",
                        ns["branch"] / theirs.ns["event"], f"<= {target:g}x",
                        ok and ns["branch"] / theirs.ns["event"] <= target))
    rows.append(Row("real CPU: disabled probe (asm goto form), code after the site, ns per iteration",
                    f"{ns['goto']:.2f} ns", f"compiled out: {ns['out']:.2f} ns", ns["goto"] / ns["out"], "<= 1.02x",
                    ns["goto"] / ns["out"] <= 1.02))
    rows.append(Row("  the call form, disabled, same function", f"{ns['off']:.2f} ns", f"compiled out: "
                    f"{ns['out']:.2f} ns", ns["off"] / ns["out"], "(reported)", None))
    rows.append(Row("real CPU: trap-armed firing (SIGTRAP)", f"{ns['trap']:,.0f} ns/event", f"branch-armed: "
                    f"{ns['branch']:.1f} ns/event", ns["trap"] / ns["branch"], "(reported; >= 100x expected)", None))
    for k, r in runs.items():
        rows.append(Row(f"  {k}'s traces read back by babeltrace2", f"{r.recorded:,} events", f"fired: {r.fired:,}",
                        r.recorded / max(r.fired, 1), "all", valid(r)))
    return rows


# -- streaming to lttng-relayd ---------------------------------------------------------------------------------
def live_rows(work: Path, small: bool) -> list[Row]:
    """Streaming to a real lttng-relayd (bench/live.py, docs/live.md): a QEMU guest's shared-RAM stream against the
    same run written locally, a firing's way to babeltrace2's live output, and eight process targets into one relay
    daemon against one."""
    import live
    import qemu

    work = work / "live"
    work.mkdir(parents=True, exist_ok=True)
    image = qemu.build(work, "x86_64")
    rows = []
    n = 20_000 if small else 250_000
    r = live.qemu_streams(image, work, 4, n, 1 if small else 2)
    whole = all(r[h]["events"] == r["expected"] and r[h]["lost"] == 0 for h in ("local", "relayd"))
    ratio = r["relayd"]["rate"] / r["local"]["rate"]
    rows.append(Row(f"QEMU x86-64, 4 vCPUs, --arm branch: events a second read in the machine's shared RAM and "
                    f"streamed to a local lttng-relayd (sched_run({n:,}) on each, best of {1 if small else 2} boots; "
                    f"babeltrace2 read {r['relayd']['events']:,} of {r['expected']:,} from the relay daemon's trace, "
                    f"{r['relayd']['lost']:,} lost)", f"{r['relayd']['rate']:,.0f} events/s",
                    f"the same run into a local CTF trace: {r['local']['rate']:,.0f} events/s "
                    f"({r['local']['events']:,} read)", ratio, ">= 0.8x", whole and ratio >= 0.8))
    firings = 20 if small else 100
    lat = live.live_latency(image, work, firings)
    med, p99 = live.median(lat), live.percentile(lat, 99)
    rows.append(Row(f"QEMU x86-64 streaming to lttng-relayd: from a firing (its time through the machine's clock "
                    f"correlation) to its line in babeltrace2's lttng-live output, median of {firings} firings 50 to "
                    f"300 ms apart", f"{med * 1e3:.0f} ms", "the live period: 1,000 ms", med / 1.0, "< 1 s", med < 1.0))
    rows.append(Row(f"  the same, 99th percentile (nearest rank of {firings}; fastest {min(lat) * 1e3:.0f} ms)",
                    f"{p99 * 1e3:.0f} ms", "the live period: 1,000 ms", p99 / 1.0, "< 1 s", p99 < 1.0))
    n = 20_000 if small else 200_000
    many = live.many_processes(live.build_process(work), work, (1, 8), n)
    one, eight = many[1], many[8]
    rows.append(Row(f"8 process targets streaming into one lttng-relayd at once: total events a second "
                    f"(sched_run({n:,}) each, a session a thread; babeltrace2 read {eight['events']:,} of "
                    f"{eight['expected']:,}, {eight['lost']:,} lost)", f"{eight['rate']:,.0f} events/s",
                    f"one process target alone: {one['rate']:,.0f} events/s", eight["rate"] / one["rate"],
                    "(measured)", None))
    return rows


# -- sessions on the real CPU -----------------------------------------------------------------------------------
def session_rows(work: Path, small: bool) -> list[Row]:
    """Sessions on this machine's CPU (bench/sessions.py): a firing into the default session against the same
    program built by the tree before sessions, into k sessions against k times one, a disarmed probe while another
    session keeps a site armed, and an always-on flight recorder of the fixture kernel's every probe under
    bench/mix.c. Each figure is the median of the per-round ratios of interleaved rounds, their spread said."""
    import sessions as ss

    m = ss.measure(work / "sessions", small)
    for k, reason in m.unavailable.items():
        print(f"bench: the session row against the {k} tree is left out: {reason}", file=sys.stderr)
    spread = f"median of {m.rounds} rounds"

    def noise(lo: float, hi: float) -> str:
        return f"{spread}, per round {lo:.3g}x to {hi:.3g}x"

    valid = not m.problems
    for p in m.problems:
        print(f"bench: {p}", file=sys.stderr)
    bad = "" if valid else " (INVALID: the rings did not hold what was fired)"
    rows = []
    cpu, s, f = m.cpu, m.sessions, m.flight
    now = statistics.median(cpu["now"])
    if "pre" in cpu:
        r, lo, hi = ss.median_ratio(cpu["now"], cpu["pre"])
        rows.append(Row(f"sessions, real CPU: an event into the default session alone (the recorder's fast path) "
                        f"against the tree before sessions ({noise(lo, hi)}){bad}", f"{now:.1f} ns/event",
                        f"{ss.PRE_SESSIONS[:7]}, the same program: {statistics.median(cpu['pre']):.1f} ns/event", r,
                        "<= 1.05x", valid and r <= 1.05))
        if "no_task" in cpu:
            r, lo, hi = ss.median_ratio(cpu["no_task"], cpu["pre"])
            rows.append(Row(f"  the tree with sessions, before task context ({noise(lo, hi)})",
                            f"{statistics.median(cpu['no_task']):.1f} ns/event",
                            f"{ss.PRE_SESSIONS[:7]}: {statistics.median(cpu['pre']):.1f} ns/event", r, "(reported)",
                            None))
    k1 = statistics.median(s["k1"])
    r, lo, hi = ss.median_ratio(s["one"], s["k1"])
    rows.append(Row(f"sessions, real CPU: an event into one session other than the default, the slow path "
                    f"({noise(lo, hi)}){bad}", f"{statistics.median(s['one']):.1f} ns/event",
                    f"the default session alone: {k1:.1f} ns/event", r, "<= 1.05x", valid and r <= 1.05))
    for k in (2, 4, 8):
        r, lo, hi = ss.median_ratio(s[f"k{k}"], s["k1"], k)
        rows.append(Row(f"sessions, real CPU: an event into {k} sessions, the default one and {k - 1} more "
                        f"({noise(lo, hi)}){bad}", f"{statistics.median(s[f'k{k}']):.1f} ns/firing",
                        f"{k} x the default session alone: {k * k1:.1f} ns", r, "<= 1x", valid and r <= 1))
    for form, key in (("call", "off"), ("asm goto", "goto")):
        r, lo, hi = ss.median_ratio(s[f"{key}_other"], s[key])
        rows.append(Row(f"sessions, real CPU: a disarmed probe, {form} form, while another session keeps another "
                        f"probe's site armed ({noise(lo, hi)}){bad}", f"{statistics.median(s[f'{key}_other']):.3f} ns",
                        f"nothing armed: {statistics.median(s[key]):.3f} ns", r, "<= 1.02x", valid and r <= 1.02))
    rows.append(Row("sessions, real CPU: every session's rings read back", m.read, "what each case fired",
                    1.0 if valid else 0.0, "all, none lost", valid))
    off, on, alone = (statistics.median(f[k]) for k in ("off", "flight", "default"))
    epi = m.events_per_iteration
    r, lo, hi = ss.median_ratio(f["flight"], f["off"])
    rows.append(Row(f"flight recorder, real CPU: the fixture kernel as a process running bench/mix.c, every probe "
                    f"recorded always-on into a session of its own, overwrite ({epi:.1f} events an iteration; "
                    f"{noise(lo, hi)}){bad}", f"{on:.1f} ns/iteration", f"without it: {off:.1f} ns/iteration", r,
                    "(measured)", None))
    per_flight = [(a - b) / epi for a, b in zip(f["flight"], f["off"], strict=True)]
    per_alone = [(a - b) / epi for a, b in zip(f["default"], f["off"], strict=True)]
    r, lo, hi = ss.median_ratio(per_flight, per_alone)
    rows.append(Row(f"  its overhead an event ({noise(lo, hi)})", f"{(on - off) / epi:.1f} ns/event",
                    f"the default session recording the same: {(alone - off) / epi:.1f} ns/event", r, "<= 1.05x",
                    valid and r <= 1.05))
    per_lapped = [(a - b) / epi for a, b in zip(f["lapped"], f["off"], strict=True)]
    r, lo, hi = ss.median_ratio(per_lapped, per_alone)
    rows.append(Row(f"  its overhead an event with 64 KiB rings, lapped many times a loop ({noise(lo, hi)})",
                    f"{(statistics.median(f['lapped']) - off) / epi:.1f} ns/event",
                    f"the default session recording the same: {(alone - off) / epi:.1f} ns/event", r, "<= 1.05x",
                    valid and r <= 1.05))
    rows.append(Row("  its overhead a second of the mix", f"+{(on - off) / off:.1f} s each second of the mix",
                    f"the mix alone: 1 s, firing {epi * 1e3 / off:,.0f} M probes a second", on / off, "(measured)",
                    None))
    rows.append(Row("  the flight recorder's rings read back", m.flight_read, "the native run of the same mix",
                    1.0 if valid else 0.0, "all, none lost", valid))
    return rows


# -- trace writers -----------------------------------------------------------------------
def trace_rows(work: Path, small: bool) -> list[Row]:
    """Events a second each trace sink takes, fed the packets a real boot recorded (bench/mix.c: over half the
    events carry a string), beside pickling the same events."""
    import pickle

    from sdtgen.event_format import event_format
    from sdtgen.targets.emulator.clock import guest_clock
    from sdtgen.trace.model import Lost, TraceMeta, TraceProbe
    from sdtgen.trace.packets import Decoder, split
    from sdtgen.trace.sink import open_trace

    image = fixture_build(work, "mix")
    recorded = work / "mix-trace"
    iterations = 4_000 if small else 31_000  # about 6.5 events each
    subprocess.run(boot_command(image, "branch", iterations, recorded, "bench_mix", ("hk:vfs::", "hk:sched::")),
                   check=True, stdout=subprocess.DEVNULL)
    with Image(str(image)) as img:
        arch, probes = img.arch, img.probes()
    decoder = Decoder([event_format(p.key, p.spec, p.args, arch.bits, arch.little) for p in probes], arch.bits,
                      arch.little)
    clock, hz = guest_clock(arch)
    meta = TraceMeta(arch.name, clock, hz, 1, tuple(TraceProbe(p.key, p.provider, p.module, p.function, p.name,
                                                               p.args) for p in probes))
    packets = []
    for stream in sorted(recorded.glob("stream_*")):
        for written in split(stream.read_bytes(), decoder):
            data = bytes(written)  # as the runtime wrote it: the trace's packets are the runtime's
            packet, events = decoder.events(data)
            if events:  # the writer adds each stream's empty opening and closing packets itself
                packets.append((packet.cpu, data, packet, events))
    shutil.rmtree(recorded)
    events = [e for *_, evs in packets for e in evs]
    n = len(events)
    base = min(timed(lambda: pickle.dumps(events))[0] for _ in range(3))

    def write(fmt: str, path: Path) -> None:
        sink = open_trace(path, fmt, meta, arch.bits, arch.little)
        for cpu, data, packet, evs in packets:
            sink.packet(cpu, data, packet, evs if sink.needs_events else None)
        sink.finish({0: Lost()})

    rows = []
    strings = sum(any(isinstance(a, str) for a in e.args) for e in events)
    for fmt, name, target in (("ctf", "trace", 500_000), ("perfetto", "trace.pftrace", None),
                              ("chrome", "trace.json", None)):
        t = min(timed(lambda fmt=fmt, name=name: write(fmt, work / name))[0] for _ in range(3))
        rows.append(Row(f"trace writer: {fmt}, {n:,} recorded events ({strings * 100 // n}% with a string)",
                        f"{n / t:,.0f} events/s", f"pickle.dumps: {n / base:,.0f} events/s", t / base,
                        f">= {target:,} events/s" if target else "", n / t >= target if target else None))
    t = min(timed(lambda: [decoder.events(data) for _, data, _, _ in packets])[0] for _ in range(3))
    rows.append(Row("  decoding the same packets (trace/packets.py Decoder.events)", f"{n / t:,.0f} events/s",
                    f"pickle.dumps: {n / base:,.0f} events/s", t / base, "", None))
    return rows


def print_rows(rows: list[Row]) -> list[str]:
    """The rows as a table on stdout; its header."""
    header = ["measure", "sdtgen", "baseline (same run)", "ratio", "target", "met"]
    table = [header, *(r.cells() for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table))
    return header


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    ap.add_argument("--work", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--small", action="store_true", help="a small large object, to try the harness quickly")
    ap.add_argument("--only", choices=["aggregation", "cpu", "live", "modules", "qemu-aggregation", "sessions",
                                       "startup", "tables"],
                    help="measure one group of rows and print them (startup, sessions and live: also replaced in "
                         "--out, the other rows left as the last whole run wrote them)")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.only == "aggregation":
        print_rows(aggregation_rows(work, args.small))
        return 0
    if args.only == "modules":
        print_rows(module_rows(work, args.small))
        return 0
    if args.only == "qemu-aggregation":
        print_rows(qemu_aggregation_rows(work, args.small))
        return 0
    if args.only == "cpu":
        print_rows(cpu_rows(work, args.small))
        return 0
    groups = {"sessions": (session_rows, "The session rows (sessions, flight recorder)", "bench-sessions"),
              "live": (live_rows, "The live rows (lttng-relayd)", "bench-live")}
    if args.only in groups:
        measure, what, target = groups[args.only]
        load = os.getloadavg()[0]
        rows = measure(work, args.small)
        print_rows(rows)
        if not args.small:
            update_rows(Path(args.out), rows, f"{what} are from `make {target}` on "
                        f"{time.strftime('%Y-%m-%d', time.gmtime())}, load average {load:.1f} to "
                        f"{os.getloadavg()[0]:.1f}; their ratios are to baselines measured in that run.", append=True)
            print(f"updated {args.out}", file=sys.stderr)
        return 0
    if args.only == "startup":
        import compileall

        compileall.compile_dir(str(ROOT / "sdtgen"), quiet=1)  # as the whole run does first
        load = os.getloadavg()[0]
        rows = startup_rows(fixture_build(work, "calls").parent / "kernel.o")
        print_rows(rows)
        update_rows(Path(args.out), rows, f"The start-up rows (sdtgen --version, scan of the fixture object) are from "
                    f"`make bench-startup` on {time.strftime('%Y-%m-%d', time.gmtime())}, load average "
                    f"{load:.1f} to {os.getloadavg()[0]:.1f}; their ratios are to python -c pass in that run.")
        print(f"updated {args.out}", file=sys.stderr)
        return 0
    if args.only == "tables":
        import compileall

        compileall.compile_dir(str(ROOT / "sdtgen"), quiet=1)  # as the whole run does first
        print_rows(tables_rows(work))
        return 0
    include = str(ROOT / "sdtgen" / "include")
    t0 = time.perf_counter()
    # Every run of sdtgen measured reads compiled modules, as an installed sdtgen does, also where
    # PYTHONDONTWRITEBYTECODE keeps the first run from writing them.
    import compileall

    compileall.compile_dir(str(ROOT / "sdtgen"), quiet=1)
    print("building inputs (cached in build/bench) ...", file=sys.stderr)
    units = 50 if args.small else 1000
    large = synth.build(work, units, 40, 15, 2, include)
    many_units = 50 if args.small else 500
    many = synth.build(work, many_units, 100, 1, 1, include)
    script = Path(toolchain.sdtgen("linker-script", "partial", "--path").strip())
    merged = synth.build(work, many_units, 100, 1, 1, include, script)
    fixture = fixture_build(work, "calls").parent / "kernel.o"
    load = os.getloadavg()[0]
    print("measuring ...", file=sys.stderr)
    # The tools first, while this process is small: a child's peak RSS counts what it inherited at fork.
    rows = tools_rows(large, fixture, work)
    rows.append(noop_make_row(work))
    rows += tables_rows(work)
    rows += patch_rows(link_many(work, "many-merged", merged), link_many(work, "many", many))
    rows += probe_cost_rows(work, args.small) + guarded_loop_rows(work) + asm_goto_rows(work)
    rows += trace_rows(work, args.small) + datapath_rows(work, args.small) + [memory_row(work, args.small)]
    rows += aggregation_rows(work, args.small) + cpu_rows(work, args.small) + session_rows(work, args.small)
    rows += module_rows(work, args.small)
    rows += smp_rows(work, args.small) + qemu_rows(work, args.small) + qemu_aggregation_rows(work, args.small)
    rows += live_rows(work, args.small)
    header = print_rows(rows)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, " \
              f"{platform.platform()}"
    loads = f"{load:.1f} when it started measuring, {os.getloadavg()[0]:.1f} when it ended"
    md = ["# Benchmarks", "", f"Run by `make bench` on {machine}, in {time.perf_counter() - t0:.0f} s "
          f"(load average {loads}: the machine is shared).",
          "Best of several runs each; ratios are to the baseline measured in the same run.", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    Path(args.out).write_text("\n".join(md) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
