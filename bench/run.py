"""`make bench`: sdtgen at kernel scale and the real cost of a probe, each beside a baseline.

Builds its own inputs (cached under build/bench), prints a table and writes BENCHMARKS.md.
Times are best-of-N wall clock on this machine; every figure is reported as a ratio to a
baseline measured in the same run. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
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

from sdtgen.boot.machine import Machine  # noqa: E402
from sdtgen.boot.session import BootSession, Reporter  # noqa: E402
from sdtgen.codegen import gen_files  # noqa: E402
from sdtgen.image import Image  # noqa: E402
from sdtgen.table import read_tables  # noqa: E402


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
    gen_files(obj, work / "s.c", work / "t.S", "reloc")
    sdt_objs = toolchain.compile_table(build, work / "s.c", work / "t.S", work)
    return toolchain.final_link(build, obj, sdt_objs, work / "kernel.elf")


# -- build-time tools -----------------------------------------------------------------
def tools_rows(large: Path, fixture: Path, work: Path) -> list[Row]:
    rows = []
    floor, _ = best(20, lambda: run_measured([sys.executable, "-c", "pass"]))
    version, _ = best(20, lambda: run_measured([SDTGEN, "--version"]))
    rows.append(Row("sdtgen --version", f"{version:.4f} s", f"python -c pass: {floor:.4f} s", version / floor,
                    "<= 2x", version / floor <= 2))
    ours, _ = best(20, lambda: run_measured([SDTGEN, "scan", "--json", str(fixture)]))
    rows.append(Row(f"scan, fixture object ({fixture.stat().st_size >> 10} KiB)", f"{ours:.4f} s",
                    f"python -c pass: {floor:.4f} s", ours / floor, "<= 3x", ours / floor <= 3))
    for name, obj, n, target in (("large", large, 3, 0.1),):
        ours, mem = best(n, lambda obj=obj: run_measured([SDTGEN, "scan", "--json", str(obj)]))
        theirs, _ = best(n, lambda obj=obj: run_measured(f"readelf -rW {obj} | grep __dtrace_sdt_", shell=True))
        rows.append(Row(f"scan, {name} object ({obj.stat().st_size >> 10} KiB)", f"{ours:.3f} s",
                        f"readelf -rW | grep: {theirs:.3f} s", ours / theirs, f"<= {target}x", ours / theirs <= target))
        if name == "large":
            size = obj.stat().st_size
            rows.append(Row("scan peak memory, large object", f"{mem / 2**20:.0f} MiB",
                            f"object size: {size / 2**20:.0f} MiB", mem / size, "<= 3x", mem / size <= 3))
            scan_time = ours
    copy = work / "large-copy.o"

    def gen_once() -> tuple[float, int]:
        shutil.copy(large, copy)
        return run_measured([SDTGEN, "gen", str(copy), "--stubs", str(work / "s.c"), "--table", str(work / "t.S")])

    gen_time, _ = best(3, gen_once)
    rows.append(Row("gen, large object", f"{gen_time:.3f} s", f"scan: {scan_time:.3f} s", gen_time / scan_time,
                    "<= 2x", gen_time / scan_time <= 2))
    linked = work / "large-linked.o"
    shutil.copy(large, linked)
    image = link_image(linked, work, toolchain.Build(cflags=synth.CFLAGS))
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
        obj = tables.VMLINUX_O
        ours, _ = best(10, lambda: run_measured([SDTGEN, "scan", "--prefix", "__fentry__", str(obj)]))
        theirs, _ = best(10, lambda: run_measured(f"readelf -rW {obj} | grep -c __fentry__", shell=True))
        rows.append(Row(f"scan --prefix __fentry__, Linux vmlinux.o ({obj.stat().st_size >> 10} KiB, make realworld)",
                        f"{ours:.3f} s", f"readelf -rW | grep -c: {theirs:.3f} s", ours / theirs, "<= 1.0x",
                        ours / theirs <= 1.0))
        rows.append(floor_row(theirs, "readelf -rW | grep -c"))
    else:
        print("bench: no build/realworld vmlinux.o (run `make realworld`): the __fentry__ row is left out",
              file=sys.stderr)
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
        rows.append(Row(f"probes --kind stapsdt, {what} ({path.stat().st_size >> 10} KiB)", f"{ours:.3f} s",
                        f"readelf -n: {theirs:.4f} s", ours / theirs, "<= 1.0x", ours / theirs <= 1.0))
        rows.append(floor_row(theirs, "readelf -n"))
    return rows


def path_name(path: Path | None) -> str:
    return f"{path.parent.name}/{path.name}" if path else ""


def floor_row(theirs: float, baseline: str) -> Row:
    """The interpreter's start-up against a native tool's whole run: the floor under a ratio target."""
    floor, _ = best(10, lambda: run_measured([sys.executable, "-c", "pass"]))
    return Row("  of which the interpreter's start-up", f"python -c pass: {floor:.4f} s",
               f"{baseline}: {theirs:.4f} s", floor / theirs, "(the floor)", None)


# -- the emulated boot -------------------------------------------------------------------
def patch_rows(image: Path) -> list[Row]:
    def load() -> Machine:
        with Image(str(image)) as img:
            return Machine(img.elf, img.arch)

    load_time = min(timed(load)[0] for _ in range(3))
    best_patch, count = None, 0
    for _ in range(3):
        with Image(str(image)) as img:
            m = Machine(img.elf, img.arch)
            t, result = timed(lambda m=m, img=img: patch_sites(m, read_tables(m.read, img.bounds, img.arch.bits)))
            count = len(result.sites)
            best_patch = t if best_patch is None else min(best_patch, t)
    rate = count / best_patch
    return [Row(f"boot: patch {count} sites (verify, NOP, flush)", f"{rate:,.0f} sites/s",
                f"loading the image: {load_time:.3f} s", best_patch / load_time, ">= 200,000 sites/s", rate >= 200_000)]


def fixture_build(work: Path, variant: str, fixture: str = "kernel") -> Path:
    """A fixture kernel, probes compiled out / as calls / classic, built with sdtgen's steps."""
    sources = sorted((ROOT / "fixtures" / fixture).glob("*.c"))
    define = {"out": ["-DSDT_COMPILED_OUT"], "classic": ["-DSDT_CLASSIC"], "calls": []}[variant]
    extra = (ROOT / "bench" / "classic.c",) if variant == "classic" else ()
    b = toolchain.Build(cflags=(*toolchain.kernel_cflags("x86_64"), *define), extra_sources=extra)
    d = work / (f"fixture-{variant}" if fixture == "kernel" else f"{fixture}-{variant}")
    d.mkdir(parents=True, exist_ok=True)
    objs = toolchain.compile_sources(b, sources, d)
    partial = toolchain.partial_link(b, objs, d / "kernel.o")
    return link_image(partial, d, b)


