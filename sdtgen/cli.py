"""The sdtgen command line: argument parsing and output formatting only.

Exit status: 0 success, 1 a check failed, 2 usage or input error. Each
subcommand imports only what it needs: sdtgen runs inside every kernel build.
"""

from __future__ import annotations

import argparse
import sys

from sdtgen import __version__
from sdtgen.errors import ERROR, WARNING, Diagnostic, SdtError, printable, sentence
from sdtgen.limits import DEFAULT_BUFFER, DEFAULT_TIMEOUT, MAX_BUFFER, MIN_BUFFER

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _package_path(*parts: str) -> str:
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)


def _emit_json(obj: object) -> None:
    import json

    sys.stdout.write(json.dumps(obj))  # one shot, no indent: the C encoder, fast on 20,000 sites
    sys.stdout.write("\n")


def _table(rows: list[list[str]], header: list[str]) -> str:
    """Aligned columns; names from ELF files have control characters escaped (a name must not move
    the cursor, clear the screen or print a line of its own).

    Column by column, so a kernel's tens of thousands of rows cost one C-level check each, not a call per cell.
    """
    from itertools import repeat

    from sdtgen.errors import MAX_SHOWN

    columns = []
    for column in zip(header, *rows, strict=True):
        column = [str(c) for c in column]
        if max(map(len, column)) > MAX_SHOWN or not "".join(column).isprintable():
            column = [printable(c) for c in column]
        columns.append(column)
    padded = [list(map(str.ljust, c, repeat(max(map(len, c))))) for c in columns[:-1]]  # each call in C
    return "\n".join(map(str.rstrip, map("  ".join, zip(*padded, columns[-1], strict=True))))


def cmd_scan(args: argparse.Namespace) -> int:
    from sdtgen.scan import scan

    result = scan(args.object, args.prefix)
    if args.json:
        result.write_json(sys.stdout)
        return EXIT_OK
    probes = {s.probe for s in result.sites}
    print(f"{args.object}: {result.arch.name}, {len(result.sites)} sites of {len(probes)} probes")
    rows = [[s.probe, s.form, s.section, hex(s.offset), "-" if s.text_offset is None else hex(s.text_offset),
             s.reloc, s.function] for s in result.sites]
    if rows:
        print(_table(rows, ["PROBE", "FORM", "SECTION", "OFFSET", "TEXT_OFF", "RELOC", "SITE"]))
    return EXIT_OK


