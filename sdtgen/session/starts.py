"""The sessions sdtgen's commands start, each a Session over a target the one factory opens
(sdtgen/targets/__init__.py): `boot`, `qemu` and `attach` (trace_session), `record` (record_session) and
`torture` on any target (torture), for the command line, the tests, the bench and `cost` alike. What is checked
here is checked before the kernel starts; the command line only parses and prints what comes back.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterator

from sdtgen.errors import SdtError
from sdtgen.limits import DEFAULT_TIMEOUT, MAX_TIMEOUT
from sdtgen.plaindata import record
from sdtgen.session.reporter import Reporter
from sdtgen.session.session import Session
from sdtgen.targets import ATTACH, EMULATOR, LISTEN, OWN, PROCESS, QEMU, open_target, target_options
from sdtgen.targets.base import Summary
from sdtgen.trace.sink import MergedTrace

# The kinds that SIGTERM and SIGHUP stop as Ctrl-C does while they run, so the kernel is left as it should be
# (QEMU and the process stopped, an attached kernel's probes disarmed, a recording's trace finished); the
# emulator's calls stop on Ctrl-C by their own watchdog.
INTERRUPTIBLE = frozenset({QEMU, ATTACH, LISTEN, PROCESS})


def open_session(kind: str, path: str, reporter: Reporter, *, arm: str = "trap", timeout: float = DEFAULT_TIMEOUT,
                 trace: tuple[str, str] | MergedTrace | None = None, precheck: Callable[[Session], None] | None = None,
                 post_mortem: tuple[str, str] | None = None, relayd: str | None = None, machine: str | None = None,
                 **options) -> Session:
    """A session on the image ``path`` over a target of ``kind`` built with ``options`` (sdtgen.targets's
    defaults for those not given, checked before the image is read). ``timeout``: how long each call may take,
    and a control core's answer. ``machine``: the machine name its trace says (docs/trace.md, "Machines");
    ``relayd``: the URL of a relay daemon the trace streams to, live, from that machine (default_machine_name's
    when None)."""
    check_timeout(timeout)
    chosen = target_options(kind, timeout=timeout, **options)
    machine = machine_option(kind, path, relayd, machine)
    return Session(path, reporter, lambda host: open_target(kind, host, **chosen), arm=arm, timeout=timeout,
                   trace=trace, precheck=precheck, post_mortem=post_mortem, relayd=relayd, machine=machine)


def machine_option(kind: str, path: str, relayd: str | None, name: str | None) -> str | None:
    """--relayd's and --name's checks, before anything starts: the machine's name when streaming to a relay daemon
    (relay_options), --name's checked name alone otherwise."""
    if relayd is not None:
        return relay_options(kind, path, relayd, name)
    if name is not None:
        from sdtgen.trace.model import check_machine_name

        return check_machine_name(name)
    return None


def relay_options(kind: str, path: str, relayd: str, name: str | None) -> str:
    """--relayd's URL checked, and the machine's name (--name, checked; else the host's name and the kind, and a
    QEMU guest's architecture), before the kernel starts."""
    from sdtgen.trace.model import check_machine_name, default_machine_name
    from sdtgen.transport.relayd import parse_relayd_url

    parse_relayd_url(relayd)
    if name is not None:
        return check_machine_name(name)
    command = {EMULATOR: "boot", LISTEN: "record"}.get(kind, kind)  # the kind as the command line names it
    if kind != QEMU:
        return default_machine_name(command)
    from sdtgen.image import Image

    with Image(path) as image:
        return default_machine_name(command, image.arch.name)


def check_timeout(timeout: float) -> float:
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise SdtError("", f"--timeout {timeout:g} is not a positive number of seconds up to {MAX_TIMEOUT:g} "
                       "(a week)", "give e.g. 20, or 0.5")
    return timeout


def termination(kind: str):
    """SIGTERM and SIGHUP as Ctrl-C while a target of ``kind`` runs, when it is one of INTERRUPTIBLE (on the main
    thread: a fleet's machines run on threads of their own, and the fleet's main thread takes the signals)."""
    import threading

    if kind not in INTERRUPTIBLE or threading.current_thread() is not threading.main_thread():
        return contextlib.nullcontext()
    from sdtgen.targets.child import termination_as_interrupt

    return termination_as_interrupt()