def run_loop(image: Path, patch: bool, arm: bool, n: int, count: int = 0, mode: str = "trap") -> tuple[float, int]:
    """Emulated seconds (best of 5) of sched_run(n); guest instructions of sched_run(count) when asked.

    Counting hooks every instruction, so it runs only here, in its own call, never timed."""
    s = BootSession(str(image), Reporter(out=io.StringIO()), patch=patch, arm=mode, buffer_size=DATAPATH_BUFFER)
    try:
        if arm:
            s.enable("hk:sched:run:tick")
        func = s.image.symbols["sched_run"].value

        def once() -> float:
            s.runtime.drain()  # branch mode: each run starts with an empty ring (the drain is not timed)
            return timed(lambda: s.machine.call(func, [n]))[0]

        elapsed = min(once() for _ in range(5))
        s.runtime.drain()
        insns = 0
        if count:
            n = count
            from unicorn import UC_HOOK_CODE

            counter = [0]
            h = s.machine.uc.hook_add(UC_HOOK_CODE, lambda uc, a, size, u: counter.__setitem__(0, counter[0] + 1))
            s.machine.uc.ctl_flush_tb()  # code translated before the hook would not count
            s.machine.call(func, [n])
            s.machine.uc.hook_del(h)
            insns = counter[0]
        return elapsed, insns
    finally:
        s.close()