def cmd_gen(args: argparse.Namespace) -> int:
    from sdtgen.codegen import MetadataRequest, gen_files

    if not args.ctf_metadata and (args.clock_hz is not None or args.clock_name):
        raise SdtError("", "--clock-hz and --clock-name describe the CTF metadata, and without --ctf-metadata "
                       "nothing writes it", "give --ctf-metadata FILE too")
    ctf = (MetadataRequest(args.ctf_metadata, 1_000_000_000 if args.clock_hz is None else args.clock_hz,
                           args.clock_name) if args.ctf_metadata else None)
    result = gen_files(args.object, args.stubs, args.table, args.mode, strict=args.strict, ctf=ctf,
                       module=args.module)
    if args.verbose:
        print(f"{args.object}: {len(result.sites)} sites, {len(result.probes)} probes, table mode {args.mode}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from sdtgen.check import check
    from sdtgen.image import Image
    from sdtgen.scan import merged, scan

    result = merged([scan(obj) for obj in args.object])
    placed_at = _module_base(args.image)
    if placed_at is not None:  # a module: its table proved against the module as a loader places it
        import tempfile

        from sdtgen.modlink import placed

        with tempfile.TemporaryDirectory(prefix="sdtgen-check-") as tmp, \
                placed(args.image, result.arch, placed_at, tmp, relax=False) as out, Image(out) as image:
            report = check(result, image)
        if not args.json and not args.quiet and not (report.problems and not report.verdicts):
            print(f"{args.image}: a module: its table checked against it placed at {placed_at:#x} by its own "
                  "relocations, without relaxation, as a kernel's loader places it")
    else:
        with Image(args.image) as image:
            report = check(result, image)
    if args.json:
        _emit_json({**report.to_json(), "summary": report.summary()})
        return EXIT_OK if report.ok else EXIT_FAIL
    for problem in report.problems:
        print(Diagnostic(args.image, ERROR, sentence(problem)), file=sys.stderr)
    if report.problems and not report.verdicts:  # the table as a whole is refused: its line says all
        return EXIT_FAIL
    shown = [v for v in report.verdicts if v.status != "stable" and not (args.quiet and v.status == "folded")]
    for line in site_lines(args.image, shown):
        print(line, file=sys.stderr)
    if not args.quiet or not report.ok:
        folded = f", {report.count('folded')} folded" if report.count("folded") else ""
        checks = f", {report.checks} of them is-enabled checks" if report.checks else ""
        print(f"{args.image}: {len(report.verdicts)} sites{checks} (table mode {report.mode}): "
              f"{report.count('stable')} stable, {report.count('moved')} moved, "
              f"{report.count('missing')} missing{folded}", file=sys.stderr if not report.ok else sys.stdout)
        if not report.ok and report.summary():
            print(Diagnostic(args.image, ERROR, f"in short: {sentence(report.summary())}"), file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_FAIL


MODULE_CHECK_BASE = 0x1000000  # where check places a module: every architecture's calls out reach address 0


def _module_base(path: str) -> int | None:
    """Where check places ``path`` when it is a module object (relocatable, with a module table); else None."""
    from sdtgen.elf.reader import ElfFile
    from sdtgen.table import MODULE_TABLE_SECTION

    with ElfFile(path) as elf:
        return MODULE_CHECK_BASE if elf.type == 1 and elf.section(MODULE_TABLE_SECTION) is not None else None


def site_lines(image: str, verdicts: list) -> list[str]:
    """One line per function, as objtool does: its first site that is not stable, and how many more."""
    by_function: dict[str, list] = {}
    for v in verdicts:
        by_function.setdefault(f"{v.site.section}:{v.site.function.partition('+')[0]}", []).append(v)
    lines = []
    for group in by_function.values():
        v = group[0]
        delta = f" by {v.delta:+#x}" if v.delta is not None else ""
        more = f" (and {len(group) - 1} more sites in this function)" if len(group) > 1 else ""
        severity = WARNING if v.status == "folded" else ERROR
        what = f"{v.site.probe} is-enabled check" if v.site.form == "isen" else v.site.probe
        lines.append(str(Diagnostic(image, severity, sentence(f"{printable(what)} {v.status}{delta}: {v.cause}{more}"),
                                    sentence(v.fix), where=sentence(v.site.where))))
    return lines


def cmd_probes(args: argparse.Namespace) -> int:
    from sdtgen.errors import printable
    from sdtgen.listing import list_all

    listing = list_all(args.file, tuple(dict.fromkeys(args.kind or ())))
    if args.spec:
        listing = _matching(args.file, listing, args.spec)
    if args.json:
        _emit_json({"probes": [p.to_json() for p in listing]})
        return EXIT_OK
    rows = [[str(p.id), *(printable(f) for f in (p.provider, p.module, p.function, p.name)), str(p.sites),
             printable((" " if p.kind == "stapsdt" else ", ").join(p.args))] for p in listing]
    table = _table(rows, ["ID", "PROVIDER", "MODULE", "FUNCTION", "NAME", "SITES", "ARGS"])
    if not args.verbose:
        print(table)
        return EXIT_OK
    head, *body = table.splitlines()
    print(head)
    for line, p in zip(body, listing, strict=True):  # dtrace -lv: each probe, then its argument types
        print(line, "", *(sentence(v) for v in p.verbose()), "", sep="\n")
    return EXIT_OK


def _matching(path: str, listing: list, specs: list[str]) -> list:
    """The probes any of ``specs`` matches, as `dtrace -l -n SPEC` lists them: with the IDs of the whole
    listing, so an ID names the same probe whichever specs chose it."""
    from sdtgen.calls import describe, parse_spec
    from sdtgen.errors import printable

    patterns = []
    for text in specs:
        try:
            patterns.append(parse_spec(text))
        except SdtError as e:
            raise SdtError(printable(path), e.what, e.fix) from None
    chosen = [p for p in listing if any(pattern.matches(p) for pattern in patterns)]
    if not chosen:
        what = " or ".join(f"{printable(t)!r} ({describe(pt)})" for t, pt in zip(specs, patterns, strict=True))
        raise SdtError(printable(path), f"probe spec {what} matches no probe of the file",
                       f"list them all with `sdtgen probes {printable(path)}`; a spec is "
                       "provider:module:function:name, filled from the right, each field a glob")
    return chosen


def cmd_cost(args: argparse.Namespace) -> int:
    from sdtgen.cost import cost, render

    report = cost(args.probed, args.baseline)
    if args.json:
        _emit_json(report.to_json())
    else:
        print(render(report, args.verbose))
    return EXIT_OK


def cmd_linker_script(args: argparse.Namespace) -> int:
    from sdtgen.arch.base import linker_script, partial_script

    if args.keep and args.kind != "partial":
        raise SdtError("", f"--keep is an option of the partial script, not of {args.kind}",
                       "sdtgen linker-script partial --keep SECTION -o FILE")
    if args.kind == "final":
        from sdtgen import arch as arches

        if args.path:
            raise SdtError("", "the final linker script is written from a template, so it has no path of its own",
                           f"write it with `sdtgen linker-script final --arch {args.arch} -o FILE`")
        text = arches.by_name(args.arch).final_script()
    elif args.keep:
        text = partial_script(args.keep)
        if args.path:
            raise SdtError("", "a partial script that keeps sections is written for them, so it has no path of its "
                           "own", "write it with `sdtgen linker-script partial --keep SECTION -o FILE`")
    else:
        path = linker_script(args.kind)
        if args.path:
            print(path)
            return EXIT_OK
        with open(path) as f:
            text = f.read()
    if args.output:
        from sdtgen.atomic import write_atomic

        try:
            write_atomic(args.output, text.encode())  # left alone when unchanged: make relinks nothing
        except OSError as e:
            raise SdtError(args.output, f"cannot be written: {e.strerror}", "give a writable path to -o") from None
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_arch(args: argparse.Namespace) -> int:
    from sdtgen import arch as arches

    if args.packages:
        print("\n".join(arches.packages()))
    elif args.triple is not None:
        print(arches.for_triple(args.triple).name)
    elif args.get:
        if not args.name:
            raise SdtError("", "--get needs an architecture", f"sdtgen arch NAME --get {args.get}")
        print(_text(_arch_record(arches.by_name(args.name))[args.get]))
    else:
        chosen = [arches.by_name(args.name)] if args.name else arches.all_arches()
        if args.json:
            _emit_json({"arches": [_arch_record(a) for a in chosen]})
        else:
            rows = [[_text(v) for v in _arch_record(a).values()] for a in chosen]
            print(_table(rows, [f.upper() for f in ARCH_FIELDS]))
    return EXIT_OK


ARCH_FIELDS = ("name", "machine", "bits", "triple", "cross-prefix", "cflags", "packages", "kernel-base")


def _arch_record(arch) -> dict:
    """What the registry says of one architecture, as `sdtgen arch --json` gives it."""
    t = arch.toolchain
    return {"name": arch.name, "machine": arch.machine, "bits": arch.bits, "triple": t.triple,
            "cross-prefix": t.cross_prefix, "cflags": list(t.cflags), "packages": [t.gcc_package, t.binutils_package],
            "kernel-base": f"{arch.kernel_base:#x}"}


def _text(value) -> str:
    return " ".join(value) if isinstance(value, list) else str(value)


def cmd_include_dir(args: argparse.Namespace) -> int:
    print(_package_path("include"))
    return EXIT_OK


def cmd_runtime_dir(args: argparse.Namespace) -> int:
    print(_package_path("runtime"))
    return EXIT_OK


def cmd_makefile(args: argparse.Namespace) -> int:
    print(_package_path("data", "sdtgen.mk"))
    return EXIT_OK


class _Ordered(argparse.Action):
    """Keeps --enable/--disable/--run (with its --arg and --cpu)/--script/--action/--aggregate in command-line order in
    ``args.actions``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from sdtgen.session.drive import Call

        actions = getattr(namespace, "actions", None) or []
        if self.dest in ("arg", "cpu"):
            if not actions or actions[-1][0] != "run":
                parser.error(f"--{self.dest} must follow a --run")
            call = actions[-1][2]
            if self.dest == "arg":
                call.args.append(values)
            elif call.cpu is not None:
                parser.error("a --run takes one --cpu")
            else:
                call.cpu = _int_arg(values)
        elif self.dest == "run":
            actions.append(("run", values, Call()))
        elif self.dest == "aggregate" or (self.dest == "enable" and "/" in values):  # SPEC /predicate/
            from sdtgen.session.aggregations import Prepared

            actions.append((self.dest, values, Prepared()))
        else:
            actions.append((self.dest, values, None))
        namespace.actions = actions


def _int_arg(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _tracing(args: argparse.Namespace):
    """What `boot`, `qemu` and `attach` share, as the session takes it."""
    from sdtgen.session.starts import Tracing

    return Tracing(args.image, args.actions or [], args.interactive, args.json, args.quiet, args.arm, args.timeout,
                   args.trace, args.trace_format, args.interval)


def cmd_boot(args: argparse.Namespace) -> int:
    from sdtgen.session.starts import trace_session

    ok = trace_session("emulator", _tracing(args), patch=not args.no_patch, buffer_size=args.buffer_size,
                       overflow=args.overflow, cpus=args.cpus, seed=args.seed, schedule=args.schedule,
                       stream=not args.no_stream)
    return EXIT_OK if ok else EXIT_FAIL


def cmd_qemu(args: argparse.Namespace) -> int:
    from sdtgen.session.starts import trace_session

    ok = trace_session("qemu", _tracing(args), cpus=args.cpus, buffer_size=args.buffer_size, overflow=args.overflow,
                       qemu_args=args.qemu_arg or [], transport=args.transport)
    return EXIT_OK if ok else EXIT_FAIL


def cmd_attach(args: argparse.Namespace) -> int:
    from sdtgen.session.starts import trace_session

    ok = trace_session("attach", _tracing(args), args.serial, buffer_size=args.buffer_size, overflow=args.overflow)
    return EXIT_OK if ok else EXIT_FAIL


def cmd_torture(args: argparse.Namespace) -> int:
    from sdtgen.calls import parse_int
    from sdtgen.session.starts import torture

    summary = torture("attach" if args.serial else args.target, args.image, args.run,
                      [parse_int(a) for a in args.arg or []], cpus=args.cpus, toggles=args.toggles, seed=args.seed,
                      timeout=args.timeout, exhaustive=args.exhaustive, spec=args.spec, arm=args.arm,
                      module=args.module, serial=args.serial, qemu_args=args.qemu_arg or [], progress=True)
    if summary is None:
        return EXIT_FAIL
    if args.json:
        _emit_json(summary.as_dict())
    else:
        print(summary.text())
    return EXIT_OK if summary.passed else EXIT_FAIL


def cmd_record(args: argparse.Namespace) -> int:
    """A session over a kernel that streams by itself: its events shown as they come, its packets traced."""
    from sdtgen.session.starts import record_session

    got = record_session(args.image, args.serial, args.trace, args.json, args.quiet)
    if got is None:
        return EXIT_FAIL
    if args.json:
        _emit_json({"event": "recorded", "trace": args.trace, "packets": got.packets, "events": got.events,
                    "cpus": got.cpus, "dropped": got.dropped, "damaged": got.damaged})
    else:
        print(f"recorded {got.packets} packets ({got.events} events) of {got.cpus} CPUs into "
              f"{printable(args.trace)}; {got.dropped} dropped (overwritten while sent), {got.damaged} damaged")
    return EXIT_OK


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, sized without importing shutil (and its compression modules): argparse
    builds one for every add_argument, so every sdtgen run paid for that import."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            import os

            try:
                width = int(os.environ.get("COLUMNS") or os.get_terminal_size(sys.stdout.fileno()).columns) - 2
            except (OSError, ValueError):
                width = 78
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None) -> argparse.Namespace:  # type: ignore[override]
        """As argparse's, but what no option of the subcommand takes is refused by the subcommand's parser, so the
        hint names its help (`sdtgen probes --help`), not the top-level one."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = getattr(self, "subcommands", {}).get(getattr(parsed, "command", None), self)
            rest = getattr(chosen, "intermixed", None)  # a list of words that may follow options too
            options = [w for w in extras if w.startswith("-")]
            if rest and not options:
                setattr(parsed, rest, [*(getattr(parsed, rest) or []), *extras])
                return parsed
            chosen.error(f"unrecognized arguments: {' '.join(options if rest else extras)}")
        return parsed


def _add_run_options(b: argparse.ArgumentParser, trap_help: str) -> None:
    """The options `boot`, `qemu` and `attach` share: what to arm and run, the buffers, the trace, the output."""
    b.add_argument("image", help="the linked kernel image (with the table `sdtgen gen` wrote)")
    b.add_argument("--enable", action=_Ordered, metavar="SPEC", help="arm probes matching SPEC; 'SPEC /PREDICATE/' "
                   "records only the firings for which PREDICATE holds (DTrace's syntax, docs/aggregations.md)")
    b.add_argument("--disable", action=_Ordered, metavar="SPEC", help="disarm probes matching SPEC")
    b.add_argument("--run", action=_Ordered, metavar="SYMBOL[:TYPE]",
                   help="call a function of the image; TYPE (long, int, uint, ulong, str, void) reads its result")
    b.add_argument("--arg", action=_Ordered, metavar="N",
                   help="an argument of the preceding --run: an integer (decimal, 0x hex, negative), or str:TEXT "
                        "for a string (the function gets a pointer to TEXT)")
    b.add_argument("--cpu", action=_Ordered, metavar="N",
                   help="run the preceding --run on CPU N only (default: on every CPU at once)")
    b.add_argument("--script", action=_Ordered, metavar="FILE",
                   help="commands, one per line (see -i); - reads standard input")
    b.add_argument("--aggregate", action=_Ordered, metavar="CLAUSES",
                   help="aggregate in the kernel: DTrace clauses, provider:module:function:name [/predicate/] "
                        "@name[keys] = count()|sum(x)|min(x)|max(x)|avg(x)|quantize(x)|lquantize(x, lo, hi, step); "
                        "printed as printa does when the session ends (see docs/aggregations.md)")
    b.add_argument("-i", "--interactive", action="store_true", help="open the console after the actions")
    b.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"how long each function run may take (default {DEFAULT_TIMEOUT:g}); Ctrl-C stops one sooner")
    b.add_argument("--arm", choices=("trap", "branch"), default="trap",
                   help=f"how probes are armed: trap {trap_help} or branch "
                        "(a call to the probe's recorder in the guest)")
    b.add_argument("--buffer-size", type=_int_arg, default=DEFAULT_BUFFER, metavar="BYTES",
                   help=f"each CPU's trace buffer: a power of two from {MIN_BUFFER} to {MAX_BUFFER} "
                        f"(default {DEFAULT_BUFFER})")
    b.add_argument("--overflow", choices=("drop", "overwrite"), default="drop",
                   help="when a CPU's buffer is full: drop new records (the default; the buffer is read as each "
                        "packet fills, so a host that keeps up loses none) or overwrite the oldest (a flight "
                        "recorder, read when a run ends)")
    b.add_argument("--trace", metavar="PATH", help="write every recorded event to PATH as the run goes (a "
                                                  "directory for ctf); Ctrl-C ends the session and keeps it")
    b.add_argument("--trace-format", choices=("ctf", "perfetto", "chrome"), default=None,
                   help="the --trace format: CTF 1.8 (babeltrace2), a Perfetto protobuf trace, or Chrome "
                        "trace-event JSON (default: from the extension, .json chrome, .pftrace perfetto, else ctf)")
    b.add_argument("-q", "--quiet", action="store_true", help="do not show each firing (they are counted and traced)")
    b.add_argument("--json", action="store_true", help="print every event as one JSON line (JSON Lines) on stdout")


COMMANDS = ("scan", "gen", "check", "probes", "cost", "linker-script", "arch", "boot", "torture", "qemu", "attach",
            "record", "include-dir", "runtime-dir", "makefile")


class _Only:
    """The subcommands, each added only when it is the one this run asked for: building every
    subcommand's options costs more than a small scan. ``only`` None adds them all (--help)."""

    def __init__(self, sub, only: str | None) -> None:
        self.sub, self.only = sub, only
        self.parsers: dict[str, argparse.ArgumentParser] = {}

    def add_parser(self, name: str, **kwargs):
        if self.only not in (None, name):
            return _Unused()
        self.parsers[name] = parser = self.sub.add_parser(name, **kwargs)
        return parser


class _Unused:
    """A subcommand this run does not use: its options are not built."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    from sdtgen import arch as arches

    arch_names = arches.module_names()  # each module is imported only when its architecture is used
    p = _Parser(prog="sdtgen", description="Zero-cost SDT probes for kernel-style C builds.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = _Only(p.add_subparsers(dest="command", required=True, parser_class=_Parser), only)
    p.subcommands = sub.parsers  # who refuses a subcommand's stray arguments

    s = sub.add_parser("scan", help="list the probe sites of a relocatable object (ld -r output)")
    s.add_argument("object", help="the partial link's output (ld -r)")
    s.add_argument("--prefix", default="__dtrace_sdt_", help="symbol prefix of probe functions")
    s.add_argument("--json", action="store_true", help="one JSON document: the object, its arch and its sites")
    s.set_defaults(func=cmd_scan)

    g = sub.add_parser("gen", help="write the stub C and the site table for an object")
    g.add_argument("object", help="the partial link's output (ld -r); reloc mode adds site anchors to it")
    g.add_argument("--stubs", required=True, metavar="FILE.c", help="where to write the stub functions")
    g.add_argument("--table", required=True, metavar="FILE.S", help="where to write the probe and site tables")
    g.add_argument("--mode", choices=("reloc", "offset"), default="reloc",
                   help="reloc: entries the final linker resolves (default); offset: offsets from btext")
    g.add_argument("--strict", action="store_true",
                   help="refuse a probe used without SDT_PROBE_DEFINE (a warning otherwise)")
    g.add_argument("--ctf-metadata", metavar="FILE",
                   help="also write the CTF 1.8 metadata of the runtime's packets (a trace directory's `metadata`)")
    g.add_argument("--clock-hz", type=_int_arg, metavar="HZ",
                   help="the metadata's clock rate: ticks a second of the kernel's sdt_hooks.clock (default 1e9)")
    g.add_argument("--clock-name", default="", metavar="NAME",
                   help="the metadata's clock name (default the architecture's counter: tsc, cntvct_el0, cycle)")
    g.add_argument("--module", metavar="NAME",
                   help="the object is a loadable module (or a shared object) named NAME: its table is its own "
                   "(section sdt_module_table, what its loader gives sdt_module_load) and its symbols hidden")
    g.add_argument("-v", "--verbose", action="store_true", help="say how many sites and probes were written")
    g.set_defaults(func=cmd_gen)

    c = sub.add_parser("check", help="prove every site is where the image's table says")
    c.add_argument("object", nargs="+",
                   help="the object(s) `sdtgen gen` rewrote, in the order their tables are linked")
    c.add_argument("image", help="the final image")
    c.add_argument("--json", action="store_true", help="one JSON document with a verdict for every site")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing when every site is stable")
    c.set_defaults(func=cmd_check)

    pr = sub.add_parser("probes", help="list probes (dtrace -l style) of an object or an image")
    pr.add_argument("file", help="a relocatable object, an executable, a shared object or a kernel image")
    pr.add_argument("spec", nargs="*", metavar="SPEC",
                    help="list only the probes SPEC matches, as dtrace -l -n does: provider:module:function:name, "
                         "filled from the right, each field a glob (* ? [..]), empty matches all (repeatable)")
    pr.intermixed = "spec"  # `probes FILE --kind stapsdt SPEC`: specs after options too
    from sdtgen.tables import KINDS

    pr.add_argument("--kind", action="append", choices=("sdt", *KINDS),
                    help="list only this kind of table (repeatable; default: every kind the file carries)")
    pr.add_argument("--json", action="store_true", help='one JSON document: {"probes": [...]}')
    pr.add_argument("-v", "--verbose", action="store_true",
                    help="like dtrace's verbose listing: each probe's argument types, the translated beside the native")
    pr.set_defaults(func=cmd_probes)

    co = sub.add_parser("cost", help="what each disabled probe adds to its function's fall-through path, against a "
                        "build without probes")
    co.add_argument("probed", help="the image built with probes")
    co.add_argument("baseline", help="the same kernel built without them (-DSDT_COMPILED_OUT), or in another form")
    co.add_argument("--json", action="store_true", help="one JSON document: every function, every site, the totals")
    co.add_argument("-v", "--verbose", action="store_true",
                    help="under each site, the instructions its path adds (+) and lacks (-)")
    co.set_defaults(func=cmd_cost)

    ls = sub.add_parser("linker-script", help="print sdtgen's final or partial linker script, or a snippet for yours")
    ls.add_argument("kind", choices=("final", "partial", "sdt_text", "sdt_data"),
                    help="final: the image's (from a template); partial: ld -r's; sdt_text, sdt_data: the sections "
                         "a kernel's own final script INCLUDEs")
    ls.add_argument("--arch", default="x86_64", choices=arch_names, help="the final script's architecture")
    ls.add_argument("--keep", action="append", metavar="SECTION",
                    help="partial: leave the kernel's own text section SECTION (.text.NAME) out of the merged .text, "
                         "as its final script sees it without sdtgen (repeatable)")
    ls.add_argument("--path", action="store_true", help="print the file's path instead of its text (not for final)")
    ls.add_argument("-o", "--output", metavar="FILE", help="write the script to FILE")
    ls.set_defaults(func=cmd_linker_script)

    ar = sub.add_parser("arch", help="what sdtgen knows of each architecture (for Makefiles and CI)")
    ar.add_argument("name", nargs="?", choices=arch_names, help="one architecture (default: all)")
    ar.add_argument("--get", choices=ARCH_FIELDS, help="print one field of NAME")
    ar.add_argument("--triple", metavar="TRIPLE", help="print the architecture of a triple ($(CC) -dumpmachine)")
    ar.add_argument("--packages", action="store_true",
                    help="print the Debian packages that build and boot for all of them (compilers, binutils, QEMU)")
    ar.add_argument("--json", action="store_true", help="the registry as one JSON object")
    ar.set_defaults(func=cmd_arch)

    b = sub.add_parser("boot", help="boot an image in the emulator, patch its sites, arm probes and run functions")
    _add_run_options(b, "(a breakpoint the host handles; the default)")
    b.add_argument("--action", action=_Ordered, metavar="SPEC=FUNCTION",
                   help="enable the probes matching SPEC and call FUNCTION in the guest with a probe's "
                        "arguments whenever one fires")
    b.add_argument("--module", action=_Ordered, metavar="FILE",
                   help="load the module FILE (its ld -r output with what `sdtgen gen --module` wrote) at this point: "
                        "relocated against the image and given to sdt_module_load; the specs enabled so far arm it")
    b.add_argument("--unload", action=_Ordered, metavar="NAME",
                   help="unload module NAME at this point (sdt_module_unload)")
    b.add_argument("--no-stream", action="store_true",
                   help="read the buffers only when a run ends, not as packets fill")
    b.add_argument("--no-patch", action="store_true", help="leave every site a call to its empty stub")
    b.add_argument("--cpus", type=int, default=1, metavar="N",
                   help="run N CPUs on the guest's memory; each --run calls the function on all of them")
    b.add_argument("--schedule", choices=("parallel", "seeded"), default="parallel",
                   help="parallel: each CPU on a host thread of its own (the default); seeded: interleaved in "
                        "instruction quanta a seed decides, replayable")
    b.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of the seeded schedule")
    _add_interval(b)
    b.set_defaults(func=cmd_boot, actions=None)

    t = sub.add_parser("torture", help="call a function on N CPUs while another CPU arms and disarms its probes "
                                      "through the image's runtime")
    t.add_argument("image", help="the linked kernel image (with the table `sdtgen gen` wrote and the runtime); "
                                 "with --target process, the program")
    t.add_argument("--run", required=True, metavar="SYMBOL[:TYPE]",
                   help="the function every CPU calls over and over; TYPE (long, int, ...) reads its result")
    t.add_argument("--arg", action="append", metavar="N", help="an argument of SYMBOL (repeat for each)")
    t.add_argument("--cpus", type=int, default=4, metavar="N", help="how many CPUs call it (default 4)")
    t.add_argument("--toggles", type=int, default=100, metavar="K",
                   help="how many times the control CPU arms or disarms SYMBOL's probes (default 100)")
    t.add_argument("--spec", default="", metavar="SPEC",
                   help="the probes to arm and disarm (default: those with sites in SYMBOL)")
    t.add_argument("--arm", choices=("trap", "branch", "module"), default="branch",
                   help="how they are armed (default branch); module: with --module, the spec stays enabled and the "
                        "control CPU unloads and loads the module in turn, --toggles times")
    t.add_argument("--module", metavar="FILE", help="in the emulator: load the module FILE first (as `boot --module`); "
                   "--run may name its functions")
    t.add_argument("--target", choices=("emulator", "qemu", "process"), default="emulator",
                   help="where: the emulator (the default: it checks every instruction a CPU fetches in a site), "
                        "QEMU with --cpus + 1 vCPUs, or the image as a Linux process with --cpus + 1 threads")
    t.add_argument("--serial", metavar="LINE", help="instead: a kernel already running, attached over LINE "
                   "(as `sdtgen attach`)")
    t.add_argument("--qemu-arg", action="append", metavar="ARG", help="with --target qemu: an argument for QEMU")
    t.add_argument("--exhaustive", action="store_true",
                   help="instead: at every store the runtime makes to SYMBOL's sites, start another CPU at every "
                        "instruction boundary of the site, in every order the store's bytes can land (emulator)")
    t.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of the interleaving and the toggles")
    t.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"stop toggling after this long, and say so (default {DEFAULT_TIMEOUT:g})")
    t.add_argument("--json", action="store_true", help="the summary as one JSON object")
    t.set_defaults(func=cmd_torture)

    q = sub.add_parser("qemu", help="boot a kernel that links the runtime's control core in QEMU, with its vCPUs "
                       "in parallel; arm probes and run functions over its serial line")
    _add_run_options(q, "(a breakpoint the kernel's sdt_trap handles; the default)")
    from sdtgen.targets.qemu import MAX_CPUS as QEMU_MAX_CPUS

    q.add_argument("--cpus", type=int, default=1, metavar="N",
                   help=f"QEMU's -smp (1 to {QEMU_MAX_CPUS}); each --run calls the function on every vCPU at once")
    q.add_argument("--qemu-arg", action="append", metavar="ARG",
                   help="an argument for QEMU (repeat for each; or give them all after --): memory (-m), -bios, "
                        "disks; the user's replace sdtgen's own")
    q.add_argument("--transport", choices=("shared", "serial"), default="shared",
                   help="how packets reach the host: read in the machine's RAM, which QEMU shares with sdtgen "
                        "(the default, where the kernel says where its rings are), or sent on the serial line")
    q.add_argument("--module", action=_Ordered, metavar="FILE",
                   help="give the kernel's loader the module FILE (relocated into its sdt_module_area, as a fw_cfg "
                        "file) and load it at this point (`module load`); the specs enabled so far arm it")
    q.add_argument("--unload", action=_Ordered, metavar="NAME", help="unload module NAME at this point (`module "
                   "unload`: the loader keeps its memory, a later --module of the same FILE loads it again)")
    _add_interval(q)
    q.set_defaults(func=cmd_qemu, actions=None)

    at = sub.add_parser("attach", help="drive a kernel that is already running (a board's UART, a QEMU you "
                        "started) through its control core: arm probes, run functions, trace")
    at.add_argument("--serial", required=True, metavar="LINE",
                    help="tcp:HOST:PORT (QEMU's -serial tcp:HOST:PORT,server=on), a pty or tty device, or the "
                         "base path of a FIFO pair BASE.in/BASE.out (QEMU's -serial pipe:BASE)")
    _add_run_options(at, "(a breakpoint the kernel's sdt_trap handles; the default)")
    _add_interval(at)
    at.set_defaults(func=cmd_attach, actions=None)

    rc = sub.add_parser("record", help="collect the packets a kernel streams on a serial line (sdt_serial_drain) "
                        "into a CTF trace, showing their events as they come")
    rc.add_argument("--serial", required=True, metavar="LINE",
                    help="tcp:HOST:PORT (where QEMU's serial port listens), or the path of a pty, a tty device, "
                         "a FIFO or a capture file")
    rc.add_argument("--image", required=True, metavar="IMAGE",
                    help="the kernel image: its probe descriptors describe the events (the trace's metadata)")
    rc.add_argument("--trace", required=True, metavar="DIR", help="the CTF trace directory: one stream a CPU")
    rc.add_argument("-q", "--quiet", action="store_true", help="do not show each event (they are counted and traced)")
    rc.add_argument("--json", action="store_true",
                    help="the kernel's lines, the events and the summary as JSON lines (as `boot --json` prints them)")
    rc.set_defaults(func=cmd_record)

    sub.add_parser("include-dir", help="print the directory holding sdt.h").set_defaults(func=cmd_include_dir)
    sub.add_parser("runtime-dir", help="print the directory holding the runtime's C sources (docs/runtime.md)"
                   ).set_defaults(func=cmd_runtime_dir)
    sub.add_parser("makefile", help="print the path of the Makefile fragment").set_defaults(func=cmd_makefile)
    return p


def _add_interval(b: argparse.ArgumentParser) -> None:
    b.add_argument("--interval", type=float, metavar="SECONDS",
                   help="print the aggregations every SECONDS while the kernel runs; after the actions (without -i) "
                        "the session runs until Ctrl-C")


def _negative_args(argv: list[str]) -> list[str]:
    """``--arg -0x10`` as ``--arg=-0x10`` (and ``--qemu-arg -m``): argparse takes a value starting with '-' for an
    option."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] == "--arg" and word.startswith("-") and word[1:2].isdigit():
            out[-1] = f"--arg={word}"
        elif out and out[-1] == "--qemu-arg" and word.startswith("-"):  # QEMU's own options
            out[-1] = f"--qemu-arg={word}"
        else:
            out.append(word)
    return out


class Terminated(BaseException):
    """SIGTERM or SIGHUP: the command stops, its outputs whole or not there at all."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, frame) -> None:
    raise Terminated(signum)


# Commands that read a file, print and end: all they allocate is acyclic (records, tuples, strings), so the
# cyclic collector, which would walk a kernel's growing list of sites again and again as it is made (a twentieth
# of a scan's instructions), finds nothing. Paused while such a command runs (not gen and check, which write
# files and whose timing under signals is tested as it is).
NO_CYCLES = frozenset({"scan", "probes"})


def main(argv: list[str] | None = None) -> int:
    import gc
    import signal

    argv = sys.argv[1:] if argv is None else argv
    paused = False
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _terminate)
        only = argv[0] if argv and argv[0] in COMMANDS else None
        if only in NO_CYCLES and gc.isenabled():
            gc.disable()
            paused = True
        rest: list[str] = []
        if only == "qemu" and "--" in argv:  # everything after -- is QEMU's
            at = argv.index("--")
            argv, rest = argv[:at], argv[at + 1:]
        args = build_parser(only).parse_args(_negative_args(argv))
        if rest:
            args.qemu_arg = (args.qemu_arg or []) + rest
        return args.func(args)
    except Terminated as t:
        return 128 + t.signum
    except SdtError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        if type(e).__name__ != "Stopped":  # a stopped guest has said where it was
            print("sdtgen: error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    finally:  # after main: a signal ends the process as it would have
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if paused:
            gc.enable()


if __name__ == "__main__":
    sys.exit(main())
