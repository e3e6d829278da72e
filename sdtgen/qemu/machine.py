"""QEMU as a child process: the architecture's machine with N vCPUs, its first serial port on a pipe.

QEMU runs in a session of its own, so the terminal's Ctrl-C reaches sdtgen only, which then stops
it: SIGTERM, a few seconds to exit, then SIGKILL. If sdtgen itself dies, the kernel sends QEMU
SIGKILL (PR_SET_PDEATHSIG): nothing is left running either way.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import time

from sdtgen.arch.base import Arch
from sdtgen.errors import SdtError

STOP_GRACE = 5.0  # seconds QEMU has to exit after SIGTERM
MEMORY_BASE = 128 << 20  # bytes of guest RAM besides the rings: the image, stacks, QEMU's firmware tables
PR_SET_PDEATHSIG = 1


def qemu_argv(binary: str, arch: Arch, image: str, cpus: int, memory: int) -> list[str]:
    """The command line: ``memory`` bytes of RAM, no display, no monitor, serial port 0 on stdio."""
    return [binary, "-machine", arch.qemu_machine, *arch.qemu_accel, "-smp", str(cpus),
            "-m", f"{memory >> 20}M", *arch.qemu_args, "-nodefaults", "-no-reboot", "-display", "none",
            "-monitor", "none", "-serial", "stdio", "-kernel", image]


def memory_for(cpus: int, ring_bytes: int) -> int:
    """RAM for the image and every CPU's ring, rounded up to a MiB."""
    return (MEMORY_BASE + cpus * ring_bytes + (1 << 20) - 1) & ~((1 << 20) - 1)


def find_qemu(arch: Arch) -> str:
    if not arch.qemu_binary:
        raise SdtError("", f"sdtgen qemu does not boot {arch.name} images",
                       "architectures with a QEMU platform: see docs/qemu.md")
    path = shutil.which(arch.qemu_binary)
    if path is None:
        raise SdtError("", f"{arch.qemu_binary} not found", f"install it: apt-get install {arch.qemu_package}")
    return path


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGKILL when sdtgen dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # sdtgen died before prctl took effect
        os._exit(1)


class QemuExited(Exception):
    """QEMU ended: ``status`` is its exit status, ``stderr`` what it said."""

    def __init__(self, status: int, stderr: str) -> None:
        super().__init__(f"QEMU exited with status {status}")
        self.status = status
        self.stderr = stderr


class Qemu:
    """A running QEMU: bytes to and from its serial port."""

    def __init__(self, argv: list[str]) -> None:
        parent = os.getpid()
        self.argv = argv
        self._stderr = bytearray()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, preexec_fn=lambda: _die_with_parent(parent))
        self.started = time.monotonic()

    @property
    def stderr(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise QemuExited(self.proc.wait(), self.stderr) from None

    def read(self, timeout: float) -> bytes | None:
        """What the serial port has said, waiting up to ``timeout`` s; None if nothing came. QemuExited at its end."""
        out, err = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        ready, _, _ = select.select([out, err], [], [], max(timeout, 0))
        if err in ready:
            self._stderr += os.read(err, 65536)
        if out not in ready:
            return None
        data = os.read(out, 1 << 16)
        if not data:
            with contextlib.suppress(OSError):
                self._stderr += self.proc.stderr.read()
            raise QemuExited(self.proc.wait(), self.stderr)
        return data

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int:
        """End QEMU whatever state it is in; its exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            if self.wait(STOP_GRACE) is None:
                self.proc.kill()
        status = self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                f.close()
        return status


@contextlib.contextmanager
def termination_as_interrupt():
    """SIGTERM and SIGHUP raise KeyboardInterrupt while QEMU runs, so it is stopped on the way out."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