def count_instructions(image: Path, func: str, n: int, arm: str = "") -> int:
    """Guest instructions of ``func(2n)`` less those of ``func(n)``: n iterations of its loop, without the
    call's own set-up, after the boot's patching (and arming ``arm``)."""
    from unicorn import UC_HOOK_CODE

    s = BootSession(str(image), Reporter(out=io.StringIO()), patch=True)
    try:
        if arm:
            s.enable(arm)
        counter = [0]
        h = s.machine.uc.hook_add(UC_HOOK_CODE, lambda uc, a, size, u: counter.__setitem__(0, counter[0] + 1))
        s.machine.uc.ctl_flush_tb()
        s.machine.call(s.image.symbols[func].value, [n])
        once = counter[0]
        s.machine.call(s.image.symbols[func].value, [2 * n])
        s.machine.uc.hook_del(h)
        return counter[0] - 2 * once
    finally:
        s.close()


def guarded_loop_rows(work: Path) -> list[Row]:
    """fixtures/freebsd's hot loop: its probe's argument is a string hash, asked for through
    SDT_PROBE_ENABLED(); guest instructions per iteration with the probe disabled."""
    n = 20_000
    out, calls, classic = (fixture_build(work, v, "freebsd") for v in ("out", "calls", "classic"))
    per = lambda i: f"{i / n:.2f} insns/iteration"  # noqa: E731
    i_out = count_instructions(out, "hot_loop", n)
    i_guarded = count_instructions(calls, "hot_loop", n)
    i_unguarded = count_instructions(calls, "hot_loop_unguarded", n)
    i_classic = count_instructions(classic, "hot_loop", n)
    i_other = count_instructions(calls, "hot_loop", n, "ip:::send")
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


