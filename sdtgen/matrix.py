"""The link-mode matrix: build a kernel in every toolchain and link mode, check and boot both tables.

Each row is a link mode (flags, scripts, layouts), each column a toolchain
(compiler, partial linker, final linker). A cell builds the kernel once,
generates both tables (reloc and offset) from the same partial link, links
both, runs `check` on each and boots each in the emulator, comparing its
firings and return values with a reference build of the same sources (gcc,
GNU ld for both links, no special flags). Cells run in worker processes,
grouped by (compiler, row) so each group compiles its sources once.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sdtgen import arch as registry
from sdtgen.errors import SdtError
from sdtgen.toolchain import (
    COMPILER_NAMES,
    LINKER_NAMES,
    PARTIAL_NAMES,
    Build,
    BuildError,
    compile_sources,
    compile_table,
    final_link,
    kernel_cflags,
    linker,
    missing_package,
    partial_link,
)

MODES = ("reloc", "offset")
FIXTURE_CALLS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("kmain", (1,)), ("kmain", (2,)), ("sched_run", (0,)), ("kmem_alloc", (1 << 20,)), ("proc_exec:int", (7,)),
)


@dataclass(frozen=True)
class Row:
    key: str
    title: str
    add: tuple[str, ...] = ()  # compiler flags added to the kernel's
    drop: tuple[str, ...] = ()  # kernel flags this mode replaces
    merge_text: bool = True  # partial link with sdtgen's script; False: plain `-r`, sections kept
    partial_flags: tuple[str, ...] = ()
    final_flags: tuple[str, ...] = ()
    final_script: str = "final"
    stubs_first: bool = False
    extra: tuple[str, ...] = ()  # sources from fixtures/linkmodes
    calls: tuple[tuple[str, tuple[int, ...]], ...] = ()  # run after the fixture's own calls
    compilers: tuple[str, ...] = ("gcc", "clang")
    partials: tuple[str, ...] = ("bfd", "gold", "lld", "gcc-r")
    finals: tuple[str, ...] = ("bfd", "gold", "lld")
    arches: tuple[str, ...] = field(default_factory=registry.names)  # by default every one the registry has

    def cflags(self, arch: str) -> tuple[str, ...]:
        return tuple(f for f in kernel_cflags(arch) if f not in self.drop) + self.add


FS = ("-ffunction-sections",)
ROWS: tuple[Row, ...] = (
    Row("plain", "plain (kernel flags, one .text)"),
    Row("function-sections", "-ffunction-sections", add=FS, merge_text=False),
    Row("fs-gc", "-ffunction-sections, --gc-sections", add=FS, merge_text=False, final_flags=("--gc-sections",)),
    Row("gc", "--gc-sections alone", final_flags=("--gc-sections",)),
    Row("sort-name", "-ffunction-sections, --sort-section=name", add=FS, merge_text=False,
        final_flags=("--sort-section=name",), finals=("bfd", "gold")),
    Row("icf", "-ffunction-sections, --icf=all", add=FS, merge_text=False, final_flags=("--icf=all",),
        extra=("icf_a.c", "icf_b.c"), calls=(("icf_a", (4,)), ("icf_b", (5,))), finals=("gold", "lld")),
    Row("lto-gcc", "gcc -flto, gcc -r -flinker-output=nolto-rel", add=("-flto",), compilers=("gcc",),
        partials=("gcc-r",), partial_flags=("-flinker-output=nolto-rel",)),
    Row("lto-gcc-ld-r", "gcc -flto, plain ld -r (compiler IR only)", add=("-flto",), compilers=("gcc",),
        partials=("bfd", "gold")),
    Row("lto-fat", "gcc -flto -ffat-lto-objects, ld -r", add=("-flto", "-ffat-lto-objects"), compilers=("gcc",),
        partials=("bfd", "gold", "lld")),
    Row("lto-clang", "clang -flto, ld.lld -r", add=("-flto",), compilers=("clang",), partials=("lld",)),
    Row("lto-thin", "clang -flto=thin, ld.lld -r", add=("-flto=thin",), compilers=("clang",), partials=("lld",)),
    Row("pie", "-fPIE, -pie", drop=("-mcmodel=kernel", "-fno-pic"), add=("-fPIE",), final_flags=("-pie",)),
    Row("pic-noplt", "-fPIC -fno-plt (GOT calls)", drop=("-mcmodel=kernel", "-fno-pic"), add=("-fPIC", "-fno-plt")),
    Row("large", "-mcmodel=large", drop=("-mcmodel=kernel",), add=("-mcmodel=large",),
        arches=("x86_64", "aarch64")),
    Row("cf-protection", "-fcf-protection (endbr64)", add=("-fcf-protection",), arches=("x86_64", "i386")),
    Row("fentry", "-pg -mfentry", add=("-pg", "-mfentry"), extra=("fentry.c",), arches=("x86_64", "i386")),
    Row("os", "-Os", add=("-Os",)),
    Row("stubs-first", "stubs linked before the kernel object", stubs_first=True),
    Row("linux-layout", "Linux-like final script (.head.text, .text.unlikely, .init.text)", add=FS,
        merge_text=False, final_script="linux-like", extra=("sections.c",), calls=(("khead", (3,)),),
        arches=("x86_64",)),
    Row("no-relax", "-mno-relax, --no-relax (RISC-V without linker relaxation)", add=("-mno-relax",),
        final_flags=("--no-relax",), arches=("riscv64",)),
)


@dataclass(frozen=True)
class Column:
    compiler: str
    partial: str
    final: str
    arch: str = "x86_64"

    @property
    def label(self) -> str:
        return f"{self.compiler} {self.partial}/{self.final}"


def columns(compilers: tuple[str, ...] = COMPILER_NAMES, arches: tuple[str, ...] = ("x86_64",)) -> list[Column]:
    out = []
    for arch in arches:
        for cc in compilers:
            for p in PARTIAL_NAMES:
                if p == "gcc-r" and cc != "gcc":
                    continue
                out.extend(Column(cc, p, f, arch) for f in LINKER_NAMES)
    return out


@dataclass
class ModeResult:
    mode: str
    status: str  # ok, broken, refused
    sites: int = 0
    stable: int = 0
    moved: int = 0
    missing: int = 0
    folded: int = 0
    extra: int = 0
    boot: bool | None = None  # the boot reproduced the reference firings and results
    note: str = ""


@dataclass
class Cell:
    row: str
    column: str
    state: str  # done, skipped, n/a, error
    arch: str = "x86_64"
    note: str = ""
    results: dict[str, ModeResult] = field(default_factory=dict)

    def to_json(self) -> dict:
        d = asdict(self)
        d["results"] = {k: asdict(v) for k, v in self.results.items()}
        return d


def applies(row: Row, col: Column) -> bool:
    return (col.arch in row.arches and col.compiler in row.compilers and col.partial in row.partials
            and col.final in row.finals and linker(col.partial, col.arch, partial=True) is not None
            and linker(col.final, col.arch) is not None)


# -- one cell -------------------------------------------------------------------------
def boot_trace(image: Path, calls, arm: str = "trap") -> list:
    """Firings (pointers named by the object they point at) and results of the calls, all probes armed."""
    from sdtgen.boot.session import BootSession, Reporter

    buf = io.StringIO()
    session = BootSession(str(image), Reporter(as_json=True, out=buf), arm=arm)
    try:
        types = {p.spec: p.args for p in session.runtime.probes()}
        try:
            session.enable(":::")
        except SdtError as e:  # no site verified: nothing can fire, which the comparison shows
            buf.write(json.dumps({"event": "error", "text": str(e)}) + "\n")
        for fn, args in calls:
            try:
                session.run(fn if ":" in fn else f"{fn}:long", list(args))
            except SdtError as e:
                buf.write(json.dumps({"event": "error", "text": str(e)}) + "\n")
        trace = []
        for line in buf.getvalue().splitlines():
            ev = json.loads(line)
            if ev["event"] == "fire":
                trace.append(("fire", ev["probe"], [_name_pointer(session, t, v)
                                                    for t, v in zip(types[ev["probe"]], ev["args"], strict=True)]))
            elif ev["event"] in ("return", "fault", "error"):
                trace.append((ev["event"], ev.get("symbol"), ev.get("value")))
        return trace
    finally:
        session.close()


def _name_pointer(session, ctype: str, value):
    if "*" in ctype and isinstance(value, int) and "char" not in ctype:
        return session.image.symbolize(value, data=True)
    return value


def _judge_mode(b: Build, partial: Path, mode: str, out: Path, reference: list | None, calls) -> ModeResult:
    from sdtgen.check import check
    from sdtgen.codegen import gen_files
    from sdtgen.image import Image
    from sdtgen.scan import scan

    obj = out / f"kernel-{mode}.o"
    shutil.copy(partial, obj)
    stubs, table = out / f"sdt_stubs-{mode}.c", out / f"sdt_table-{mode}.S"
    try:
        result = gen_files(obj, stubs, table, mode)
    except SdtError as e:
        where = f"{e.place}: " if e.place else ""  # the file is the cell's temporary copy: left out
        return ModeResult(mode, "refused", note=f"{where}{e.what}" + (f"; {e.fix}" if e.fix else ""))
    mdir = out / mode
    mdir.mkdir(exist_ok=True)
    sdt_objs = compile_table(b, stubs, table, mdir)
    image = final_link(b, obj, sdt_objs, mdir / "kernel.elf")
    with Image(str(image)) as img:
        report = check(scan(str(obj)), img, find_extra=True)
    r = ModeResult(mode, "ok" if report.ok else "broken", len(result.sites), report.count("stable"),
                   report.count("moved"), report.count("missing"), report.count("folded"), len(report.extra))
    if not report.ok:
        r.note = report.summary()
    if reference is not None:
        r.boot = boot_trace(image, calls) == reference
    return r


def run_group(row: Row, cols: list[Column], sources: list[Path], extra_dir: Path, work: Path,
              reference: list | None) -> list[Cell]:
    """All the cells of one row for one compiler: compile once, then every linker pairing."""
    cells = []
    arch = cols[0].arch
    base = Build(compiler=cols[0].compiler, arch=arch, cflags=row.cflags(arch), merge_text=row.merge_text,
                 partial_flags=row.partial_flags, final_flags=row.final_flags, final_script=row.final_script,
                 stubs_first=row.stubs_first,
                 extra_sources=tuple(extra_dir / x for x in row.extra))
    objdir = work / "obj"
    objdir.mkdir(parents=True, exist_ok=True)
    try:
        objs = compile_sources(base, sources, objdir)
    except BuildError as e:
        return [Cell(row.key, c.label, "error", arch, f"{e.step}: {_last_line(e.output)}") for c in cols]
    calls = FIXTURE_CALLS + row.calls
    for col in cols:
        b = replace(base, partial=col.partial, final=col.final)
        out = work / f"{col.partial}-{col.final}"
        out.mkdir(parents=True, exist_ok=True)
        try:
            partial = partial_link(b, objs, out / "kernel.o")
            results = {m: _judge_mode(b, partial, m, out, reference, calls) for m in MODES}
            cells.append(Cell(row.key, col.label, "done", arch, results=results))
        except BuildError as e:
            cells.append(Cell(row.key, col.label, "error", arch, f"{e.step}: {_last_line(e.output)}"))
        except SdtError as e:
            cells.append(Cell(row.key, col.label, "error", arch, str(e)))
    return cells


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "failed"


def reference_trace(row: Row, sources: list[Path], extra_dir: Path, work: Path, arch: str = "x86_64") -> list:
    """gcc and GNU ld, kernel flags, sdtgen's scripts: what every cell of the row must reproduce."""
    b = Build(arch=arch, cflags=kernel_cflags(arch), extra_sources=tuple(extra_dir / x for x in row.extra))
    work.mkdir(parents=True, exist_ok=True)
    objs = compile_sources(b, sources, work)
    partial = partial_link(b, objs, work / "kernel.o")
    obj = work / "kernel-ref.o"
    shutil.copy(partial, obj)
    from sdtgen.codegen import gen_files

    gen_files(obj, work / "s.c", work / "t.S", "reloc")
    sdt_objs = compile_table(b, work / "s.c", work / "t.S", work)
    image = final_link(b, obj, sdt_objs, work / "ref.elf")
    return boot_trace(image, FIXTURE_CALLS + row.calls)


