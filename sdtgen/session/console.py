"""Boot commands: one interpreter for --script files and the interactive console (-i)."""

from __future__ import annotations

import cmd
import os
import shlex
import stat
import sys

from sdtgen.calls import parse_arg, parse_int
from sdtgen.errors import SdtError, printable
from sdtgen.limits import MAX_LINE, MAX_SCRIPT
from sdtgen.session.reporter import Stopped
from sdtgen.session.session import Session

HELP = """commands:
  list [SPEC]          probes with their sites and whether they are armed
  enable SPEC [/PRED/] arm every probe matching provider:module:function:name (globs, empty fields match all);
                       with /PRED/, only the firings for which PRED holds are recorded
  disable SPEC         disarm them (the sites go back to NOPs)
  run SYMBOL[:TYPE] [ARG...] [@CPU]
                       call a function of the image (on every CPU, or CPU N with @N); an ARG
                       is an integer, or str:TEXT for a string; TYPE (long, int, uint, ulong,
                       str, void; default long) says how to read its result
  action SPEC FUNCTION  call FUNCTION in the guest with the probe's arguments when SPEC fires
                       (and enable SPEC's probes; the emulated boot only)
  arm trap|branch      how probes are armed from now on (armed ones are rearmed): a breakpoint
                       the host handles, or a call to the probe's recorder in the guest
  module FILE          load the module FILE, as --module does (boot: relocated into the module area;
                       qemu: the one given at boot); the specs enabled so far arm it; a load refused
                       is said and the session goes on
  unload NAME          unload module NAME (its sites disarmed; a later module FILE loads it again)
  stats                firings per probe so far, and records lost to a full buffer
  aggregate CLAUSES    aggregate in the kernel from now on: provider:module:function:name
                       [/predicate/] @name[keys] = count()|sum(x)|min(x)|max(x)|avg(x)|
                       quantize(x)|lquantize(x, low, high, step) (docs/aggregations.md)
  printa               the aggregations so far, merged across CPUs, as dtrace's printa prints them
  clear                the aggregations start again from nothing (dtrace's clear)
  help                 this text
  quit                 leave
Ctrl-C stops a running function and comes back here."""

__all__ = ["Console", "parse_int", "run_script"]