@contextlib.contextmanager
def opened_line(serial: str | None, duplex: bool) -> Iterator:
    """The serial line ``serial`` names, open while the session runs (one line if it cannot be, before anything
    runs); None without one."""
    if serial is None:
        yield None
        return
    from sdtgen.targets.serial import open_line

    line = open_line(serial, duplex=duplex)
    try:
        yield line
    finally:
        line.close()


# -- boot, qemu, attach ----------------------------------------------------------------------------------
@record
class Tracing:
    """What `boot`, `qemu` and `attach` share: the actions in order (sdtgen/session/drive.py), the console, the
    trace, the output; ``target`` holds the target's own options (sdtgen.targets.target_options)."""

    image: str
    actions: list
    interactive: bool = False
    as_json: bool = False
    quiet: bool = False
    arm: str = "trap"
    timeout: float = DEFAULT_TIMEOUT
    trace: str | None = None
    trace_format: str | None = None
    interval: float | None = None
    post_mortem: str | None = None  # --post-mortem PATH: the rings' trace after a panic, hang or death
    session: str | None = None  # --session NAME: the host's own session beside the kernel's (docs/sessions.md)
    relayd: str | None = None  # --relayd URL: the trace streamed live to lttng-relayd (docs/live.md)
    name: str | None = None  # --name NAME: the machine's name (the relay session's hostname)


def trace_session(kind: str, t: Tracing, serial: str | None = None, *, reporter: Reporter | None = None,
                  trace_to: MergedTrace | None = None, opened: Callable[[Session], None] | None = None,
                  **target) -> bool:
    """A tracing session over a target of ``kind``: the actions in order, the console, the trace. Whether it
    ended clean (no fault, nothing damaged, every module loaded); an SdtError for what is refused before the
    kernel starts. ``reporter``: where it says what happens (default: stdout and stderr, as ``t`` asks);
    ``trace_to``: the merged trace it is a machine of, when the trace is not its own (a fleet's:
    sdtgen/session/fleet.py);
    ``opened``: given the session once the kernel is up (a fleet counts what it recorded)."""
    from sdtgen.session import drive
    from sdtgen.session.console import read_script
    from sdtgen.targets.base import Halted

    check_timeout(t.timeout)
    drive.check_actions(t.actions)
    interval = check_interval(t.interval, t.interactive, t.actions)
    trace = trace_to or trace_option(t.image, t.trace, t.trace_format)
    post_mortem = post_mortem_option(kind, t.image, t.post_mortem, t.trace)
    scripts = {value: read_script(value) for kind_, value, _ in t.actions if kind_ == "script"}
    files = drive.module_files(t.actions, scripts)  # --module's and the scripts' `module FILE`
    machine_option(kind, t.image, t.relayd, t.name)
    if t.relayd is not None and files:
        raise SdtError("", "--relayd with --module: the stream's metadata is sent at the start, before the module's "
                       "probes are known, so a viewer could not read their events",
                       "leave out --relayd, or trace the kernel's own probes without the module")
    if trace is not None and files:
        raise SdtError("", "--trace with --module: the trace's metadata is written at the start, before the "
                       "module's probes are known, so a reader could not read their events",
                       "leave out --trace (the firings are shown), or trace the kernel's own probes without the module")
    if t.session is not None:
        target["own"] = own_session(kind, t.session, target.get("buffer_size"), target.get("overflow"),
                                    t.interactive or any(k == "aggregate" or (k == "enable" and "/" in v)
                                                         for k, v, _ in t.actions))  # a predicate's program too
    if kind == EMULATOR:
        target["modules"] = bool(files) or t.interactive  # the module area mapped (-i: the console's `module`)
    elif kind == QEMU and files:
        if len(set(files)) > 1:
            raise SdtError("", "QEMU boots with one module (its loader's fw_cfg file)", "give one --module FILE")
        target["module"] = files[0]
    with opened_line(serial, duplex=True) as line, termination(kind):
        if line is not None:
            target["line"] = line
        try:
            session = open_session(kind, t.image, reporter or Reporter(as_json=t.as_json, quiet=t.quiet), arm=t.arm,
                                   timeout=t.timeout, trace=trace, precheck=lambda s: drive.precheck(s, t.actions,
                                                                                                     scripts),
                                   post_mortem=post_mortem, relayd=t.relayd, machine=t.name, **target)
        except Halted:  # the session said why
            return False
        if opened is not None:
            opened(session)
        try:
            drive.drive(session, t.actions, scripts, t.interactive, t.as_json, interval)
        except Halted:
            return False
        finally:
            session.close()
    return not (session.faults or session.damaged or session.refused_modules)


