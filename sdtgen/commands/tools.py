"""The commands that say where sdtgen's parts are and what it knows: linker-script, arch, include-dir,
runtime-dir and makefile (docs/cli.md)."""

from __future__ import annotations

import argparse
import sys

from sdtgen.commands import EXIT_OK, emit_json, package_path, table
from sdtgen.errors import SdtError

ARCH_FIELDS = ("name", "machine", "bits", "triple", "cross-prefix", "cflags", "packages", "kernel-base")


def add_linker_script(sub) -> None:
    from sdtgen import arch as arches

    arch_names = arches.module_names()  # each module is imported only when its architecture is used
    ls = sub.add_parser("linker-script", help="print sdtgen's final or partial linker script, or a snippet for yours")
    ls.add_argument("kind", choices=("final", "partial", "sdt_text", "sdt_data"),
                    help="final: the image's (from a template); partial: ld -r's; sdt_text, sdt_data: the sections "
                         "a kernel's own final script INCLUDEs")
    ls.add_argument("--arch", default=arches.DEFAULT, choices=arch_names,
                    help=f"the final script's architecture (default {arches.DEFAULT})")
    ls.add_argument("--keep", action="append", metavar="SECTION",
                    help="partial: leave the kernel's own text section SECTION (.text.NAME) out of the merged .text, "
                         "as its final script sees it without sdtgen (repeatable)")
    ls.add_argument("--path", action="store_true", help="print the file's path instead of its text (not for final)")
    ls.add_argument("-o", "--output", metavar="FILE", help="write the script to FILE")
    ls.set_defaults(func=cmd_linker_script)


def add_arch(sub) -> None:
    from sdtgen import arch as arches

    arch_names = arches.module_names()  # each module is imported only when its architecture is used
    ar = sub.add_parser("arch", help="what sdtgen knows of each architecture (for Makefiles and CI)")
    ar.add_argument("name", nargs="?", choices=arch_names, help="one architecture (default: all)")
    ar.add_argument("--get", choices=ARCH_FIELDS, help="print one field of NAME")
    ar.add_argument("--triple", metavar="TRIPLE", help="print the architecture of a triple ($(CC) -dumpmachine)")
    ar.add_argument("--packages", action="store_true",
                    help="print the Debian packages that build and boot for all of them (compilers, binutils, QEMU)")
    ar.add_argument("--json", action="store_true", help="the registry as one JSON object")
    ar.set_defaults(func=cmd_arch)


def add_include_dir(sub) -> None:
    sub.add_parser("include-dir", help="print the directory holding sdt.h").set_defaults(func=cmd_include_dir)


def add_runtime_dir(sub) -> None:
    sub.add_parser("runtime-dir", help="print the directory holding the runtime's C sources (docs/runtime.md)"
                   ).set_defaults(func=cmd_runtime_dir)


def add_makefile(sub) -> None:
    sub.add_parser("makefile", help="print the path of the Makefile fragment").set_defaults(func=cmd_makefile)


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
            emit_json({"arches": [_arch_record(a) for a in chosen]})
        else:
            rows = [[_text(v) for v in _arch_record(a).values()] for a in chosen]
            print(table(rows, [f.upper() for f in ARCH_FIELDS]))
    return EXIT_OK


def _arch_record(arch) -> dict:
    """What the registry says of one architecture, as `sdtgen arch --json` gives it."""
    t = arch.toolchain
    return {"name": arch.name, "machine": arch.machine, "bits": arch.bits, "triple": t.triple,
            "cross-prefix": t.cross_prefix, "cflags": list(t.cflags), "packages": [t.gcc_package, t.binutils_package],
            "kernel-base": f"{arch.kernel_base:#x}"}


def _text(value) -> str:
    return " ".join(value) if isinstance(value, list) else str(value)


def cmd_include_dir(args: argparse.Namespace) -> int:
    print(package_path("include"))
    return EXIT_OK


def cmd_runtime_dir(args: argparse.Namespace) -> int:
    print(package_path("runtime"))
    return EXIT_OK


def cmd_makefile(args: argparse.Namespace) -> int:
    print(package_path("data", "sdtgen.mk"))
    return EXIT_OK
