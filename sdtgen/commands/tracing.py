"""The tracing commands: boot, torture, qemu, attach, record and sessions (docs/cli.md). Each parses its options into
what the session takes (sdtgen/session/starts.py: the checks, the target, the session) and prints what comes back."""

from __future__ import annotations

import argparse

from sdtgen.commands import EXIT_FAIL, EXIT_OK, emit_json, int_arg
from sdtgen.errors import printable
from sdtgen.limits import DEFAULT_TIMEOUT, MAX_BUFFER, MIN_BUFFER
from sdtgen.targets import DEFAULTS, EMULATOR, OWN, QEMU  # the one set of defaults, the factory's


def add_boot(sub) -> None:
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
    b.add_argument("--cpus", type=int, default=DEFAULTS["cpus"], metavar="N",
                   help="run N CPUs on the guest's memory; each --run calls the function on all of them")
    b.add_argument("--schedule", choices=("parallel", "seeded"), default=OWN[EMULATOR]["schedule"],
                   help="parallel: each CPU on a host thread of its own (the default); seeded: interleaved in "
                        "instruction quanta a seed decides, replayable")
    b.add_argument("--seed", type=int, default=OWN[EMULATOR]["seed"], metavar="S",
                   help="the seed of the seeded schedule")
    _add_post_mortem(b, "a call faults or does not return")
    b.set_defaults(func=cmd_boot, actions=None)


def add_torture(sub) -> None:
    t = sub.add_parser("torture", help="call a function on N CPUs while another CPU arms and disarms its probes "
                                      "through the image's runtime")
    t.add_argument("image", help="the linked kernel image (with the table `sdtgen gen` wrote and the runtime); "
                                 "with --target process, the program")
    from sdtgen.session.starts import TORTURE_ARM, TORTURE_ARMS, TORTURE_CPUS, TORTURE_TOGGLES
    from sdtgen.targets import PROCESS

    t.add_argument("--run", action=_Ordered, required=True, metavar="SYMBOL[:TYPE]",
                   help="the function every CPU calls over and over; TYPE (long, int, ...) reads its result")
    t.add_argument("--arg", action=_Ordered, metavar="N",
                   help="an argument of the preceding --run, an integer (repeat for each, in order)")
    t.add_argument("--cpus", type=int, default=TORTURE_CPUS, metavar="N",
                   help=f"how many CPUs call it (default {TORTURE_CPUS})")
    t.add_argument("--toggles", type=int, default=TORTURE_TOGGLES, metavar="K",
                   help=f"how many times the control CPU arms or disarms SYMBOL's probes (default {TORTURE_TOGGLES})")
    t.add_argument("--spec", default="", metavar="SPEC",
                   help="the probes to arm and disarm (default: those with sites in SYMBOL)")
    t.add_argument("--keep", default="", metavar="SPEC",
                   help="a second session holds SPEC's probes armed throughout and counts their firings while the "
                        "torture's session arms and disarms: none may be lost (docs/safety.md)")
    t.add_argument("--arm", choices=TORTURE_ARMS, default=TORTURE_ARM,
                   help=f"how they are armed (default {TORTURE_ARM}); module: with --module, the spec stays enabled "
                        "and the control CPU unloads and loads the module in turn, --toggles times")
    t.add_argument("--module", metavar="FILE", help="in the emulator: load the module FILE first (as `boot --module`); "
                   "--run may name its functions")
    t.add_argument("--target", choices=(EMULATOR, QEMU, PROCESS), default=EMULATOR,
                   help="where: the emulator (the default: it checks every instruction a CPU fetches in a site), "
                        "QEMU with --cpus + 1 vCPUs, or the image as a Linux process with --cpus + 1 threads")
    t.add_argument("--serial", metavar="LINE", help="instead: a kernel already running, attached over LINE "
                   "(as `sdtgen attach`)")
    t.add_argument("--qemu-arg", action="append", metavar="ARG",
                   help="with --target qemu: an argument for QEMU (repeat for each; or give them all after --)")
    t.add_argument("--exhaustive", action="store_true",
                   help="instead: at every store the runtime makes to SYMBOL's sites, start another CPU at every "
                        "instruction boundary of the site, in every order the store's bytes can land (emulator)")
    t.add_argument("--seed", type=int, default=OWN[EMULATOR]["seed"], metavar="S",
                   help="the seed of the interleaving and the toggles")
    t.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"stop toggling after this long, and say so (default {DEFAULT_TIMEOUT:g})")
    t.add_argument("--json", action="store_true", help="the summary as one JSON object")
    t.set_defaults(func=cmd_torture, actions=None)