KEEP_SESSION, KEEP_RING = "keep", 64 << 10  # torture --keep's second session, and each CPU's ring of it


def keeping_session():
    """torture --keep's second session: it counts in its aggregation tables, so its rings are small (a kernel's
    session budget holds them: the QEMU fixture's is 2 MiB)."""
    from sdtgen.limits import SESSION_TABLES
    from sdtgen.targets.base import OwnSession
    from sdtgen.transport.geometry import packet_size_for

    return OwnSession(KEEP_SESSION, KEEP_RING, packet_size_for(KEEP_RING), "drop", SESSION_TABLES)


SESSION_NAME = re.compile(r"[A-Za-z0-9_-]{1,15}")  # what the runtime takes (docs/sessions.md: SDT_ERR_NAME)


def own_session(kind: str, name: str, buffer_size: int | None, overflow: str | None, tables: bool):
    """--session NAME's OwnSession, checked before the kernel starts: a target whose runtime has sessions (a control
    core's), a name the runtime takes and not the default session's; each CPU's ring of --buffer-size bytes (its
    packets sized as the default session's), --overflow's policy, and tables when it aggregates."""
    from sdtgen.errors import printable
    from sdtgen.limits import SESSION_TABLES
    from sdtgen.targets import DEFAULTS
    from sdtgen.targets.base import OwnSession
    from sdtgen.trace.model import DEFAULT_SESSION
    from sdtgen.transport.geometry import packet_size_for

    if kind not in (QEMU, ATTACH, PROCESS, EMULATOR):
        raise SdtError("", f"--session opens a session in the kernel's runtime, which the {kind} cannot reach",
                       "use `sdtgen boot`, `qemu` or `attach`, or leave out --session (the default session)")
    if not SESSION_NAME.fullmatch(name) or name == DEFAULT_SESSION:
        raise SdtError("", f"--session {printable(name)!r} is not a session name the runtime takes",
                       "give 1 to 15 letters, digits, '_' or '-', other than 'default' (the kernel's own session)")
    ring = buffer_size or DEFAULTS["buffer_size"]
    return OwnSession(name, ring, packet_size_for(ring), overflow or DEFAULTS["overflow"],
                      SESSION_TABLES if tables else 0)


def list_sessions(image: str, serial: str, timeout: float = DEFAULT_TIMEOUT, as_json: bool = False) -> bool:
    """`sdtgen sessions`: the sessions of the kernel running on ``serial``, listed; False if it could not be asked
    (the session said why)."""
    from sdtgen.targets.base import Halted

    reporter = Reporter(as_json=as_json)
    with opened_line(serial, duplex=True) as line, termination(ATTACH):
        try:
            session = open_session(ATTACH, image, reporter, timeout=timeout, line=line, rings=False)
        except Halted:
            return False
        try:
            reporter.sessions(session.sessions())
        except Halted:
            return False
        finally:
            session.close()
    return True


def check_interval(interval: float | None, interactive: bool, actions: list) -> float | None:
    """--interval SECONDS: a positive number, for aggregations given or to come (the console)."""
    if interval is None:
        return None
    if not 0.01 <= interval <= 86400:
        raise SdtError("", f"--interval {interval:g} is not a number of seconds from 0.01 to 86400")
    if not interactive and not any(kind == "aggregate" for kind, _, _ in actions):
        raise SdtError("", "--interval prints the aggregations, and none is given", "add --aggregate CLAUSES (or -i)")
    return interval


def trace_option(image: str, path: str | None, fmt: str | None) -> tuple[str, str] | None:
    """(path, format) of --trace, checked; the format from the path's extension when not given."""
    from sdtgen.trace.sink import guess_format

    if path is None:
        if fmt is not None:
            raise SdtError("", "--trace-format without --trace writes nothing", "give --trace PATH too")
        return None
    if not path.strip():
        raise SdtError("", "--trace needs a path", "give --trace PATH (a directory for ctf)")
    from sdtgen.atomic import check_distinct

    check_distinct([("image", image), ("trace", path)])
    return path, fmt or guess_format(path) or "ctf"


