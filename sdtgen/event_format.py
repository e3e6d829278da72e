"""The event format: a probe argument's declared C type as a trace field, and where a probe's recorder stores each
argument in its events. The recorders `gen` writes (sdtgen/recorder.py), the host's decoder
(sdtgen/trace/packets.py) and the three trace writers (sdtgen/trace/{ctf,perfetto,chrome}.py) all read it here.

An event is its header (sdtgen/layout.py: EVENT, 8-byte aligned) and then the probe's arguments in the probe's
order: an integer as a register-sized word at the next multiple of the word's size (the bytes skipped are zeros),
a string as the bytes copied at the firing and a NUL. A probe whose strings all come after its integers (most)
has every integer at a fixed offset and nothing skipped; the rest skip at most a word less one byte before each
integer that follows a string. One order, so a CTF reader, which shows fields in the order the metadata declares
them, shows `{ arg0 = "usr/lib", arg1 = 3 }` from the runtime's packets as they stand.

Integers are reduced to their declared width the way C converts them: the runtime reads an ``unsigned long``
register, and a ``long`` argument of -1 is 2**64 - 1 there but -1 in the trace.
"""

from __future__ import annotations

import re
import struct

from sdtgen.layout import EVENT, VALUES
from sdtgen.plaindata import record

UNREADABLE = "<unreadable>"  # what a string argument the runtime could not read becomes in CTF
MAX_COPIED_STRING = VALUES["SDT_MAX_STRING"]  # bytes of a string a recorder copies, then its NUL


@record(frozen=True)
class ArgType:
    kind: str  # "int" (signed), "uint" or "str"
    bits: int = 0  # integers only
    hex: bool = False  # a pointer: shown in base 16 where the format can say so

    def value(self, v: int | str | None, where: str) -> int | str | None:
        """``v`` as this type holds it; a value of the wrong kind is the caller's bug (ValueError)."""
        if self.kind == "str":
            if v is None or isinstance(v, str):
                return v
        elif isinstance(v, int) and not isinstance(v, bool):
            v &= (1 << self.bits) - 1
            if self.kind == "int" and v >> (self.bits - 1):
                v -= 1 << self.bits
            return v
        raise ValueError(f"{where}: {v!r} is not a value of a {self.kind} field")


_FIXED = re.compile(r"(u?)int(8|16|32|64)_t|__([us])(8|16|32|64)|([us])(8|16|32|64)")
_STRING = {"char*", "constchar*", "charconst*"}


def arg_type(ctype: str, pointer_bits: int) -> ArgType:
    """The field for a declared C type on an architecture whose pointers are ``pointer_bits`` wide."""
    t = " ".join(ctype.replace("*", " * ").split())
    compact = t.replace(" ", "")
    if compact in _STRING:
        return ArgType("str")
    if "*" in compact:
        return ArgType("uint", pointer_bits, hex=True)
    words = [w for w in t.split() if w not in ("const", "volatile")]
    m = _FIXED.fullmatch("".join(words))
    if m:
        unsigned, bits = (m[1], m[2]) if m[2] else (m[3] == "u", m[4]) if m[4] else (m[5] == "u", m[6])
        return ArgType("uint" if unsigned else "int", int(bits))
    unsigned = "unsigned" in words
    base = [w for w in words if w not in ("signed", "unsigned")]
    bits = _C_BITS.get(" ".join(base) or "int")
    if bits is None:  # size_t, uintptr_t, off_t, a typedef we cannot see: a register's worth, unsigned
        return ArgType(_TYPEDEF_KIND.get(" ".join(base), "uint"), pointer_bits, hex=False)
    if bits == 0:
        bits = pointer_bits  # long: the register width on every architecture sdtgen supports (LP64, ILP32)
    kind = "uint" if unsigned or base == ["_Bool"] or base == ["bool"] else "int"
    return ArgType(kind, bits)


_C_BITS = {"char": 8, "short": 16, "short int": 16, "int": 32, "long": 0, "long int": 0, "long long": 64,
           "long long int": 64, "_Bool": 8, "bool": 8}
_TYPEDEF_KIND = {"ssize_t": "int", "intptr_t": "int", "ptrdiff_t": "int", "off_t": "int", "time_t": "int"}


@record(frozen=True)
class EventFormat:
    """One probe's events: its arguments' types and where each is stored."""

    key: int
    spec: str
    types: tuple[str, ...]
    argtypes: tuple[ArgType, ...]
    word: int  # bytes of an argument register
    lead: tuple[int, ...]  # the integers before the first string (all of them when it has none): fixed offsets
    rest: tuple[int, ...]  # the arguments from the first string on, in order, each where the one before ended
    strings: tuple[int, ...]  # the argument numbers copied as strings, in order
    words: struct.Struct  # the leading integers after the header, each read as its C type holds it (ArgType.value)
    later: tuple[struct.Struct | None, ...]  # for each of ``rest``: how to read it (a word), or None (a string)
    size: int  # bytes of the header and the leading integers: the whole event when it has no strings

    @property
    def reserved(self) -> int:
        """What the recorder reserves: the event with every string at its longest, which is where the fields end
        at the most (an integer's offset only grows with the strings before it). Not rounded up: an event's size
        ends at its last byte, and so does the packet's content after the last event (a reader takes any byte
        before content_size for another event); the next event starts at the next multiple of 8."""
        at = self.size
        for k in self.rest:
            at = at + MAX_COPIED_STRING + 1 if self.argtypes[k].kind == "str" else align(at, self.word) + self.word
        return at


def align(at: int, word: int) -> int:
    """Where an integer stored at or after ``at`` goes: the next multiple of its size."""
    return (at + word - 1) & -word


_CODES = {8: "b", 16: "h", 32: "i", 64: "q"}


def _word_code(t: ArgType, bits: int, little: bool) -> str:
    """The struct code that reads a ``bits``-bit register word as ``t`` holds it: its low ``t.bits`` bits, signed
    or not, as ArgType.value makes of the word (a type as wide as the word or wider is the whole word)."""
    signed = t.kind == "int" and t.bits <= bits
    width = min(t.bits, bits)
    code = _CODES[width] if signed else _CODES[width].upper()
    pad = f"{(bits - width) // 8}x" if width < bits else ""
    return code + pad if little else pad + code


def event_format(key: int, spec: str, types: tuple[str, ...], bits: int, little: bool = True) -> EventFormat:
    """How a probe's recorder stores its events and how they are read, on an architecture of ``bits``."""
    argtypes = tuple(arg_type(t, bits) for t in types)
    first = next((k for k, t in enumerate(argtypes) if t.kind == "str"), len(types))
    order = "<" if little else ">"
    words = struct.Struct(order + "".join(_word_code(argtypes[k], bits, little) for k in range(first)))
    later = tuple(None if argtypes[k].kind == "str" else struct.Struct(order + _word_code(argtypes[k], bits, little))
                  for k in range(first, len(types)))
    return EventFormat(key, spec, tuple(types), argtypes, bits // 8, tuple(range(first)),
                       tuple(range(first, len(types))), tuple(k for k, t in enumerate(argtypes) if t.kind == "str"),
                       words, later, EVENT.size(bits) + words.size)
