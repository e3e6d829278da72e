"""The link-mode matrix: build a kernel in every toolchain and link mode, check and boot both tables.

Each row is a link mode (flags, scripts, layouts), each column a toolchain
(compiler, partial linker, final linker). A cell builds the kernel once,
generates both tables (reloc and offset) from the same partial link, links
both, runs `sdtgen check` on each and boots each that checks with `sdtgen boot
--json`, every probe armed, comparing its firings and return values with the
kernel's own C run natively (tools/native.py). A comparison in which nothing
fired compared nothing, and is no pass. Cells run in worker processes, grouped
by (architecture, row, compiler) so each group compiles its sources once.

A tool of the sdtgen checkout, not of the installed package: it drives the
sdtgen it finds (`$SDTGEN`, or the one on PATH) and imports nothing of it.
Without --sources it builds the fixture kernel (fixtures/kernel, with
fixtures/linkmodes' extra sources for some rows); with --sources DIR it
builds any kernel's C files, calls the functions --call names, and reads
nothing from fixtures/.

    tools/matrix.py [--arch ARCH]... [--sources DIR --call 'SYMBOL[:TYPE] [ARG]...'...]
                    [--cflags=FLAGS] [--mode GLOB]... [--compiler gcc|clang]...
                    [--toolchain GLOB]... [--jobs N] [--output FILE] [--json]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import native
from probe_source import called_probes
from toolchain import (
    COMPILER_NAMES,
    LINKER_NAMES,
    PARTIAL_NAMES,
    Build,
    BuildError,
    SdtgenError,
    arch_names,
    compile_sources,
    compile_table,
    final_link,
    gen,
    include_dir,
    kernel_cflags,
    linker,
    missing_package,
    partial_link,
    registry,
    sdtgen_command,
)

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
MODES = ("reloc", "offset")
FIXTURE_CALLS = ("kmain 1", "kmain 2", "sched_run 0", "kmem_alloc 1048576", "proc_exec:int 7")


@dataclass(frozen=True)
class Row:
    key: str
    title: str
    add: tuple[str, ...] = ()  # compiler flags added to the kernel's
    drop: tuple[str, ...] = ()  # kernel flags this mode replaces
    merge_text: bool = True  # partial link with sdtgen's script; False: plain `-r`, sections kept
    partial_flags: tuple[str, ...] = ()
    final_flags: tuple[str, ...] = ()
    final_script: str | Path = "final"
    stubs_first: bool = False
    extra: tuple[str, ...] = ()  # the fixture's extra sources for this row, from fixtures/linkmodes
    calls: tuple[str, ...] = ()  # run after the kernel's own calls, with the extra sources
    compilers: tuple[str, ...] = ("gcc", "clang")
    partials: tuple[str, ...] = ("bfd", "gold", "lld", "gcc-r")
    finals: tuple[str, ...] = ("bfd", "gold", "lld")
    arches: tuple[str, ...] | None = None  # None: every one the registry has

    def cflags(self, arch: str) -> tuple[str, ...]:
        return tuple(f for f in kernel_cflags(arch) if f not in self.drop) + self.add

    def for_arch(self, arch: str) -> bool:
        return self.arches is None or arch in self.arches


FS = ("-ffunction-sections",)
ROWS: tuple[Row, ...] = (
    Row("plain", "plain (kernel flags, one .text)"),
    Row("function-sections", "-ffunction-sections", add=FS, merge_text=False),
    Row("fs-gc", "-ffunction-sections, --gc-sections", add=FS, merge_text=False, final_flags=("--gc-sections",)),
    Row("gc", "--gc-sections alone", final_flags=("--gc-sections",)),
    Row("sort-name", "-ffunction-sections, --sort-section=name", add=FS, merge_text=False,
        final_flags=("--sort-section=name",), finals=("bfd", "gold")),
    Row("icf", "-ffunction-sections, --icf=all", add=FS, merge_text=False, final_flags=("--icf=all",),
        extra=("icf_a.c", "icf_b.c"), calls=("icf_a 4", "icf_b 5"), finals=("gold", "lld")),
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
        merge_text=False, final_script=HERE / "linux-like.ld", extra=("sections.c",), calls=("khead 3",),
        arches=("x86_64",)),
    Row("no-relax", "-mno-relax, --no-relax (RISC-V without linker relaxation)", add=("-mno-relax",),
        final_flags=("--no-relax",), arches=("riscv64",)),
)


@dataclass(frozen=True)
class Kernel:
    """What the matrix builds: C sources, the calls each boot makes (`SYMBOL[:TYPE] ARG...`, as
    `sdtgen boot --run` reads them), and the fixture's directory of extra sources (None for any
    other kernel: the rows then build its sources alone)."""

    sources: tuple[Path, ...]
    calls: tuple[str, ...]
    extra_dir: Path | None = None
    native_flags: tuple[str, ...] = ()  # the -D/-U/-I of --cflags, which the native build needs too

    def extra(self, row: Row) -> tuple[Path, ...]:
        return tuple(self.extra_dir / x for x in row.extra) if self.extra_dir else ()

    def row_calls(self, row: Row) -> tuple[str, ...]:
        return self.calls + (row.calls if self.extra_dir else ())

    @property
    def entry(self) -> str:
        """The image's entry point: the first function called (what --gc-sections keeps from)."""
        return split_call(self.calls[0])[0].partition(":")[0]


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
    boot: bool | None = None  # the boot reproduced the native run; None: nothing was compared (see note)
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
    return (row.for_arch(col.arch) and col.compiler in row.compilers and col.partial in row.partials
            and col.final in row.finals and linker(col.partial, col.arch, partial=True) is not None
            and linker(col.final, col.arch) is not None)