def post_mortem_option(kind: str, image: str, path: str | None, trace: str | None) -> tuple[str, str] | None:
    """(path, format) of --post-mortem, checked: a target whose machine's memory the host reads, a path apart
    from the image's and the trace's; the format from the extension (.json chrome, .pftrace perfetto, else ctf)."""
    from sdtgen.trace.sink import guess_format

    if path is None:
        return None
    if kind not in (EMULATOR, QEMU):
        raise SdtError("", f"--post-mortem reads the machine's memory, which `{kind}` does not give the host",
                       "use it with `sdtgen boot` or `sdtgen qemu`")
    if not path.strip():
        raise SdtError("", "--post-mortem needs a path", "give --post-mortem PATH (a directory for ctf)")
    from sdtgen.atomic import check_distinct

    check_distinct([("image", image), ("post-mortem trace", path)] + ([("trace", trace)] if trace else []))
    return path, guess_format(path) or "ctf"


# -- record ----------------------------------------------------------------------------------------------
@record(frozen=True)
class Recorded:
    """What a recording collected: packets taken, events, CPUs seen, packets dropped and damaged."""

    packets: int
    events: int
    cpus: int
    dropped: int
    damaged: int


def record_session(image: str, serial: str, trace: str | None, as_json: bool = False, quiet: bool = False,
                   relayd: str | None = None, name: str | None = None, *, reporter: Reporter | None = None,
                   trace_to: MergedTrace | None = None,
                   opened: Callable[[Session], None] | None = None) -> Recorded | None:
    """A session over a kernel that streams by itself on ``serial``: its events shown as they come, its packets
    traced into the CTF directory ``trace`` (or as a machine of ``trace_to``: a fleet's) until the line ends (or
    Ctrl-C), and streamed to the relay daemon ``relayd`` as machine ``name`` when given; None if it never started.
    ``reporter``: where it says what happens (default: stdout and stderr); ``opened``: as trace_session's."""
    from sdtgen.atomic import check_distinct
    from sdtgen.targets.base import Halted

    if trace is not None:
        check_distinct([("image", image), ("trace", trace)])
    machine_option(LISTEN, image, relayd, name)
    reporter = reporter or Reporter(as_json=as_json, quiet=quiet)
    to = trace_to or (None if trace is None else (trace, "ctf"))
    with opened_line(serial, duplex=False) as line, termination(LISTEN):
        try:
            session = open_session(LISTEN, image, reporter, trace=to, relayd=relayd, machine=name,
                                   source=line.chunks(reporter.warning))
        except Halted:  # the session said why
            return None
        if opened is not None:
            opened(session)
        try:
            with contextlib.suppress(KeyboardInterrupt):  # the usual way to end a recording: what came is kept
                session.listen()
            session.finish_trace(interrupted=True)
        finally:
            session.close()
    t = session.last_target
    return Recorded(t.taken, sum(session.hits.values()), len(t.cpus), t.packets.dropped, session.damaged)


# -- torture ---------------------------------------------------------------------------------------------
TORTURE_ARMS = ("trap", "branch", "module")  # --arm of torture: module cycles a module loaded with --module
# torture's own defaults, which its command line reads too: the CPUs that call (one more controls), the toggles,
# how the probes are armed.
TORTURE_CPUS, TORTURE_TOGGLES, TORTURE_ARM = 4, 100, "branch"