def add_qemu(sub) -> None:
    q = sub.add_parser("qemu", help="boot a kernel that links the runtime's control core in QEMU, with its vCPUs "
                       "in parallel; arm probes and run functions over its serial line")
    _add_run_options(q, "(a breakpoint the kernel's sdt_trap handles; the default)")
    from sdtgen.targets.qemu import MAX_CPUS, TRANSPORTS

    q.add_argument("--cpus", type=int, default=DEFAULTS["cpus"], metavar="N",
                   help=f"QEMU's -smp (1 to {MAX_CPUS}); each --run calls the function on every vCPU at once")
    q.add_argument("--qemu-arg", action="append", metavar="ARG",
                   help="an argument for QEMU (repeat for each; or give them all after --): memory (-m), -bios, "
                        "disks; the user's replace sdtgen's own")
    q.add_argument("--transport", choices=TRANSPORTS, default=OWN[QEMU]["transport"],
                   help="how packets reach the host: read in the machine's RAM, which QEMU shares with sdtgen "
                        "(the default, where the kernel says where its rings are), or sent on the serial line")
    q.add_argument("--module", action=_Ordered, metavar="FILE",
                   help="give the kernel's loader the module FILE (relocated into its sdt_module_area, as a fw_cfg "
                        "file) and load it at this point (`module load`); the specs enabled so far arm it")
    q.add_argument("--unload", action=_Ordered, metavar="NAME", help="unload module NAME at this point (`module "
                   "unload`: the loader keeps its memory, a later --module of the same FILE loads it again)")
    _add_post_mortem(q, "the kernel panics, does not answer in time, or its machine ends")
    q.set_defaults(func=cmd_qemu, actions=None)


def add_process(sub) -> None:
    p = sub.add_parser("process", help="run a program that links the runtime and the hosted platform's main as a "
                       "Linux process, its threads the CPUs, through its control core: arm probes, run functions, "
                       "trace")
    _add_run_options(p, "(the kernel's sdt_trap, the hosted platform's SIGTRAP handler; the default)",
                     "the program (built as fixtures/process builds kernel-proc: the runtime, its control core and "
                     "the hosted platform with its main)")
    from sdtgen.targets.process import MAX_CPUS

    p.add_argument("--cpus", type=int, default=DEFAULTS["cpus"], metavar="N",
                   help=f"the program's threads that are CPUs (1 to {MAX_CPUS}); each --run calls the function on "
                        "all of them at once")
    p.set_defaults(func=cmd_process, actions=None)


def add_attach(sub) -> None:
    at = sub.add_parser("attach", help="drive a kernel that is already running (a board's UART, a QEMU you "
                        "started) through its control core: arm probes, run functions, trace")
    at.add_argument("--serial", required=True, action="append", metavar="LINE",
                    help="tcp:HOST:PORT (QEMU's -serial tcp:HOST:PORT,server=on), a pty or tty device, or the "
                         "base path of a FIFO pair BASE.in/BASE.out (QEMU's -serial pipe:BASE); several: a machine "
                         "each, the same actions on each at once (as `sdtgen fleet`), named after its line")
    _add_run_options(at, "(a breakpoint the kernel's sdt_trap handles; the default)")
    at.set_defaults(func=cmd_attach, actions=None)


