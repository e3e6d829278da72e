"""The sessions sdtgen's commands start, each a Session over its kind of target: what `boot`, `qemu` and
`torture` (in the emulator) make, for the command line, the tests and the bench alike."""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.session.reporter import Reporter
from sdtgen.session.session import Session
from sdtgen.targets.base import Summary


def boot_session(path: str, reporter, *, patch: bool = True, arm: str = "trap", timeout: float | None = None,
                 buffer_size: int | None = None, overflow: str = "drop", cpus: int = 1, seed: int = 0,
                 schedule: str = "parallel", stream: bool = True, trace: tuple[str, str] | None = None,
                 precheck=None):
    """A session on ``path`` booted in the emulator (what `sdtgen boot` starts)."""
    from sdtgen.limits import DEFAULT_BUFFER, DEFAULT_TIMEOUT
    from sdtgen.targets.emulator.target import EmulatorTarget

    def start(s: Session) -> EmulatorTarget:
        return EmulatorTarget(s, patch=patch, buffer_size=s.buffer_size, overflow=overflow, cpus=cpus, seed=seed,
                              schedule=schedule, stream=stream)

    return Session(path, reporter, start, arm=arm, timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
                   trace=trace, precheck=precheck, buffer_size=DEFAULT_BUFFER if buffer_size is None else buffer_size,
                   overflow=overflow)


def qemu_session(path: str, reporter, *, cpus: int = 1, arm: str = "trap", buffer_size: int = 1 << 20,
                 overflow: str = "drop", timeout: float = 20.0, trace: tuple[str, str] | None = None,
                 qemu_args: list[str] | tuple[str, ...] = (), precheck=None, transport: str = "shared"):
    """A session on ``path`` booted on QEMU (what `sdtgen qemu` starts)."""
    from sdtgen.targets.qemu import QemuTarget

    def start(s: Session) -> QemuTarget:
        return QemuTarget(s, cpus=cpus, buffer_size=buffer_size, overflow=overflow, qemu_args=list(qemu_args),
                          timeout=timeout, transport=transport)

    return Session(path, reporter, start, arm=arm, timeout=timeout, trace=trace, buffer_size=buffer_size,
                   overflow=overflow, precheck=precheck)


def emulator_torture(path: str, target: str, args: list[int], cpus: int, toggles: int, seed: int,
            timeout: float, exhaustive: bool = False, spec: str = "", mode: str = "branch",
            module: str | None = None, progress: bool = False) -> Summary:
    """Boot ``path`` in the emulator on ``cpus`` CPUs and a control CPU, and run the torture test (or the exhaustive
    check); the summary. ``module``: loaded first (its functions callable); mode ``module`` cycles it. ``progress``:
    the toggles made so far on standard error while it runs, when that is a terminal."""
    import io

    from sdtgen.targets.emulator.target import EmulatorTarget
    from sdtgen.targets.emulator.torture import Torture

    def start(s: Session) -> EmulatorTarget:
        return EmulatorTarget(s, buffer_size=s.buffer_size, overflow="drop", cpus=cpus + 1, seed=seed,
                              schedule="seeded", modules=module is not None)

    session = Session(path, Reporter(as_json=True, out=io.StringIO(), quiet=True), start, timeout=timeout,
                      arm="branch" if mode == "module" else mode)
    try:
        if module is not None:
            session.load_module(module)
        func, rtype = session.check_run(target, args)
        mask = (1 << (32 if rtype in ("int", "uint") else session.image.arch.bits)) - 1
        symbol = target.partition(":")[0]
        if exhaustive:
            from sdtgen.targets.emulator.exhaustive import exhaustive as run_exhaustive

            with _progress(progress, lambda: f"torture --exhaustive: {symbol}'s sites"):
                return run_exhaustive(session.target, symbol, module=module is not None)
        if mode == "module" and not spec:
            spec = session.module_spec()
        t = Torture(session.target, func, args, mask, toggles, timeout, spec or session.spec_of(symbol), mode)
        t.prepare(symbol)
        with _progress(progress, lambda: f"torture: toggle {t.summary.done} of {toggles} on {cpus} CPU(s)",
                       timeout):
            return t.run()
    finally:
        session.close()


def _progress(shown: bool, status: Callable[[], str], timeout: float | None = None):
    """The torture's progress line (sdtgen/progress.py): what ``status`` says, the time so far and the time it
    may take; nothing when not ``shown``."""
    from contextlib import nullcontext

    from sdtgen.progress import progress_line, seconds

    if not shown:
        return nullcontext()
    limit = f" of at most {seconds(timeout)}" if timeout is not None else ""
    return progress_line(lambda elapsed: f"{status()}, {seconds(elapsed)}{limit}")