class Console(cmd.Cmd):
    """Commands over a Session. ``strict``: an error stops (scripts); otherwise it is printed."""

    prompt = "sdt> "
    intro = ("sdtgen console: list, enable, disable, run, action, arm, module, unload, stats, aggregate, printa, "
             "clear, help, quit (tab completes probe names)")

    def __init__(self, session: Session, strict: bool = False, stdin=None) -> None:
        super().__init__(stdin=stdin)
        self.session = session
        self.strict = strict
        self.use_rawinput = stdin is None and sys.stdin.isatty()
        if not self.use_rawinput or session.reporter.as_json:
            self.intro = None
        if not self.use_rawinput or (session.reporter.as_json and not sys.stdout.isatty()):
            self.prompt = ""  # piped --json output holds JSON lines only

    def commands(self) -> list[str]:
        return sorted({name[3:] for name in self.get_names() if name.startswith("do_") and name != "do_EOF"})

    # -- plumbing -------------------------------------------------------------------
    def cmdloop(self, intro=None) -> None:
        """The console: Ctrl-C at the prompt drops the line being typed, as a shell does."""
        while True:
            try:
                super().cmdloop(intro)
                return
            except KeyboardInterrupt:
                print("^C" if self.use_rawinput else "", flush=True)
                self.intro = intro = None

    def onecmd(self, line: str) -> bool:
        if len(line) > MAX_LINE:
            return self._failed(SdtError("", f"a command of {len(line)} characters is longer than the "
                                         f"{MAX_LINE} allowed", "split it into shorter commands"))
        try:
            return super().onecmd(line)
        except SdtError as e:
            return self._failed(e)
        except Stopped:
            if self.strict:
                raise
            return False  # the guest was stopped and where it was reported: back to the prompt
        except KeyboardInterrupt:
            if self.strict:
                raise
            print("^C", flush=True)
            return False

    def _failed(self, e: SdtError) -> bool:
        if self.strict:
            raise e
        print(e, file=sys.stderr, flush=True)
        return False

    def emptyline(self) -> bool:
        return False

    def default(self, line: str) -> bool:
        if line.lstrip().startswith("#"):
            return False
        raise SdtError("", f"unknown command {printable(line.split()[0])!r}",
                       f"use one of: {', '.join(self.commands())}")

    def preloop(self) -> None:
        if self.use_rawinput:
            try:
                import readline

                readline.set_completer_delims(" \t\n")  # probe names contain ':' and '-'
            except ImportError:
                pass

    # -- commands -------------------------------------------------------------------
    def do_list(self, arg: str) -> bool:
        """list [SPEC]: probes with their site counts and whether they are armed."""
        for n, p in enumerate(self.session.list_probes(arg.strip()), 1):
            self.session.reporter.probe(n, p.spec, p.sites, p.armed > 0)
        return False

    def do_enable(self, arg: str) -> bool:
        """enable SPEC [/PREDICATE/]: arm every probe matching SPEC (recording the firings PREDICATE passes)."""
        spec = arg.strip() if "/" in arg else self._one(arg, "enable SPEC")
        n = self.session.enable(spec, source="enable")
        if not self.strict:
            self.session.reporter.armed("armed", spec, n)
        return False

    def do_disable(self, arg: str) -> bool:
        """disable SPEC: disarm every probe matching SPEC."""
        spec = self._one(arg, "disable SPEC")
        n = self.session.disable(spec)
        if not self.strict:
            self.session.reporter.armed("disarmed", spec, n)
        return False

    def do_run(self, arg: str) -> bool:
        """run SYMBOL [ARG...]: call a function with integer arguments."""
        try:
            words = shlex.split(arg)
        except ValueError as e:
            raise SdtError("", f"cannot split the run command: {e}", "close the quotation") from None
        if not words:
            raise SdtError("", "run needs a function name", "run SYMBOL [ARG...] [@CPU]")
        cpu = parse_int(words.pop()[1:]) if len(words) > 1 and words[-1].startswith("@") else None
        self.session.run(words[0], [parse_arg(w) for w in words[1:]], cpu)
        return False

    def do_action(self, arg: str) -> bool:
        """action SPEC FUNCTION: call FUNCTION in the guest when SPEC fires."""
        words = arg.split()
        if len(words) != 2:
            raise SdtError("", "expected: action SPEC FUNCTION")
        self.session.add_action(*words)
        return False

    def do_arm(self, arg: str) -> bool:
        """arm trap|branch: how probes are armed from now on."""
        mode = self._one(arg, "arm trap|branch")
        self.session.set_arm(mode)
        if not self.strict:
            self.session.reporter.text("arm", f"arming with {mode}")
        return False

    def do_module(self, arg: str) -> bool:
        """module FILE: load a module, as --module does (a refused load is said; the session goes on)."""
        self.session.load_module_or_say(self._one(arg, "module FILE", "a module file"))
        return False

    def do_unload(self, arg: str) -> bool:
        """unload NAME: unload the module NAME."""
        self.session.unload_module(self._one(arg, "unload NAME", "a module name"))
        return False

    def do_sessions(self, arg: str) -> bool:
        """sessions: the sessions the kernel has open (name, policy, CPUs, rings, events, lost, specs)."""
        self.session.reporter.sessions(self.session.sessions())
        return False

    def do_stats(self, arg: str) -> bool:
        """stats: firings per probe so far."""
        self.session.stats()
        return False

    def do_aggregate(self, arg: str) -> bool:
        """aggregate CLAUSES: aggregate in the kernel from now on."""
        if not arg.strip():
            raise SdtError("", "aggregate needs clauses",
                           "aggregate provider:module:function:name [/predicate/] @name[keys] = count()")
        n = self.session.aggregate(arg.strip(), source="aggregate")
        if not self.strict:
            self.session.reporter.armed("aggregating", arg.strip(), n)
        return False

    def do_printa(self, arg: str) -> bool:
        """printa: the aggregations so far."""
        self._aggregating("printa")
        self.session.printa()
        return False

    def do_clear(self, arg: str) -> bool:
        """clear: the aggregations start again."""
        self._aggregating("clear")
        self.session.clear()
        return False

    def _aggregating(self, what: str) -> None:
        if not self.session.aggregating:
            raise SdtError("", f"{what}: nothing is aggregated", "aggregate CLAUSES first (or --aggregate)")

    def do_quit(self, arg: str) -> bool:
        """quit: leave the console."""
        return True

    do_exit = do_quit

    def do_EOF(self, arg: str) -> bool:
        if self.use_rawinput:
            print()
        return True

    def do_help(self, arg: str) -> bool:
        self.session.reporter.text("help", HELP)
        return False

    # -- completion -----------------------------------------------------------------
    def _complete_spec(self, text: str) -> list[str]:
        return [p.spec for p in self.session.probes if p.spec.startswith(text)]

    def complete_enable(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete_spec(text)

    complete_disable = complete_enable
    complete_list = complete_enable

    def complete_run(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return [f for f in self.session.functions() if f.startswith(text)]

    @staticmethod
    def _one(arg: str, usage: str, what: str = "one probe spec") -> str:
        words = arg.split()
        if len(words) != 1:
            raise SdtError("", f"expected {what}: {usage}")
        return words[0]


def read_script(path: str) -> list[str]:
    """A script's lines: a regular file, or standard input for ``-``, of at most MAX_SCRIPT bytes of UTF-8."""
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_SCRIPT + 1)
        else:
            # O_NONBLOCK: opening a FIFO must not wait for a writer; only a regular file is read.
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with open(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise SdtError(path, "is not a regular file", "give a script file, or - for standard input")
                data = f.read(MAX_SCRIPT + 1)
    except OSError as e:
        raise SdtError(name, f"cannot read script: {e.strerror}") from None
    if len(data) > MAX_SCRIPT:
        raise SdtError(name, f"is longer than the {MAX_SCRIPT} bytes a script may have", "split the script")
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise SdtError(f"{name}:{line}", f"is not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})",
                       "save the script as UTF-8") from None


def run_script(session: Session, path: str, lines: list[str] | None = None) -> None:
    """Run a script's commands in order (``lines``, when already read); the first error stops it, naming
    file and line."""
    lines = read_script(path) if lines is None else lines
    name = "<stdin>" if path == "-" else path
    console = Console(session, strict=True, stdin=sys.stdin)
    for number, line in enumerate(lines, 1):
        try:
            if console.onecmd(line.strip()):
                return
        except SdtError as e:
            raise SdtError(f"{name}:{number}", e.what, e.fix, e.place) from None