def add_record(sub) -> None:
    rc = sub.add_parser("record", help="collect the packets a kernel streams on a serial line (sdt_serial_drain) "
                        "into a CTF trace, showing their events as they come")
    rc.add_argument("image", help="the linked kernel image: its probe descriptors describe the events (the trace's "
                    "metadata)")
    rc.add_argument("--serial", required=True, action="append", metavar="LINE",
                    help="tcp:HOST:PORT (where QEMU's serial port listens), or the path of a pty, a tty device, "
                         "a FIFO or a capture file; several: a machine each, recorded at once (as `sdtgen fleet`), "
                         "named after its line")
    rc.add_argument("--trace", required=True, metavar="DIR", help="the CTF trace directory: one stream a CPU "
                    "(several --serial: DIR/NAME/, a trace a machine)")
    rc.add_argument("-q", "--quiet", action="store_true", help="do not show each event (they are counted and traced)")
    rc.add_argument("--json", action="store_true",
                    help="the kernel's lines, the events and the summary as JSON lines (as `boot --json` prints them)")
    _add_relay_options(rc)
    rc.set_defaults(func=cmd_record)


def add_fleet(sub) -> None:
    from sdtgen.session.fleet import KEYS, KINDS, MACHINE_FORM

    f = sub.add_parser("fleet", help="trace several machines at once (QEMU guests, processes, attached or recording "
                       "kernels, the emulator), each on its own, the same actions on each")
    f.add_argument("--machine", action="append", required=True, metavar=MACHINE_FORM,
                   help=f"a machine: its name (its lines' [NAME], its trace DIR/NAME/, its relay session), its kind "
                        f"({', '.join(KINDS)}), its image, and its own options: "
                        + "; ".join(f"{kind} {', '.join(f'{k}=' for k in keys)}" for kind, keys in KEYS.items())
                        + " (qemu-arg= once for each word)")
    _add_run_options(f, "(as each kind arms by trap)", image=None)
    f.set_defaults(func=cmd_fleet, actions=None, image="")


def add_sessions(sub) -> None:
    ss = sub.add_parser("sessions", help="list the sessions a running kernel's runtime has open (name, policy, CPUs, "
                        "rings, events, lost, specs: docs/sessions.md), through its control core")
    ss.add_argument("image", help="the linked kernel image")
    ss.add_argument("--serial", required=True, metavar="LINE", help="the kernel's control line, as `sdtgen attach` "
                    "takes it")
    ss.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                    help=f"how long the kernel has to answer (default {DEFAULT_TIMEOUT:g})")
    ss.add_argument("--json", action="store_true", help="one JSON line a session")
    ss.set_defaults(func=cmd_sessions)


IMAGE_HELP = "the linked kernel image (with the table `sdtgen gen` wrote)"


