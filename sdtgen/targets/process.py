"""A program that links the runtime, its control core and the hosted platform with its main
(sdtgen/runtime/hosted/sdt_linux_main.c), run as a Linux process: threads are its CPUs (fixtures/process's
kernel-proc, or any program built the same way), driven through the control core on its standard input and
output (`--control`; the flags are layout.py's SDT_PROCESS_*). A PIE is loaded away from its link
addresses: the control core's hello says how far (sdtgen/targets/control.py).
"""

from __future__ import annotations

import contextlib
import os

from sdtgen.errors import SdtError, printable
from sdtgen.layout import PROCESS_ARG, VALUES
from sdtgen.targets.base import Halted, Host, OwnSession
from sdtgen.targets.child import Child, ChildChannel
from sdtgen.targets.control import ControlTarget

MAX_CPUS = VALUES["SDT_LINUX_MAX_CPUS"]  # the hosted platform's threads with a CPU: its main refuses more too


class ProcessTarget(ControlTarget):
    """The image run as a process with ``cpus`` threads, each a CPU with a ring of ``buffer_size`` bytes."""

    def __init__(self, host: Host, *, cpus: int, buffer_size: int, overflow: str, timeout: float,
                 own: OwnSession | None) -> None:
        from sdtgen.transport.geometry import packet_size_for

        path = host.image.path
        if not 1 <= cpus <= MAX_CPUS:
            raise SdtError("", f"--cpus {cpus} is not a number of CPUs from 1 to {MAX_CPUS}")
        if not os.access(path, os.X_OK):
            raise SdtError(path, "is not a program this machine can run",
                           "build it as fixtures/process builds kernel-proc (the hosted platform and its main)")
        arg = PROCESS_ARG  # the hosted main's flags (sdtgen/runtime/hosted/sdt_linux_main.c)
        argv = [os.path.abspath(path), arg["cpus"], str(cpus), arg["buffer"], str(buffer_size),
                arg["packet"], str(packet_size_for(buffer_size)),
                arg["overflow"], arg["overwrite"] if overflow == "overwrite" else arg["discard"], arg["control"]]
        try:
            self.child = Child(argv)
        except OSError as e:
            raise SdtError(path, f"cannot be run: {printable(e.strerror or str(e))}") from None
        try:
            super().__init__(host, ChildChannel(self.child, "the process"), timeout=timeout, announced=True)
        except Halted as h:
            self.child.stop()
            raise Halted(f"{h}; run it as `{printable(' '.join(argv))}` to see what it says") from None
        except BaseException:
            self.child.stop()
            raise
        if own is not None:
            try:
                self.open_own(own)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """The process's standard input closed: it ends; stopped if it does not."""
        if self.child.proc.poll() is None and hasattr(self, "booted"):
            self.close_own()  # the host's session closed first: the kernel's own sessions stay whole
        self.packets.close()
        if self.child.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.child.proc.stdin.close()
            self.child.wait(2.0)
        self.child.stop()
