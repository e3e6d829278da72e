"""A probe argument's declared C type as a trace field: a string, or an integer of a size and signedness.

Every format types its fields from here, so the three agree on what a value means. Integers are
reduced to their declared width the way C converts them: the runtime reads an ``unsigned long``
register, and a ``long`` argument of -1 is 2**64 - 1 there but -1 in the trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UNREADABLE = "<unreadable>"  # what a string argument the runtime could not read becomes in CTF


@dataclass(frozen=True)
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