def _group_job(row: Row, cols: list[Column], sources: list[Path], extra_dir: Path, work: Path) -> list[Cell]:
    try:
        reference = reference_trace(row, sources, extra_dir, work / "reference", cols[0].arch)
    except (BuildError, SdtError):
        reference = None
    return run_group(row, cols, sources, extra_dir, work, reference)


# -- the whole matrix -------------------------------------------------------------------
def run_matrix(sources: list[Path], extra_dir: Path, rows: list[Row], cols: list[Column], jobs: int = 2,
               progress: bool = False, keep: Path | None = None) -> list[Cell]:
    cells: list[Cell] = []
    groups: dict[tuple[str, str], list[Column]] = {}
    for row in rows:
        for col in cols:
            if not applies(row, col):
                cells.append(Cell(row.key, col.label, "n/a", col.arch))
                continue
            b = Build(compiler=col.compiler, partial=col.partial, final=col.final, arch=col.arch)
            pkg = missing_package(*b.tools())
            if pkg:
                cells.append(Cell(row.key, col.label, "skipped", col.arch, f"apt-get install {pkg}"))
                continue
            groups.setdefault((col.arch, row.key, col.compiler), []).append(col)
    by_key = {r.key: r for r in rows}
    total = sum(len(c) for c in groups.values())
    done = 0
    root = Path(tempfile.mkdtemp(prefix="sdtgen-matrix-")) if keep is None else keep
    try:
        with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(_group_job, by_key[rk], cs, sources, extra_dir, root / arch / rk / cc): (rk, cc)
                       for (arch, rk, cc), cs in groups.items()}
            for fut in as_completed(futures):
                group = fut.result()
                cells.extend(group)
                done += len(group)
                if progress:
                    _progress(done, total, futures[fut])
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if progress:
        sys.stderr.write("\n")
    order = {(c.arch, r.key, c.label): i for i, (r, c) in enumerate((r, c) for c in cols for r in rows)}
    return sorted(cells, key=lambda c: order[(c.arch, c.row, c.column)])


def _progress(done: int, total: int, what: tuple[str, str]) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} cells  {what[1]} {what[0]:<20}")
    sys.stderr.flush()


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))
