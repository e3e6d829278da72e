"""What `boot`, `qemu` and `attach` do with a session, the same for each: the command line's actions in
order (--enable, --disable, --run with its --arg and --cpu, --script, --action, --aggregate), then the
console (-i), then the trace put in place, the aggregations printed and, with --json, the stats.

An action is a plain tuple: (kind, value, extra), where a run's extra is ``Call`` and an aggregate's
``Prepared`` (its script compiled before the kernel starts).
"""

from __future__ import annotations

import contextlib
import threading

from sdtgen.calls import parse_arg
from sdtgen.errors import SdtError, printable
from sdtgen.plaindata import factory, record
from sdtgen.session.session import filtered


@record
class Call:
    """A --run's arguments as given (--arg) and the CPU it runs on (--cpu; None: every CPU)."""

    args: list[str] = factory(list)
    cpu: int | None = None

    def values(self) -> list[int | str]:
        return [parse_arg(a) for a in self.args]


def check_actions(actions: list) -> None:
    """What can be checked without the image: --action's SPEC=FUNCTION, each run's arguments."""
    for kind, value, extra in actions:
        if kind == "action" and "=" not in value:
            raise SdtError("", f"--action {value!r} needs SPEC=FUNCTION")
        if kind == "run":
            extra.values()


def module_files(actions: list, scripts: dict[str, list[str]]) -> list[str]:
    """Every module FILE the session may load: each --module's, and each `module FILE` line of a --script (both
    are Session.load_module: the target maps its module area, or boots with the module, for either)."""
    files = []
    for kind, value, _ in actions:
        if kind == "module":
            files.append(value)
        elif kind == "script":
            files += [w[1] for w in (line.split() for line in scripts.get(value, [])) if len(w) == 2 and
                      w[0] == "module"]
    return files


def precheck(session, actions: list, scripts: dict[str, list[str]] | None = None) -> None:
    """Every --run, --enable, --disable and --action checked against the image, before the kernel starts (those
    after a --module, which may name the module's, when they are carried out; a spec, which may name a module's
    probes before it is loaded by --module or a script's `module`, then too); every module file readable."""
    from sdtgen.modlink import check_module_object

    files = module_files(actions, scripts or {})
    for path in files:  # what the load would refuse of the file itself, before the kernel starts
        check_module_object(path, session.image.elf.machine, session.image.arch.name)
    modules = bool(files)
    for kind, value, extra in actions:
        if kind == "module":
            break
        if kind == "run":
            session.check_run(value, extra.values())
            if extra.cpu is not None and extra.cpu < 0:
                raise SdtError("", f"--cpu {extra.cpu} is not a CPU number")
        elif kind == "enable" and filtered(value):
            extra.compiled = session.compile_filter(value)
        elif kind in ("enable", "disable") and not modules:
            session.check_spec(value)
        elif kind == "action":
            spec, _, symbol = value.partition("=")
            session.check_spec(spec)
            session.check_function(symbol)
        elif kind == "aggregate":
            extra.compiled = session.compile_aggregate(value)


def perform(session, kind: str, value: str, extra) -> None:
    """One --enable, --disable, --run or --action of the command line."""
    if kind == "enable":
        session.enable(value, extra.compiled if extra is not None else None)
    elif kind == "disable":
        session.disable(value)
    elif kind == "run":
        session.run(value, extra.values(), extra.cpu)
    elif kind == "action":
        spec, _, symbol = value.partition("=")
        session.add_action(spec, symbol)
    elif kind == "module":
        session.load_module_or_say(value)
    elif kind == "unload":
        session.unload_module(value)
    elif kind == "aggregate":
        session.aggregate(value, extra.compiled)
    elif kind == "sessions":
        session.reporter.sessions(session.sessions())
    elif kind == "take-snapshot":
        session.take_snapshot(value)
    elif kind == "snapshot":
        session.read_snapshot(*value)
    else:
        raise AssertionError(kind)


class Ticker:
    """--interval: the merged aggregations printed every ``seconds`` from a thread of their own, between the
    session's commands (the target carries one at a time), while the kernel runs."""

    def __init__(self, session, seconds: float) -> None:
        self.session, self.seconds = session, seconds
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sdtgen-interval", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(self.seconds):
            if self.session.halted or self.session.target is None:
                return
            try:
                self.session.printa()
            except Exception:  # the session said what stopped the kernel; the main thread ends on it
                return

    def wait(self) -> None:
        """Until Ctrl-C (or SIGTERM), or a kernel that stopped: the kernel runs, its aggregations printed."""
        while self.thread.is_alive():
            self.thread.join(0.5)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def late_aggregates(actions: list) -> list[str]:
    """The --aggregate clauses no --run follows (none when a --script may hold runs of its own)."""
    if any(kind == "script" for kind, _, _ in actions):
        return []
    runs = [k for k, (kind, _, _) in enumerate(actions) if kind == "run"]
    last = runs[-1] if runs else -1
    return [value for k, (kind, value, _) in enumerate(actions) if kind == "aggregate" and k > last]


