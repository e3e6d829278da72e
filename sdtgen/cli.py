"""The sdtgen command line: argument parsing and dispatch only (each command's options and what it prints are in
sdtgen/commands/, what it does in the library).

Exit status: 0 success, 1 a check failed, 2 usage or input error. Each
subcommand imports only what it needs: sdtgen runs inside every kernel build.
"""

from __future__ import annotations

import argparse
import sys

from sdtgen import __version__
from sdtgen.commands import EXIT_OK, EXIT_USAGE
from sdtgen.errors import SdtError

# Every command, in the order --help lists them, and the module of sdtgen/commands/ that builds and runs it.
COMMANDS = ("scan", "gen", "check", "probes", "cost", "linker-script", "arch", "boot", "torture", "qemu", "process",
            "attach", "record", "fleet", "sessions", "include-dir", "runtime-dir", "makefile")
HOME = {"scan": "build", "gen": "build", "check": "build", "probes": "build", "cost": "build",
        "linker-script": "tools", "arch": "tools", "include-dir": "tools", "runtime-dir": "tools", "makefile": "tools",
        "boot": "tracing", "torture": "tracing", "qemu": "tracing", "process": "tracing", "attach": "tracing",
        "record": "tracing", "fleet": "tracing", "sessions": "tracing"}
QEMU_ARGS = frozenset({"qemu", "torture"})  # commands whose words after -- are QEMU's (as --qemu-arg=WORD each)


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


class _Subcommands:
    """The subparsers' action, keeping each subcommand's parser by name (who refuses its stray arguments)."""

    def __init__(self, sub) -> None:
        self.sub = sub
        self.parsers: dict[str, argparse.ArgumentParser] = {}

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        self.parsers[name] = parser = self.sub.add_parser(name, **kwargs)
        return parser


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command (``only`` None: --help), of one command, or of none (``only`` "": --version)."""
    from importlib import import_module

    p = _Parser(prog="sdtgen", description="Zero-cost SDT probes for kernel-style C builds.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Each command's options are built only when it is the one this run asked for: building every command's
    # costs more than a small scan.
    sub = _Subcommands(p.add_subparsers(dest="command", required=True, parser_class=_Parser))
    p.subcommands = sub.parsers  # who refuses a subcommand's stray arguments
    for name in COMMANDS if only is None else (only,) if only else ():
        builder = getattr(import_module(f"sdtgen.commands.{HOME[name]}"), f"add_{name.replace('-', '_')}")
        builder(sub)
    return p


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
        first = argv[0] if argv else None
        only = first if first in COMMANDS else "" if first == "--version" else None
        if only in NO_CYCLES and gc.isenabled():
            gc.disable()
            paused = True
        rest: list[str] = []
        if only in QEMU_ARGS and "--" in argv:  # everything after -- is QEMU's
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
