"""How bytes and commands reach a kernel: the emulator, a control core over a channel, a process.

``open_target(kind, host, **options)`` builds every kind of target, for the command line, the tests, the bench
and `cost` alike, with one set of defaults (``DEFAULTS``); ``target_options`` fills and checks them before
anything starts. Each kind's module is imported only when that kind is opened: `sdtgen --version` and `scan`
import none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdtgen.limits import DEFAULT_BUFFER, DEFAULT_TIMEOUT, MAX_BUFFER, MIN_BUFFER

if TYPE_CHECKING:
    from sdtgen.targets.base import Host, Target

EMULATOR, QEMU, ATTACH, PROCESS, LISTEN = "emulator", "qemu", "attach", "process", "listen"
KINDS = (EMULATOR, QEMU, ATTACH, PROCESS, LISTEN)
POLICIES = ("drop", "overwrite")  # --overflow: a full ring drops new records, or overwrites the oldest
# What every kind that records takes, and its default: each CPU's ring, what a full one does, how long the kernel
# has to answer (a control core's reply; the emulator's calls take the session's --timeout).
DEFAULTS: dict[str, Any] = {"buffer_size": DEFAULT_BUFFER, "overflow": "drop", "timeout": DEFAULT_TIMEOUT, "cpus": 1}
# Each kind's own options and their defaults (a kind takes only the common options it names in SHARED). ``own``: the
# session the host opens for itself beside the kernel's (an OwnSession, --session; None: the default session's).
# ``rings`` (attach): the default session's rings attached when the kernel lets the host (False: a host that only
# asks, as `sdtgen sessions` does, sets nothing up).
OWN: dict[str, dict[str, Any]] = {
    EMULATOR: {"patch": True, "seed": 0, "schedule": "parallel", "stream": True, "modules": False, "own": None},
    QEMU: {"qemu_args": (), "transport": "shared", "module": None, "own": None},
    ATTACH: {"line": None, "announced": False, "own": None, "rings": True},
    PROCESS: {"own": None},
    LISTEN: {"source": None},
}
SHARED: dict[str, tuple[str, ...]] = {
    EMULATOR: ("buffer_size", "overflow", "cpus"),
    QEMU: ("buffer_size", "overflow", "timeout", "cpus"),
    ATTACH: ("buffer_size", "overflow", "timeout"),
    PROCESS: ("buffer_size", "overflow", "timeout", "cpus"),
    LISTEN: (),
}


def max_cpus(kind: str) -> int:
    """The most CPUs a target of ``kind`` can be given (its constructor refuses more, in the same words): the
    emulator's engines, the hosted platform's threads, else the protocol's bound (a kernel says in its hello how
    many it took)."""
    if kind == EMULATOR:
        from sdtgen.targets.emulator.smp import MAX_CPUS
    elif kind == PROCESS:
        from sdtgen.targets.process import MAX_CPUS
    else:
        from sdtgen.limits import MAX_CPUS
    return MAX_CPUS


def check_buffer_size(size: int) -> int:
    """BYTES per CPU: a power of two from MIN_BUFFER to MAX_BUFFER."""
    from sdtgen.errors import SdtError

    if not MIN_BUFFER <= size <= MAX_BUFFER or size & (size - 1):
        raise SdtError("", f"--buffer-size {size} is not a power of two from {MIN_BUFFER} to {MAX_BUFFER}",
                       "give e.g. 65536 or 1048576 (bytes per CPU)")
    return size


def target_options(kind: str, **given: Any) -> dict[str, Any]:
    """The options a ``kind`` of target is built with: ``given`` (None: the default) over the defaults, checked
    (one line for a bad value, before anything starts). An option the kind does not take is a TypeError: a
    caller's mistake, not the user's."""
    from sdtgen.errors import SdtError, printable

    if kind not in KINDS:
        raise ValueError(f"unknown kind of target {kind!r}: one of {', '.join(KINDS)}")
    defaults = {**{k: DEFAULTS[k] for k in SHARED[kind]}, **OWN[kind]}
    common = set(DEFAULTS) - set(SHARED[kind])  # what every caller may give, and this kind does without
    unknown = set(given) - set(defaults) - common
    if unknown:
        raise TypeError(f"a {kind} target takes no {', '.join(sorted(unknown))}")
    options = {k: v if given.get(k) is None else given[k] for k, v in defaults.items()}
    if options.get("overflow", "drop") not in POLICIES:
        raise SdtError("", f"unknown overflow policy {printable(options['overflow'])!r}",
                       f"use {' or '.join(POLICIES)}")
    if "buffer_size" in options:
        check_buffer_size(options["buffer_size"])
    return options


def open_target(kind: str, host: Host, **given: Any) -> Target:
    """A target of ``kind`` over the kernel ``host``'s image names, built with ``given`` over the defaults (see
    target_options): ``emulator`` (the image in Unicorn), ``qemu`` (booted on QEMU), ``attach`` (a running
    kernel on the open ``line``), ``process`` (the image run as a Linux process), ``listen`` (the bytes a
    streaming kernel's ``source`` yields)."""
    options = target_options(kind, **given)
    if kind == EMULATOR:
        from sdtgen.targets.emulator.target import EmulatorTarget

        return EmulatorTarget(host, **options)
    if kind == QEMU:
        from sdtgen.targets.qemu import QemuTarget

        return QemuTarget(host, **{**options, "qemu_args": list(options["qemu_args"])})
    if kind == ATTACH:
        from sdtgen.targets.serial import AttachTarget

        return AttachTarget(host, **options)
    if kind == PROCESS:
        from sdtgen.targets.process import ProcessTarget

        return ProcessTarget(host, **options)
    from sdtgen.targets.listen import ListenTarget

    return ListenTarget(host, **options)