class BetweenCommands:
    """Every ``seconds``, ``work`` done on the session's target while no command holds it (the target's lock taken
    without waiting: a command reads what the kernel sends itself meanwhile), on a thread of its own that ends with
    the kernel. The console's Idle and live streaming's flush (sdtgen/session/live.py) are such work."""

    name = "sdtgen-between"

    def __init__(self, session, seconds: float) -> None:
        self.session, self.seconds = session, seconds
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def takes(self, target) -> bool:
        """Whether ``target`` has what the work needs."""
        return True

    def work(self, target) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        s = self.session
        while not self.done.wait(self.seconds):
            target = s.target
            if s.halted or target is None or not self.takes(target):
                return
            if not s._target_lock.acquire(blocking=False):  # a command runs: it reads what the kernel sends
                continue
            try:
                if self.done.is_set():
                    return
                # Shown under the target's lock: a command's packets read meanwhile would otherwise be given out
                # ahead of earlier events this work read.
                self.work(target)
            except Exception:  # the kernel stopped: the next command (or the end) says so
                return
            finally:
                s._target_lock.release()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


class Idle(BetweenCommands):
    """While the console waits for its user, what the kernel sends is read every ``seconds`` (the target's idle: the
    line, or the shared RAM) and shown as it arrives, between the session's commands (docs/cli.md)."""

    name = "sdtgen-idle"

    def __init__(self, session, seconds: float = 0.05) -> None:
        super().__init__(session, seconds)

    def takes(self, target) -> bool:
        from sdtgen.targets.base import IDLE

        return IDLE in target.capabilities

    def work(self, target) -> None:
        target.idle(self.seconds)
        self.session._emit_pending()


def drive(session, actions: list, scripts: dict[str, list[str]], interactive: bool, as_json: bool,
          interval: float | None = None) -> None:
    """The actions, the console, the trace; Ctrl-C (or a kernel that stopped) keeps what was recorded, as
    DTrace's and LTTng's sessions do, and is raised on. With ``interval``, the aggregations are printed every
    ``interval`` seconds meanwhile, and without the console the session runs until Ctrl-C, which then ends it
    as dtrace's ends: the last printa, and no error."""
    from sdtgen.session.console import Console, run_script
    from sdtgen.session.reporter import Stopped
    from sdtgen.targets.base import Halted

    if not interactive and interval is None:
        for text in late_aggregates(actions):
            session.reporter.warning(f"--aggregate {printable(text)!r} comes after the last --run: it sees only what "
                                     "the kernel does in the moment before the session ends; put it before the "
                                     "--run it should see, or add --interval SECONDS or -i")
    ticker = Ticker(session, interval) if interval else None
    try:
        try:
            for kind, value, extra in actions:
                if kind == "script":
                    run_script(session, value, scripts[value])
                else:
                    perform(session, kind, value, extra)
        except SdtError:
            # A refused line of a --script (or an action refused as it ran) ends the session, as a script's first
            # error does: its later lines may need the one refused. What was aggregated until then is printed
            # first, as on Ctrl-C, then the error.
            if ticker is not None:
                ticker.stop()
            if not session.halted:
                with contextlib.suppress(SdtError, Stopped, KeyboardInterrupt, Halted):
                    session.printa()
            raise
        if interactive:
            idle = Idle(session)
            try:
                Console(session).cmdloop()
            finally:
                idle.stop()
        elif ticker is not None:
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how the session ends: as dtrace's, exit 0
                ticker.wait()
            if session.halted:
                raise Halted("the kernel stopped")
    except (Stopped, KeyboardInterrupt, Halted):
        if ticker is not None:
            ticker.stop()
        with contextlib.suppress(SdtError, Stopped, KeyboardInterrupt, Halted):
            session.leave()
        session.finish_trace(interrupted=True)
        if not session.halted:  # as dtrace does on Ctrl-C: what was aggregated is printed
            with contextlib.suppress(Stopped, KeyboardInterrupt, Halted):
                session.printa()
        raise
    finally:
        if ticker is not None:
            ticker.stop()
    session.leave()  # an attached kernel's probes disarmed first: it records nothing after the last drain
    session.drain()  # what each CPU still holds in its open packet, closed and read before the session ends
    session.finish_trace()
    session.printa()
    if as_json:
        session.stats()