# -- the truth a boot is compared with ----------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """The kernel's C run natively: its trace, or why there is none."""

    trace: tuple | None
    note: str = ""


def split_call(call: str) -> tuple[str, tuple[int, ...]]:
    """'SYMBOL[:TYPE] ARG...' -> ('SYMBOL[:TYPE]', args); raises ValueError on a bad argument."""
    symbol, *args = call.split()
    return symbol, tuple(int(a, 0) for a in args)


def pointer_args(sources: tuple[Path, ...]) -> dict[str, frozenset[int]]:
    """Per probe, which arguments the C source declares as pointers to objects (not strings): they differ
    between builds, so each side names them by the symbol they point into."""
    return {p.spec: frozenset(i for i, t in enumerate(p.args) if "*" in t and "char" not in t)
            for p in called_probes(*native.source_dirs(list(sources)))}


def comparable(events: list[dict], pointers: dict[str, frozenset[int]], symbolize) -> tuple:
    """Firings (pointers by symbol) and results, from boot --json events or the native run's."""
    out = []
    for e in events:
        kind = e.get("event", "fire" if "probe" in e else "return")
        if kind == "fire":
            args = [symbolize(a) if i in pointers.get(e["probe"], ()) else a for i, a in enumerate(e["args"])]
            out.append(("fire", e["probe"], tuple(args)))
        elif kind == "return":
            out.append(("return", e.get("value", e.get("return"))))
        elif kind in ("fault", "error", "interrupted"):
            out.append((kind, e.get("symbol"), e.get("fault", e.get("text"))))
    return tuple(out)


def native_reference(kernel: Kernel, row: Row, work: Path) -> Reference:
    sources = (*kernel.sources, *kernel.extra(row))
    calls = [split_call(c) for c in kernel.row_calls(row)]
    work.mkdir(parents=True, exist_ok=True)
    try:
        exe = native.build_native(work, list(sources), native.prototypes([c for c, _ in calls]), include_dir(),
                                  kernel.native_flags)
        events = native.run_native(exe, [native.Call(c.partition(":")[0], a) for c, a in calls])
    except native.NativeError as e:
        return Reference(None, f"no native run to compare with: {e}")
    trace = comparable(events, pointer_args(sources), native.data_symbolizer(exe))
    if not any(t[0] == "fire" for t in trace):
        return Reference(None, "the calls fire no probe natively: nothing to compare")
    return Reference(trace)


