"""Programs run through the runtime's own firing path, built for this machine (program_harness.c)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from helpers import need_tool, run

from sdtgen.dscript import compile_script
from sdtgen.dscript.merge import Totals
from sdtgen.dscript.tables import read_cpu

HERE = Path(__file__).resolve().parent
AGG_BYTES = 1 << 16


@dataclass(frozen=True)
class FakeProbe:
    """A probe as the compiler reads an image's: names, declared argument types, key."""

    provider: str
    module: str
    function: str
    name: str
    args: tuple[str, ...]
    key: int

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"


class Harness:
    """The runtime in this process: one CPU, its aggregation memory, programs fired through sdt_program_fire."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.h_agg.restype = ctypes.c_ulong
        lib.h_discarded.restype = ctypes.c_ulong
        lib.h_fire.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint64),
                               ctypes.c_int]
        lib.h_verify.argtypes = [ctypes.c_char_p, ctypes.c_ulong]
        lib.h_attach.argtypes = [ctypes.c_ulong, ctypes.c_uint]
        self.buffers: list = []

    def attach(self, nbytes: int = AGG_BYTES, cpu: int = 0) -> None:
        assert self.lib.h_attach(nbytes, cpu) == 0
        self.nbytes = nbytes

    def verify(self, code: bytes) -> int:
        return self.lib.h_verify(self.aligned(code), len(code))

    def aligned(self, code: bytes):
        """The program in 8-byte aligned memory (the runtime refuses anything else), kept alive."""
        buf = (ctypes.c_uint64 * ((len(code) + 7) // 8 + 1))()
        ctypes.memmove(buf, code, len(code))
        self.buffers.append(buf)
        return ctypes.cast(buf, ctypes.c_char_p)

    def fire(self, code: bytes, key: int, args: list[int], unchecked: bool = False) -> int:
        """A firing as a recorder makes it: 1 when it is to be recorded, 0 when not (``guarded``: the slot's guard
        turned it away before the program ran), or the verifier's refusal."""
        words = (ctypes.c_uint64 * 6)(*(list(args) + [0] * (6 - len(args))))
        r = self.lib.h_fire(self.aligned(code), len(code), key, words, int(unchecked))
        self.guarded = r == 2
        return 0 if r == 2 else r

    def string(self, data: bytes) -> int:
        """The address of a NUL-terminated copy of ``data`` this process keeps."""
        buf = ctypes.create_string_buffer(data)
        self.buffers.append(buf)
        return ctypes.addressof(buf)

    def tables(self, halves: tuple[int, ...] = (0, 1)):
        return read_cpu(lambda a, n: ctypes.string_at(a, n), self.lib.h_agg(), 64, halves=halves,
                        given=self.nbytes)

    def totals(self, compiled) -> Totals:
        t = Totals(compiled.aggregations, compiled.names)
        t.add(self.tables())
        return t


def build_harness(out: Path) -> Harness:
    from helpers import sdtgen

    rt = Path(sdtgen("runtime-dir", check=True).stdout.strip())
    inc = Path(sdtgen("include-dir", check=True).stdout.strip())
    lib = out / "program_harness.so"
    run([need_tool("gcc", "gcc"), "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{inc}", f"-I{rt}",
         "-o", str(lib), str(HERE / "program_harness.c"), str(rt / "arch" / "sdt_x86_64.c")])
    return Harness(ctypes.CDLL(str(lib)))


def compile_for(text: str, probes: list[FakeProbe], bits: int = 64):
    return compile_script(text, probes, bits, source="test")