def torture(kind: str, path: str, run: str, args: list[int], *, cpus: int = TORTURE_CPUS,
            toggles: int = TORTURE_TOGGLES, seed: int = OWN[EMULATOR]["seed"], timeout: float = DEFAULT_TIMEOUT,
            exhaustive: bool = False, spec: str = "", arm: str = TORTURE_ARM, module: str | None = None,
            serial: str | None = None, qemu_args: list[str] | tuple[str, ...] = (),
            progress: bool = False, keep: str = "") -> Summary | None:
    """``cpus`` CPUs call ``run`` with ``args`` over and over on a target of ``kind`` while one more arms
    (``arm``) and disarms ``spec`` (default: the probes with sites in the function) ``toggles`` times, the
    summary (None: the kernel stopped, and the session said why). ``module``: loaded first (its functions
    callable); arm ``module`` cycles it. ``exhaustive`` (the emulator): every interleaving of every store with
    a fetch instead. ``progress``: the toggles so far on standard error while it runs, when that is a terminal.
    ``keep``: a second session (KEEP_SESSION, the host's own) holds ``keep``'s probes armed throughout and counts
    their firings, while the default session toggles (docs/safety.md)."""
    from sdtgen.targets import max_cpus
    from sdtgen.targets.base import Halted

    check_timeout(timeout)
    most = max_cpus(kind) - 1  # one more CPU controls
    if not 1 <= cpus <= most:
        raise SdtError("", f"--cpus {cpus} is not a number of CPUs from 1 to {most} (one more controls)")
    if qemu_args and kind != QEMU:
        raise SdtError("", "QEMU arguments (--qemu-arg, or after --) are for --target qemu only",
                       "leave them out, or give --target qemu")
    if toggles < 1 and not exhaustive:
        raise SdtError("", f"--toggles {toggles} is not a number of toggles: the test arms and disarms at least "
                       "once", "give 1 or more (the default is 100)")
    if exhaustive and kind != EMULATOR:
        raise SdtError("", "--exhaustive runs in the emulator only (it starts a CPU at every byte of a site)",
                       "leave out --target and --serial")
    cycling = arm == "module"
    if cycling != bool(module and not exhaustive) or (module and kind not in (EMULATOR, QEMU)):
        raise SdtError("", "--arm module cycles a module loaded with --module, in the emulator or on QEMU",
                       "give both --module FILE and --arm module (or --exhaustive with --module)")
    if keep and (module or arm == "module"):
        raise SdtError("", "--keep holds probes in a second session while the torture's arms and disarms them",
                       "leave out --module and --arm module")
    import io

    options: dict = {"cpus": cpus + 1}  # the rest the factory's defaults
    if keep:
        if kind not in (EMULATOR, QEMU, PROCESS, ATTACH):
            raise SdtError("", f"--keep opens a second session, which the {kind} target has not")
        options["own"] = keeping_session()
    if kind == EMULATOR:  # replayable: the seed decides the interleaving and the toggles
        options.update(seed=seed, schedule="seeded", modules=module is not None)
    elif kind == QEMU:
        options.update(qemu_args=qemu_args, module=module)
    # The summary is all it prints. A kernel's problems go to standard error; the emulator's boot, whose lost
    # records the summary's firings count, says nothing.
    reporter = Reporter(as_json=kind == EMULATOR, out=io.StringIO(), quiet=True)
    with opened_line(serial, duplex=True) as line, termination(kind):
        if line is not None:
            options["line"] = line
        try:
            session = open_session(kind, path, reporter, arm="branch" if module else arm, timeout=timeout, **options)
        except Halted:  # the session said why
            return None
        try:
            if module is not None:
                session.load_module(module)
            symbol = run.partition(":")[0]
            if exhaustive:
                with _progress(progress, lambda: f"torture --exhaustive: {symbol}'s sites"):
                    return session.exhaustive(run, args, module=module is not None, keep=keep)
            spec = spec or (session.module_spec() if cycling else session.spec_of(symbol))
            made = [0]
            if kind == EMULATOR:  # it toggles here, one at a time
                status = lambda: f"torture: toggle {made[0]} of {toggles} on {cpus} CPU(s)"  # noqa: E731
            else:  # the kernel toggles on its own CPUs and answers at the end of each batch
                status = lambda: f"torture: the kernel toggles {toggles} times on {cpus} CPU(s)"  # noqa: E731
            with _progress(progress, status, timeout):
                return session.torture(run, args, spec, toggles, module=cycling,
                                       progress=lambda done: made.__setitem__(0, done), keep=keep)
        except Halted:
            return None
        finally:
            session.close()


def _progress(shown: bool, status: Callable[[], str], timeout: float | None = None):
    """The torture's progress line (sdtgen/progress.py): what ``status`` says, the time so far and the time it
    may take; nothing when not ``shown``."""
    from sdtgen.progress import progress_line, seconds

    if not shown:
        return contextlib.nullcontext()
    limit = f" of at most {seconds(timeout)}" if timeout is not None else ""
    return progress_line(lambda elapsed: f"{status()}, {seconds(elapsed)}{limit}")