def boot_trace(image: Path, calls: list[str], pointers: dict[str, frozenset[int]], arch: str,
               arm: str = "trap") -> tuple:
    """`sdtgen boot --json` of the image, every probe armed, one --run per call, as comparable()."""
    cmd = [sdtgen_command(), "boot", str(image), "--json", "--arm", arm, "--enable", ":::"]
    for symbol, args in map(split_call, calls):
        cmd += ["--run", symbol if ":" in symbol else f"{symbol}:long", *(f"--arg={a}" for a in args)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    if proc.returncode == 2:  # refused before or while running: its one diagnostic line
        events.append({"event": "error", "text": proc.stderr.strip()})
    nm = f"{registry()[arch]['cross-prefix']}nm"
    return comparable(events, pointers, native.data_symbolizer(image, nm))


# -- one cell -------------------------------------------------------------------------------
def _judge_mode(b: Build, partial: Path, mode: str, out: Path, reference: Reference, calls: list[str],
                pointers: dict[str, frozenset[int]]) -> ModeResult:
    obj = out / f"kernel-{mode}.o"
    shutil.copy(partial, obj)
    stubs, table = out / f"sdt_stubs-{mode}.c", out / f"sdt_table-{mode}.S"
    try:
        gen(obj, stubs, table, mode)
    except SdtgenError as e:  # its one line: FILE: error: PLACE: message; fix (the file is the cell's copy)
        return ModeResult(mode, "refused", note=str(e).splitlines()[-1].partition(": error: ")[2])
    mdir = out / mode
    mdir.mkdir(exist_ok=True)
    image = final_link(b, obj, compile_table(b, stubs, table, mdir), mdir / "kernel.elf")
    proc = subprocess.run([sdtgen_command(), "check", "--json", str(obj), str(image)], capture_output=True,
                          text=True)
    if proc.returncode not in (0, 1):
        raise SdtgenError(proc.stderr.strip())
    report = json.loads(proc.stdout)
    r = ModeResult(mode, "ok" if report["ok"] else "broken", len(report["sites"]), report["stable"],
                   report["moved"], report["missing"], report["folded"], note=report["summary"])
    if r.status == "ok":  # a broken table is ✗ whatever its boot does
        if reference.trace is None:
            r.note = reference.note
        else:
            r.boot = boot_trace(image, calls, pointers, b.arch) == reference.trace
    return r


def run_group(row: Row, cols: list[Column], kernel: Kernel, work: Path, reference: Reference) -> list[Cell]:
    """All the cells of one row for one compiler: compile once, then every linker pairing."""
    cells = []
    arch = cols[0].arch
    base = Build(compiler=cols[0].compiler, arch=arch, cflags=row.cflags(arch), merge_text=row.merge_text,
                 partial_flags=row.partial_flags, final_flags=row.final_flags, final_script=row.final_script,
                 stubs_first=row.stubs_first, entry=kernel.entry, extra_sources=kernel.extra(row))
    objdir = work / "obj"
    objdir.mkdir(parents=True, exist_ok=True)
    try:
        objs = compile_sources(base, list(kernel.sources), objdir)
    except BuildError as e:
        return [Cell(row.key, c.label, "error", arch, f"{e.step}: {_last_line(e.output)}") for c in cols]
    calls = list(kernel.row_calls(row))
    pointers = pointer_args((*kernel.sources, *kernel.extra(row)))
    for col in cols:
        b = replace(base, partial=col.partial, final=col.final)
        out = work / f"{col.partial}-{col.final}"
        out.mkdir(parents=True, exist_ok=True)
        try:
            partial = partial_link(b, objs, out / "kernel.o")
            results = {m: _judge_mode(b, partial, m, out, reference, calls, pointers) for m in MODES}
            cells.append(Cell(row.key, col.label, "done", arch, results=results))
        except BuildError as e:
            cells.append(Cell(row.key, col.label, "error", arch, f"{e.step}: {_last_line(e.output)}"))
        except SdtgenError as e:
            cells.append(Cell(row.key, col.label, "error", arch, _last_line(str(e))))
    return cells


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "failed"


# -- the whole matrix -------------------------------------------------------------------------
def run_matrix(kernel: Kernel, rows: list[Row], cols: list[Column], jobs: int = 2, progress: bool = False,
               keep: Path | None = None) -> list[Cell]:
    cells: list[Cell] = []
    groups: dict[tuple[str, str, str], list[Column]] = {}
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
            # the native run of each row's sources and calls, once: every architecture reproduces it
            wanted = {rk for _, rk, _ in groups}
            refs = {rk: pool.submit(native_reference, kernel, by_key[rk], root / "native" / rk) for rk in wanted}
            references = {rk: f.result() for rk, f in refs.items()}
            futures = {pool.submit(run_group, by_key[rk], cs, kernel, root / arch / rk / cc, references[rk]):
                       (rk, cc) for (arch, rk, cc), cs in groups.items()}
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


# -- the command line ---------------------------------------------------------------------------
class UsageError(Exception):
    """Bad arguments: one line in sdtgen's diagnostic format, exit 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tools/matrix.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", metavar="DIR", help="the kernel's C sources (default: the fixture kernel)")
    p.add_argument("--call", action="append", metavar="'SYMBOL[:TYPE] [ARG]...'",
                   help="a function each boot and the native run call, with integer arguments (TYPE as sdtgen "
                        "boot --run reads the result); needed with --sources; repeatable")
    p.add_argument("--mode", action="append", metavar="GLOB", help="rows to run, by key (plain, icf, lto-*...)")
    p.add_argument("--cflags", default="", help="extra compiler flags for every build, as --cflags=\"-O1 -g\"")
    p.add_argument("--compiler", action="append", choices=COMPILER_NAMES)
    p.add_argument("--arch", action="append", metavar="ARCH",
                   help="architectures to build for, from `sdtgen arch` (default x86_64; all: every one)")
    p.add_argument("--toolchain", action="append", metavar="GLOB", help="columns, as compiler:partial/final")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--output", metavar="FILE",
                   help="rewrite the tables between the matrix markers in FILE (make matrix: docs/matrix.md)")
    p.add_argument("--json", action="store_true", help="print every cell as one JSON document")
    return p.parse_args(argv)


def kernel_of(args: argparse.Namespace) -> Kernel:
    calls = tuple(args.call or ())
    for call in calls:
        try:
            split_call(call)
        except ValueError:
            raise UsageError(f"--call {call!r} is not 'SYMBOL[:TYPE] ARG...' with integer arguments") from None
    native_flags = tuple(f for f in shlex.split(args.cflags) if f.startswith(("-D", "-U", "-I")))
    if args.sources is None:
        return Kernel(tuple(sorted((FIXTURES / "kernel").glob("*.c"))), calls or FIXTURE_CALLS,
                      FIXTURES / "linkmodes", native_flags)
    sources = tuple(sorted(Path(args.sources).glob("*.c")))
    if not sources:
        raise UsageError(f"{args.sources}: error: holds no C sources; give --sources DIR with the kernel's .c files")
    if not calls:
        raise UsageError(f"{args.sources}: error: no calls to compare; name the kernel's functions with --call "
                         "'SYMBOL[:TYPE] ARG...' (they run natively and in every boot)")
    return Kernel(sources, calls, None, native_flags)


def select(args: argparse.Namespace) -> tuple[list[Row], list[Column]]:
    rows = [r for r in ROWS if not args.mode or any(fnmatch.fnmatchcase(r.key, m) for m in args.mode)]
    if args.cflags:
        rows = [replace(r, add=r.add + tuple(shlex.split(args.cflags))) for r in rows]
    known = arch_names()
    chosen = known if "all" in (args.arch or ()) else tuple(args.arch or ("x86_64",))
    unknown = [a for a in chosen if a not in known]
    if unknown:
        raise UsageError(f"matrix: error: unknown architecture {unknown[0]!r}; choose from {', '.join(known)} or all")
    cols = [c for c in columns(tuple(args.compiler or COMPILER_NAMES), chosen)
            if not args.toolchain or any(fnmatch.fnmatchcase(c.label.replace(" ", ":"), t) for t in args.toolchain)]
    if not rows or not cols:
        raise UsageError("matrix: error: no matrix cell matches the --mode/--toolchain filters; see --help")
    return rows, cols


def replace_block(path: Path, text: str) -> None:
    begin, end = "<!-- matrix:begin -->", "<!-- matrix:end -->"
    doc = path.read_text()
    if begin not in doc or end not in doc:
        raise UsageError(f"{path}: error: has no {begin} ... {end} block; add the two markers where the table goes")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{head}{begin}\n{text}\n{end}{tail}")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    from matrix_report import markdown_section, notes, render_table

    args = parse_args(argv)
    try:
        kernel = kernel_of(args)
        rows, cols = select(args)
        cells = run_matrix(kernel, rows, cols, jobs=args.jobs, progress=sys.stderr.isatty())
        if args.json:
            print(json.dumps({"cells": [c.to_json() for c in cells]}))
        else:
            print(render_table(cells, rows, cols))
            for line in notes(cells):
                print(f"  {line}")
        if args.output:
            machine = f"{platform.machine()}, {os.cpu_count()} cores, " \
                      f"{platform.python_implementation()} {platform.python_version()}"
            replace_block(Path(args.output), markdown_section(cells, rows, cols, machine))
    except (UsageError, SdtgenError) as e:
        print(e, file=sys.stderr)
        return 2
    broken = [c for c in cells if c.state == "done" and c.results["reloc"].status == "broken"]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