def probe_cost_rows(work: Path) -> list[Row]:
    n, n_count = 5_000_000, 200_000
    out, calls, classic = (fixture_build(work, v) for v in ("out", "calls", "classic"))
    t_out, i_out = run_loop(out, True, False, n, n_count)
    t_stub, i_stub = run_loop(calls, False, False, n, n_count)
    t_nop, i_nop = run_loop(calls, True, False, n, n_count)
    t_classic, i_classic = run_loop(classic, True, False, n, n_count)
    per = lambda i: f"{i / n_count:.2f} insns/iteration"  # noqa: E731
    rows = [
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
    armed_n = 20_000
    t_armed, _ = run_loop(calls, True, True, armed_n)
    t_disarmed, _ = run_loop(calls, True, False, armed_n)
    per_fire = (t_armed - t_disarmed) / armed_n * 1e6
    rows.append(Row("armed probe: host time per firing", f"{per_fire:.1f} us",
                    f"all disarmed: {t_disarmed * 1e3:.2f} ms for {armed_n} iterations",
                    t_armed / t_disarmed, "(ratio armed / disarmed)", None))
    return rows


DATAPATH_BUFFER = 4 << 20  # 65,536 slots: the loops below never wrap a ring


def datapath_rows(work: Path) -> list[Row]:
    """The data path: trap against branch arming, the recorder's guest instructions, the host's drain."""
    calls = fixture_build(work, "calls")
    n, n_count = 20_000, 20_000
    t_disarmed, i_disarmed = run_loop(calls, True, False, n, n_count)
    t_trap, _ = run_loop(calls, True, True, n, 0, "trap")
    t_branch, i_branch = run_loop(calls, True, True, n, n_count, "branch")
    per_trap = (t_trap - t_disarmed) / n * 1e6
    per_branch = max(t_branch - t_disarmed, 1e-9) / n * 1e6
    per_event = (i_branch - i_disarmed) / n_count
    drained, t_drain = drain_rate(calls, 60_000)
    return [
        Row("armed probe, branch: host time per firing", f"{per_branch:.3f} us", f"trap: {per_trap:.1f} us",
            per_trap / per_branch, ">= 100x cheaper", per_trap / per_branch >= 100),
        Row("  guest instructions per recorded event (2 arguments)", f"{per_event:.1f} insns",
            f"disarmed: {i_disarmed / n_count:.2f} insns/iteration", per_event, "<= 50", per_event <= 50),
        Row("  host drain and decode", f"{drained / t_drain:,.0f} events/s",
            f"{drained} events: {t_drain * 1e3:.1f} ms",
            drained / t_drain / 500_000, ">= 500,000 events/s", drained / t_drain >= 500_000),
    ]


def drain_rate(image: Path, n: int) -> tuple[int, float]:
    """Events and seconds of draining and decoding one ring the guest filled with n two-argument records."""
    s = BootSession(str(image), Reporter(out=io.StringIO()), arm="branch", buffer_size=DATAPATH_BUFFER)
    try:
        s.enable("hk:sched:run:tick")
        func = s.image.symbols["sched_run"].value
        s.machine.call(func, [n])
        elapsed, events = timed(s.runtime.drain)
        return len(events), elapsed
    finally:
        s.close()


# -- several CPUs ------------------------------------------------------------------------
def unicorn_firings_per_second(image: Path, cpus: int, arm: str, n: int) -> float:
    """sched_run(n) on every emulated CPU with its tick probe armed: firings a second, best of 3."""
    s = BootSession(str(image), Reporter(out=io.StringIO()), cpus=cpus, arm=arm)
    try:
        s.enable("hk:sched:run:tick")
        return cpus * n / min(timed(lambda: s.run("sched_run", [n]))[0] for _ in range(3))
    finally:
        s.close()


def smp_rows(work: Path) -> list[Row]:
    """Firings a second on 1, 2 and 4 CPUs; the patch protocol's time per toggle; what --cpus 1 costs."""
    from sdtgen.boot.smp import Smp

    image = fixture_build(work, "calls")
    n = 5_000
    rows = []
    for arm in ("trap", "branch"):
        rates = {cpus: unicorn_firings_per_second(image, cpus, arm, n) for cpus in (1, 2, 4)}
        rows += [Row(f"--cpus {c} --arm {arm}: firings a second (sched_run({n}) on every CPU)",
                     f"{rates[c]:,.0f} firings/s", f"--cpus 1: {rates[1]:,.0f} firings/s", rates[c] / rates[1], "",
                     None) for c in (2, 4)]
    toggle = {}
    for cpus in (1, 4):  # a toggle: the call written over the NOP and back, by the breakpoint protocol
        s = BootSession(str(image), Reporter(out=io.StringIO()), cpus=cpus)
        try:
            smp = s.smp or Smp(s.machine, 1)
            s.run("sched_run", [10])  # every CPU has the code translated: every flush has work to do
            site = next(x for x in s.patch.sites if x.length == 5 and x.form == "call")
            k = 2_000

            def toggles(smp=smp, site=site, k=k) -> None:
                for _ in range(k):
                    smp.poke.write(site.addr, site.original)
                    smp.poke.write(site.addr, site.disabled)

            toggle[cpus] = min(timed(toggles)[0] for _ in range(3)) / (2 * k)
        finally:
            s.close()
    rows.append(Row("patch protocol (x86 breakpoint, 5 bytes): time per toggle, 4 CPUs",
                    f"{toggle[4] * 1e6:.1f} us", f"1 CPU: {toggle[1] * 1e6:.1f} us", toggle[4] / toggle[1], "", None))
    running = {}
    for cpus in (1, 4):  # the torture test: toggles while the CPUs call sched_run, quanta between the stores
        from sdtgen.torture import torture

        k = 5_000
        t, summary = timed(lambda cpus=cpus, k=k: torture(str(image), "sched_run", [20], cpus=cpus, toggles=k,
                                                           protocol="safe", seed=1, timeout=600))
        running[cpus] = (t / k, summary)
    s1, s4 = running[1][1], running[4][1]
    rows.append(Row(f"torture, safe protocol: {s4.toggles} toggles under 4 CPUs ({s4.calls} calls, {s4.torn} torn, "
                    f"{s4.faults} faults)", f"{running[4][0] * 1e6:.0f} us/toggle",
                    f"under 1 CPU: {running[1][0] * 1e6:.0f} us/toggle ({s1.torn} torn, {s1.faults} faults)",
                    running[4][0] / running[1][0], "0 torn, 0 faults", s4.passed and s1.passed))
    m = 5_000_000
    one = run_loop(image, True, False, m)[0]
    s = BootSession(str(image), Reporter(out=io.StringIO()), cpus=4)
    try:  # the same call on one CPU of a 4-CPU machine: its memory is host buffers shared by four engines
        func = s.image.symbols["sched_run"].value
        shared = min(timed(lambda: s.machine.call(func, [m]))[0] for _ in range(5))
    finally:
        s.close()
    rows.append(Row(f"--cpus 1: sched_run({m:,}), disarmed", f"{one * 1e3:.1f} ms",
                    f"one CPU of --cpus 4: {shared * 1e3:.1f} ms", one / shared, "<= 1.05x", one / shared <= 1.05))
    return rows


# -- QEMU --------------------------------------------------------------------------------
QEMU_TOGGLES = 1_000


def qemu_rows(work: Path) -> list[Row]:
    """The fixture kernel on QEMU (multi-threaded TCG): firings a second on 1, 2 and 4 vCPUs beside Unicorn's,
    the time to the first firing, and the torture test of both patch protocols."""
    import qemu

    image, emulated = qemu.build(work, "x86_64"), fixture_build(work, "calls")
    n = 20_000
    rows = []
    for arm in ("trap", "branch"):
        unicorn = unicorn_firings_per_second(emulated, 1, arm, 5_000)
        for cpus in (1, 2, 4):
            guest, host = qemu.firings_per_second(image, cpus, arm, n)
            what = f"QEMU x86-64, {cpus} vCPU{'s' if cpus > 1 else ''}, --arm {arm}: firings a second"
            rows.append(Row(f"{what} (sched_run({n:,}) on each, by the guest's clock)", f"{guest:,.0f} firings/s",
                            f"Unicorn, --cpus 1: {unicorn:,.0f} firings/s", guest / unicorn, "", None))
            rows.append(Row(f"{what}, end to end (sent over the serial line, decoded on the host)",
                            f"{host:,.0f} firings/s", f"in the guest: {guest:,.0f} firings/s", host / guest, "", None))
    hello, first = qemu.first_firing(image)
    rows.append(Row("QEMU x86-64: from starting QEMU to the first firing on the host", f"{first * 1e3:.0f} ms",
                    f"to the kernel's hello: {hello * 1e3:.0f} ms", first / hello, "", None))
    for arch in ("riscv64", "x86_64"):
        for naive in (False, True):
            built = qemu.build(work, arch, naive)
            for arm in ("branch", "trap"):
                t = qemu.torture(built, arm, QEMU_TOGGLES)
                bad = t.torn + t.faults + t.wrong
                rows.append(Row(f"QEMU {arch} torture, {t.protocol} protocol, --arm {arm}: {t.toggles:,} toggles "
                                f"under 4 vCPUs", f"{t.torn:,} torn, {t.faults:,} faulted, {t.wrong:,} wrong",
                                f"{t.calls:,} calls", bad / max(t.calls, 1),
                                "0 torn, 0 faulted" if not naive else "(measured)", bad == 0 if not naive else None))
    return rows


# -- trace writers -----------------------------------------------------------------------
def trace_rows(work: Path) -> list[Row]:
    """Events a second each trace writer turns into its file, beside pickling the same events."""
    import pickle

    from sdtgen.trace import TraceEvent, TraceMeta, TraceProbe, write_trace

    n = 200_000
    probes = (TraceProbe(0, "hk", "vfs", "lookup", "component", ("const char *", "int")),
              TraceProbe(1, "hk", "sched", "run", "tick", ("int", "long")),
              TraceProbe(2, "hk", "sched", "switch", "six", ("int", "int", "int", "int", "long", "unsigned long")))
    args = {0: lambda i: ("etc", i), 1: lambda i: (i, -i), 2: lambda i: (i, 1, 2, 3, -i, i << 20)}
    events = [TraceEvent(i % 3, i % 4, 1000 + i // 4 * 10, args[i % 3](i)) for i in range(n)]
    meta = TraceMeta("x86_64", "tsc", 1_000_000_000, 4, probes, {1: 3})
    base = min(timed(lambda: pickle.dumps(events))[0] for _ in range(3))
    rows = []
    for fmt, name, target in (("ctf", "trace", 500_000), ("perfetto", "trace.pftrace", None),
                              ("chrome", "trace.json", None)):
        t = min(timed(lambda fmt=fmt, name=name: write_trace(work / name, fmt, meta, events))[0] for _ in range(3))
        rows.append(Row(f"trace writer: {fmt}, {n:,} events (1/3 with a string)", f"{n / t:,.0f} events/s",
                        f"pickle.dumps: {n / base:,.0f} events/s", t / base,
                        f">= {target:,} events/s" if target else "", n / t >= target if target else None))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    ap.add_argument("--work", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--small", action="store_true", help="a small large object, to try the harness quickly")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    include = str(ROOT / "sdtgen" / "include")
    t0 = time.perf_counter()
    # Every run of sdtgen measured reads compiled modules, as an installed sdtgen does, also where
    # PYTHONDONTWRITEBYTECODE keeps the first run from writing them.
    import compileall

    compileall.compile_dir(str(ROOT / "sdtgen"), quiet=1)
    print("building inputs (cached in build/bench) ...", file=sys.stderr)
    units = 50 if args.small else 1000
    large = synth.build(work, units, 40, 15, 2, include)
    many = synth.build(work, 50 if args.small else 500, 100, 1, 1, include)
    fixture = fixture_build(work, "calls").parent / "kernel.o"
    print("measuring ...", file=sys.stderr)
    # The tools first, while this process is small: a child's peak RSS counts what it inherited at fork.
    rows = tools_rows(large, fixture, work)
    rows.append(noop_make_row(work))
    rows += tables_rows(work)
    many_image = work / "many"
    many_image.mkdir(exist_ok=True)
    many_copy = many_image / "kernel.o"
    shutil.copy(many, many_copy)
    many_elf = link_image(many_copy, many_image, toolchain.Build(cflags=synth.CFLAGS))
    rows += patch_rows(many_elf) + probe_cost_rows(work) + guarded_loop_rows(work) + trace_rows(work)
    rows += datapath_rows(work) + smp_rows(work) + qemu_rows(work)
    header = ["measure", "sdtgen", "baseline (same run)", "ratio", "target", "met"]
    table = [header, *(r.cells() for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table))
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, " \
              f"{platform.platform()}"
    md = ["# Benchmarks", "", f"Run by `make bench` on {machine}, in {time.perf_counter() - t0:.0f} s.",
          "Best of several runs each; ratios are to the baseline measured in the same run.", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    Path(args.out).write_text("\n".join(md) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
