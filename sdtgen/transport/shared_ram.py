"""The machine's RAM as the host sees it: QEMU's memory backend file, mapped shared, so the host reads each
CPU's ring where the kernel writes it (`shared`), as LTTng's consumer reads its shared buffers.

QEMU runs the guest's memory accesses on this very memory, its atomics as the host's: a sequence number is
loaded with one aligned load and a packet claimed with the host's compare-and-swap (libatomic's), the same
claim sdt_consume_done makes in C. Every address is a physical one the kernel said; one outside the RAM the
host gave is refused, never read.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os

from sdtgen.errors import SdtError

_CAS = None


def _cas():
    """libatomic's __atomic_compare_exchange_{4,8} (gcc's runtime: installed with gcc)."""
    global _CAS
    if _CAS is None:
        path = ctypes.util.find_library("atomic") or "libatomic.so.1"
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            raise SdtError("", "libatomic is missing: the host cannot claim packets in shared memory",
                           "install it (apt-get install libatomic1), or give --transport serial") from None
        out = {}
        for width, ctype in ((4, ctypes.c_uint32), (8, ctypes.c_uint64)):
            f = getattr(lib, f"__atomic_compare_exchange_{width}")
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctype, ctypes.c_int, ctypes.c_int]
            f.restype = ctypes.c_bool
            out[width] = (f, ctype)
        _CAS = out
    return _CAS


ACQ_REL, ACQUIRE = 4, 2  # __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE


class SharedRam:
    """``size`` bytes of RAM starting at physical address ``base``, backed by the file at ``path``."""

    stopped = False  # the guest's CPUs run while the host reads
    order = "little"  # the byte order of every architecture QEMU boots here (and of the host)

    def __init__(self, path: str, size: int, base: int) -> None:
        self.path, self.size, self.base = path, size, base
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._anchor = ctypes.c_char.from_buffer(self.map)  # the mapping's address, for loads and claims
        self.address = ctypes.addressof(self._anchor)

    def _offset(self, addr: int, size: int) -> int:
        off = addr - self.base
        if not 0 <= off <= self.size - size:
            raise ValueError(f"{addr:#x} (+{size}) is outside the machine's RAM")
        return off

    def contains(self, addr: int, size: int) -> bool:
        return 0 <= addr - self.base <= self.size - size

    def read(self, addr: int, size: int) -> bytes:
        off = self._offset(addr, size)
        return self.map[off:off + size]

    def write(self, addr: int, data: bytes) -> None:
        off = self._offset(addr, len(data))
        self.map[off:off + len(data)] = data

    def load(self, addr: int, width: int) -> int:
        """One aligned load of a ``width``-byte word (never torn by the guest's store beside it)."""
        off = self._offset(addr, width)
        ctype = ctypes.c_uint64 if width == 8 else ctypes.c_uint32
        return ctype.from_address(self.address + off).value

    def claim(self, addr: int, expect: int, width: int) -> bool:
        """Advance the word at ``addr`` from ``expect`` to ``expect + 1`` unless the guest moved it first."""
        f, ctype = _cas()[width]
        off = self._offset(addr, width)
        want = ctype(expect)
        return f(self.address + off, ctypes.byref(want), (expect + 1) & ((1 << (8 * width)) - 1), ACQ_REL, ACQUIRE)

    def unlink(self) -> None:
        """The file gone from its directory: QEMU and the host keep their mappings, and nothing is left behind."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        self.unlink()
        if self.map is not None:
            del self._anchor
            self.map.close()
            self.map = None
