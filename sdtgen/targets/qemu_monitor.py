"""QEMU's machine protocol (QMP) on a socket of sdtgen's: the one thing asked of it is the guest's RAM, saved into a
file (`pmemsave`) for a post-mortem of a machine whose RAM is not shared with the host (docs/post-mortem.md).

QEMU answers QMP whatever its guest does, a panicked or hung kernel included; a QEMU that exited has no socket, and
then nothing can be read.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import time

WAIT = 10.0  # seconds QEMU has to answer a command (pmemsave of a few hundred MiB takes well under one)


class MonitorError(Exception):
    """QEMU's monitor did not do what was asked: the message says why."""


def qmp_option(path: str) -> list[str]:
    """QEMU's arguments for a QMP socket at ``path`` that waits for no client."""
    return ["-qmp", f"unix:{path},server=on,wait=off"]


def pmemsave(path: str, base: int, size: int, out: str, wait: float = WAIT) -> None:
    """``size`` bytes of the guest's physical memory from ``base`` into the file ``out``."""
    deadline = time.monotonic() + wait
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(wait)
            s.connect(path)
            reader = s.makefile("rb")
            _answer(reader, deadline, greeting=True)
            for command in ({"execute": "qmp_capabilities"},
                            {"execute": "pmemsave", "arguments": {"val": base, "size": size, "filename": out}}):
                s.sendall(json.dumps(command).encode() + b"\n")
                _answer(reader, deadline)
    except OSError as e:
        raise MonitorError(f"QEMU's monitor at {path}: {e.strerror or e}") from None


def _answer(reader, deadline: float, greeting: bool = False) -> dict:
    """The next reply (events QEMU sends meanwhile skipped); MonitorError for an error or no reply in time."""
    while time.monotonic() < deadline:
        line = reader.readline()
        if not line:
            raise MonitorError("QEMU closed its monitor")
        try:
            said = json.loads(line)
        except ValueError:
            raise MonitorError(f"QEMU's monitor said {line[:80]!r}, which is not QMP") from None
        if greeting and "QMP" in said:
            return said
        if "error" in said:
            raise MonitorError(f"QEMU refused: {said['error'].get('desc', said['error'])}")
        if "return" in said:
            return said
    raise MonitorError("QEMU's monitor did not answer in time")


class RamFile:
    """A saved copy of the machine's RAM (``base`` its first physical address), read as the machine's memory."""

    def __init__(self, path: str, base: int) -> None:
        self.base = base
        with open(path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            self.map = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ) if self.size else None

    def read(self, addr: int, size: int) -> bytes:
        off = addr - self.base
        if self.map is None or not 0 <= off <= self.size - size or size < 0:
            raise ValueError(f"{addr:#x} (+{size}) is outside the machine's RAM")
        return self.map[off:off + size]

    def close(self) -> None:
        if self.map is not None:
            with contextlib.suppress(BufferError):
                self.map.close()
            self.map = None
