"""The build-time commands: scan, gen, check, probes and cost (docs/cli.md)."""

from __future__ import annotations

import argparse
import sys

from sdtgen.commands import EXIT_FAIL, EXIT_OK, emit_json, int_arg, table
from sdtgen.errors import ERROR, WARNING, Diagnostic, SdtError, printable, sentence


def add_scan(sub) -> None:
    s = sub.add_parser("scan", help="list the probe sites of a relocatable object (ld -r output)")
    s.add_argument("object", help="the partial link's output (ld -r)")
    s.add_argument("--prefix", default="__dtrace_sdt_", help="symbol prefix of probe functions")
    s.add_argument("--json", action="store_true", help="one JSON document: the object, its arch and its sites")
    s.set_defaults(func=cmd_scan)


def add_gen(sub) -> None:
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
    g.add_argument("--clock-hz", type=int_arg, metavar="HZ",
                   help="the metadata's clock rate: ticks a second of the kernel's sdt_hooks.clock (default 1e9)")
    g.add_argument("--clock-name", default="", metavar="NAME",
                   help="the metadata's clock name (default the architecture's counter: tsc, cntvct_el0, cycle)")
    g.add_argument("--module", metavar="NAME",
                   help="the object is a loadable module (or a shared object) named NAME: its table is its own "
                   "(section sdt_module_table, what its loader gives sdt_module_load) and its symbols hidden")
    g.add_argument("-v", "--verbose", action="store_true", help="say how many sites and probes were written")
    g.set_defaults(func=cmd_gen)


def add_check(sub) -> None:
    c = sub.add_parser("check", help="prove every site is where the image's table says")
    c.add_argument("object", nargs="+",
                   help="the object(s) `sdtgen gen` rewrote, in the order their tables are linked")
    c.add_argument("image", help="the final image")
    c.add_argument("--json", action="store_true", help="one JSON document with a verdict for every site")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing when every site is stable")
    c.set_defaults(func=cmd_check)


def add_probes(sub) -> None:
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


def add_cost(sub) -> None:
    co = sub.add_parser("cost", help="what each disabled probe adds to its function's fall-through path, against a "
                        "build without probes")
    co.add_argument("probed", help="the image built with probes")
    co.add_argument("baseline", help="the same kernel built without them (-DSDT_COMPILED_OUT), or in another form")
    co.add_argument("--json", action="store_true", help="one JSON document: every function, every site, the totals")
    co.add_argument("-v", "--verbose", action="store_true",
                    help="under each site, the instructions its path adds (+) and lacks (-)")
    co.set_defaults(func=cmd_cost)


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
        print(table(rows, ["PROBE", "FORM", "SECTION", "OFFSET", "TEXT_OFF", "RELOC", "SITE"]))
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
        emit_json({**report.to_json(), "summary": report.summary()})
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
        emit_json({"probes": [p.to_json() for p in listing]})
        return EXIT_OK
    rows = [[str(p.id), *(printable(f) for f in (p.provider, p.module, p.function, p.name)), str(p.sites),
             printable((" " if p.kind == "stapsdt" else ", ").join(p.args))] for p in listing]
    text = table(rows, ["ID", "PROVIDER", "MODULE", "FUNCTION", "NAME", "SITES", "ARGS"])
    if not args.verbose:
        print(text)
        return EXIT_OK
    head, *body = text.splitlines()
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
        emit_json(report.to_json())
    else:
        print(render(report, args.verbose))
    return EXIT_OK