def _add_run_options(b: argparse.ArgumentParser, trap_help: str, image: str | None = IMAGE_HELP) -> None:
    """The options `boot`, `qemu`, `attach`, `process` and `fleet` share: what to arm and run, the buffers, the
    trace, the output. Each choice is its owner's: the arming modes the targets', the overflow policies the
    factory's, the trace formats the trace package's. ``image``: the help of the image argument (None: none, as a
    fleet's machines each name theirs)."""
    from sdtgen.targets import POLICIES
    from sdtgen.targets.base import ARM_MODES, TRAP
    from sdtgen.trace.model import FORMATS

    if image is not None:
        b.add_argument("image", help=image)
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
    b.add_argument("--session", metavar="NAME", help="trace in a session of its own, NAME, beside the kernel's "
                   "(qemu, attach): opened with --buffer-size and --overflow, closed when the kernel is left or "
                   "powered off; without it, the default session (docs/sessions.md)")
    b.add_argument("--sessions", action=_Ordered, nargs=0, help="list the sessions the kernel has open at this point")
    b.add_argument("--take-snapshot", action=_Ordered, metavar="NAME", help="take a snapshot of session NAME now "
                   "(the control core's `snapshot NAME`; in the emulator, sdt_snapshot): each CPU's last packets "
                   "kept aside while recording goes on (docs/sessions.md)")
    b.add_argument("--snapshot", action=_Ordered, nargs=2, metavar=("NAME", "PATH"),
                   help="read the snapshot session NAME holds (the kernel's last: its panic path's sdt_snapshot, a "
                        "probe's snapshot(), --take-snapshot) out of the kernel's memory, every packet checked, and "
                        "write it to PATH (the format from the extension, as --trace's)")
    b.add_argument("-i", "--interactive", action="store_true", help="open the console after the actions")
    b.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"how long each function run may take (default {DEFAULT_TIMEOUT:g}); Ctrl-C stops one sooner")
    b.add_argument("--arm", choices=ARM_MODES, default=TRAP,
                   help=f"how probes are armed: trap {trap_help} or branch "
                        "(a call to the probe's recorder in the guest)")
    b.add_argument("--buffer-size", type=int_arg, default=DEFAULTS["buffer_size"], metavar="BYTES",
                   help=f"each CPU's trace buffer: a power of two from {MIN_BUFFER} to {MAX_BUFFER} "
                        f"(default {DEFAULTS['buffer_size']})")
    b.add_argument("--overflow", choices=POLICIES, default=DEFAULTS["overflow"],
                   help="when a CPU's buffer is full: drop new records (the default; the buffer is read as each "
                        "packet fills, so a host that keeps up loses none) or overwrite the oldest (a flight "
                        "recorder, read when a run ends)")
    b.add_argument("--trace", metavar="PATH", help="write every recorded event to PATH as the run goes (a "
                                                  "directory for ctf); Ctrl-C ends the session and keeps it")
    b.add_argument("--trace-format", choices=FORMATS, default=None,
                   help="the --trace format: CTF 1.8 (babeltrace2), a Perfetto protobuf trace, or Chrome "
                        "trace-event JSON (default: from the extension, .json chrome, .pftrace perfetto, else ctf)")
    b.add_argument("--interval", type=float, metavar="SECONDS",
                   help="print the aggregations every SECONDS while the kernel runs; after the actions (without -i) "
                        "the session runs until Ctrl-C")
    b.add_argument("-q", "--quiet", action="store_true", help="do not show each firing (they are counted and traced)")
    b.add_argument("--json", action="store_true", help="print every event as one JSON line (JSON Lines) on stdout")
    _add_relay_options(b)


def _add_relay_options(b: argparse.ArgumentParser) -> None:
    b.add_argument("--relayd", metavar="URL",
                   help="stream the trace live to lttng-relayd at net://HOST[:CONTROL_PORT[:DATA_PORT]] (ports "
                        "5342, 5343 by default), watched with babeltrace2's lttng-live source at "
                        "net://HOST/host/NAME/SESSION (docs/live.md)")
    b.add_argument("--name", metavar="NAME",
                   help="the machine's name in the relay daemon (its host directory and the live URL's NAME; "
                        "default: this host's name and the command, e.g. build7-qemu-riscv64)")


def _add_post_mortem(b: argparse.ArgumentParser, when: str) -> None:
    b.add_argument("--post-mortem", metavar="PATH",
                   help=f"when {when}: every CPU's ring read out of the machine's memory, each packet checked, "
                        "written to PATH (the format from the extension as --trace's; docs/post-mortem.md)")


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
                call.cpu = int_arg(values)
        elif self.dest == "run":
            actions.append(("run", values, Call()))
        elif self.dest == "sessions":
            actions.append(("sessions", "", None))
        elif self.dest == "take_snapshot":
            actions.append(("take-snapshot", values, None))
        elif self.dest == "snapshot":
            actions.append(("snapshot", tuple(values), None))
        elif self.dest == "aggregate" or (self.dest == "enable" and "/" in values):  # SPEC /predicate/
            from sdtgen.session.aggregations import Prepared

            actions.append((self.dest, values, Prepared()))
        else:
            actions.append((self.dest, values, None))
        namespace.actions = actions


