"""Boot commands: one interpreter for --script files and the interactive console (-i)."""

from __future__ import annotations

import cmd
import shlex
import sys

from sdtgen.boot.session import BootSession
from sdtgen.errors import SdtError

HELP = """commands:
  list [SPEC]          probes with their sites and whether they are armed
  enable SPEC          arm every probe matching provider:module:function:name (globs, empty fields match all)
  disable SPEC         disarm them (the sites go back to NOPs)
  run SYMBOL[:TYPE] [ARG...]
                       call a function of the image with integer arguments; TYPE (long, int,
                       uint, ulong, str, void; default long) says how to read its result
  action SPEC FUNCTION  call FUNCTION in the guest with the probe's arguments when SPEC fires
  stats                firings per probe so far
  quit                 leave"""


def parse_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise SdtError("", f"{text!r} is not an integer", "give decimal, 0x hex or negative numbers") from None


class Console(cmd.Cmd):
    """Commands over a BootSession. ``strict``: an error stops (scripts); otherwise it is printed."""

    prompt = "sdt> "
    intro = "sdtgen boot console: list, enable, disable, run, stats, quit (tab completes probe names)"

    def __init__(self, session: BootSession, strict: bool = False, stdin=None) -> None:
        super().__init__(stdin=stdin)
        self.session = session
        self.strict = strict
        self.use_rawinput = stdin is None and sys.stdin.isatty()
        if not self.use_rawinput:
            self.prompt = ""
            self.intro = None

    # -- plumbing -------------------------------------------------------------------
    def onecmd(self, line: str) -> bool:
        try:
            return super().onecmd(line)
        except SdtError as e:
            if self.strict:
                raise
            print(e, file=sys.stderr)
            return False

    def emptyline(self) -> bool:
        return False

    def default(self, line: str) -> bool:
        if line.lstrip().startswith("#"):
            return False
        raise SdtError("", f"unknown command {line.split()[0]!r}", "use list, enable, disable, run, stats or quit")

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
        rt = self.session.runtime
        wanted = {s.probe.spec for s in rt.matching(arg.strip())} if arg.strip() else None
        armed = rt.armed_probes()
        counts: dict[str, int] = {}
        for s in rt.sites.values():
            counts[s.probe.spec] = counts.get(s.probe.spec, 0) + 1
        for p in rt.probes:
            if wanted is None or p.spec in wanted:
                state = "armed" if p.spec in armed else "-"
                print(f"{p.id + 1:4d}  {p.spec:40s} {counts[p.spec]:3d} site(s)  {state}")
        return False

    def do_enable(self, arg: str) -> bool:
        """enable SPEC: arm every probe matching SPEC."""
        n = self.session.enable(self._one(arg, "enable SPEC"))
        if not self.strict:
            print(f"armed {n} site(s)")
        return False

    def do_disable(self, arg: str) -> bool:
        """disable SPEC: disarm every probe matching SPEC."""
        n = self.session.disable(self._one(arg, "disable SPEC"))
        if not self.strict:
            print(f"disarmed {n} site(s)")
        return False

    def do_run(self, arg: str) -> bool:
        """run SYMBOL [ARG...]: call a function with integer arguments."""
        words = shlex.split(arg)
        if not words:
            raise SdtError("", "run needs a function name", "run SYMBOL [ARG...]")
        self.session.run(words[0], [parse_int(w) for w in words[1:]])
        return False

    def do_action(self, arg: str) -> bool:
        """action SPEC FUNCTION: call FUNCTION in the guest when SPEC fires."""
        words = arg.split()
        if len(words) != 2:
            raise SdtError("", "expected: action SPEC FUNCTION")
        self.session.add_action(*words)
        return False

    def do_stats(self, arg: str) -> bool:
        """stats: firings per probe so far."""
        self.session.stats()
        return False

    def do_quit(self, arg: str) -> bool:
        """quit: leave the console."""
        return True

    do_exit = do_quit

    def do_EOF(self, arg: str) -> bool:
        if self.use_rawinput:
            print()
        return True

    def do_help(self, arg: str) -> bool:
        print(HELP)
        return False

    # -- completion -----------------------------------------------------------------
    def _complete_spec(self, text: str) -> list[str]:
        return [p.spec for p in self.session.runtime.probes if p.spec.startswith(text)]

    def complete_enable(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete_spec(text)

    complete_disable = complete_enable
    complete_list = complete_enable

    def complete_run(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return [f for f in self.session.functions() if f.startswith(text)]

    @staticmethod
    def _one(arg: str, usage: str) -> str:
        words = arg.split()
        if len(words) != 1:
            raise SdtError("", f"expected one probe spec: {usage}")
        return words[0]


def run_script(session: BootSession, path: str) -> None:
    """Run a script's commands in order; the first error stops it, naming file and line."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise SdtError(path, f"cannot read script: {e.strerror}") from None
    console = Console(session, strict=True, stdin=sys.stdin)
    for number, line in enumerate(lines, 1):
        try:
            if console.onecmd(line.strip()):
                return
        except SdtError as e:
            raise SdtError(f"{path}:{number}", e.what, e.fix, e.place) from None