def _tracing(args: argparse.Namespace):
    """What `boot`, `qemu` and `attach` share, as the session takes it."""
    from sdtgen.session.starts import Tracing

    return Tracing(args.image, args.actions or [], args.interactive, args.json, args.quiet, args.arm, args.timeout,
                   args.trace, args.trace_format, args.interval, getattr(args, "post_mortem", None),
                   args.session, args.relayd, args.name)


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


def cmd_process(args: argparse.Namespace) -> int:
    from sdtgen.session.starts import trace_session

    ok = trace_session("process", _tracing(args), cpus=args.cpus, buffer_size=args.buffer_size,
                       overflow=args.overflow)
    return EXIT_OK if ok else EXIT_FAIL


def cmd_attach(args: argparse.Namespace) -> int:
    from sdtgen.session.starts import trace_session

    if len(args.serial) > 1:
        from sdtgen.session.fleet import run_fleet, serial_machines

        ok = run_fleet(serial_machines("attach", args.image, args.serial), _tracing(args),
                       buffer_size=args.buffer_size, overflow=args.overflow)
    else:
        ok = trace_session("attach", _tracing(args), args.serial[0], buffer_size=args.buffer_size,
                           overflow=args.overflow)
    return EXIT_OK if ok else EXIT_FAIL


def cmd_fleet(args: argparse.Namespace) -> int:
    from sdtgen.session.fleet import parse_machine, run_fleet

    machines = [parse_machine(text) for text in args.machine]
    ok = run_fleet(machines, _tracing(args), buffer_size=args.buffer_size, overflow=args.overflow)
    return EXIT_OK if ok else EXIT_FAIL


def cmd_sessions(args: argparse.Namespace) -> int:
    from sdtgen.session.starts import list_sessions

    return EXIT_OK if list_sessions(args.image, args.serial, args.timeout, args.json) else EXIT_FAIL


def cmd_torture(args: argparse.Namespace) -> int:
    from sdtgen.calls import parse_int
    from sdtgen.errors import SdtError
    from sdtgen.session.starts import torture

    if len(args.actions) > 1:
        raise SdtError("", "a torture calls one function", "give one --run (its --arg after it)")
    ((_, run, call),) = args.actions
    summary = torture("attach" if args.serial else args.target, args.image, run,
                      [parse_int(a) for a in call.args], cpus=args.cpus, toggles=args.toggles, seed=args.seed,
                      timeout=args.timeout, exhaustive=args.exhaustive, spec=args.spec, arm=args.arm,
                      module=args.module, serial=args.serial, qemu_args=args.qemu_arg or [], progress=True,
                      keep=args.keep)
    if summary is None:
        return EXIT_FAIL
    if args.json:
        emit_json(summary.as_dict())
    else:
        print(summary.text())
    return EXIT_OK if summary.passed else EXIT_FAIL


def cmd_record(args: argparse.Namespace) -> int:
    """A session over a kernel that streams by itself: its events shown as they come, its packets traced."""
    from sdtgen.session.starts import record_session

    if len(args.serial) > 1:
        from sdtgen.session.fleet import run_fleet, serial_machines
        from sdtgen.session.starts import Tracing

        t = Tracing(args.image, [], as_json=args.json, quiet=args.quiet, trace=args.trace, trace_format="ctf",
                    relayd=args.relayd, name=args.name)
        return EXIT_OK if run_fleet(serial_machines("record", args.image, args.serial), t) else EXIT_FAIL
    got = record_session(args.image, args.serial[0], args.trace, args.json, args.quiet, args.relayd, args.name)
    if got is None:
        return EXIT_FAIL
    if args.json:
        emit_json({"event": "recorded", "trace": args.trace, "packets": got.packets, "events": got.events,
                    "cpus": got.cpus, "dropped": got.dropped, "damaged": got.damaged})
    else:
        print(f"recorded {got.packets} packets ({got.events} events) of {got.cpus} CPUs into "
              f"{printable(args.trace)}; {got.dropped} dropped (overwritten while sent), {got.damaged} damaged")
    return EXIT_OK
