"""The test's own model of the language's integer semantics, written from C's rules (not from sdtgen): random
expression trees, their source text (C's precedence, or fully parenthesized), and their values.

Every value is a 64-bit pattern with a signedness. An argument is the register's word reduced to its declared
C type; an arithmetic result is unsigned when either operand is (C's usual conversions for 64-bit types),
a comparison or a logical operator gives a signed 0 or 1, a shift keeps its left operand's type, ``>>`` of a
signed value is arithmetic, division truncates toward zero and INT64_MIN / -1 wraps, shift counts are taken
modulo 64. ``&&``, ``||`` and ``?:`` evaluate only what C evaluates.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

M = (1 << 64) - 1
INT64_MIN = 1 << 63

# Declared argument types -> (bits, signed): C's sizes on an LP64 machine.
CTYPES = {"int": (32, True), "unsigned int": (32, False), "long": (64, True), "unsigned long": (64, False),
          "short": (16, True), "unsigned short": (16, False), "char": (8, True), "unsigned char": (8, False),
          "long long": (64, True), "int64_t": (64, True), "uint32_t": (32, False), "int8_t": (8, True),
          "uint16_t": (16, False), "size_t": (64, False)}
# The same on an ILP32 machine (i386), without the 64-bit types a 32-bit register cannot carry.
CTYPES_ILP32 = {**{t: v for t, v in CTYPES.items() if v[0] < 64}, "long": (32, True), "unsigned long": (32, False),
                "size_t": (32, False)}

# C's binary operators, loosest first.
LEVELS = [("||",), ("^^",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="), ("<<", ">>"),
          ("+", "-"), ("*", "/", "%")]
PREC = {op: i for i, ops in enumerate(LEVELS) for op in ops}
BINARY = [op for ops in LEVELS for op in ops]
UNARY = ["-", "~", "!", "+"]


class Fault(Exception):
    """The expression divides by zero when evaluated."""


@dataclass(frozen=True)
class Lit:
    value: int
    suffix: str = ""  # "" or "u"
    hex: bool = False


@dataclass(frozen=True)
class Arg:
    k: int


@dataclass(frozen=True)
class Cpu:
    pass


@dataclass(frozen=True)
class Un:
    op: str
    x: object


@dataclass(frozen=True)
class Bin:
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class Cond:
    c: object
    t: object
    f: object


@dataclass(frozen=True)
class CastTo:
    ctype: str
    x: object


def signed_of(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def reduce(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    if signed and v >> (bits - 1):
        v -= 1 << bits
    return v & M


def is_signed(e, types: dict[int, str], table: dict = CTYPES) -> bool:
    """The static type of ``e``: C decides it without evaluating anything."""
    if isinstance(e, Lit):
        return e.suffix == "" and e.value <= (1 << 63) - 1
    if isinstance(e, Arg):
        return table[types[e.k]][1]
    if isinstance(e, Cpu):
        return True
    if isinstance(e, CastTo):
        return table[e.ctype][1]
    if isinstance(e, Un):
        return True if e.op == "!" else is_signed(e.x, types, table)
    if isinstance(e, Cond):
        return is_signed(e.t, types, table) and is_signed(e.f, types, table)
    if e.op in ("<<", ">>"):
        return is_signed(e.a, types, table)
    if e.op in ("==", "!=", "<", "<=", ">", ">=", "&&", "||", "^^"):
        return True
    return is_signed(e.a, types, table) and is_signed(e.b, types, table)


def evaluate(e, types: dict[int, str], args: list[int], cpu: int = 0, table: dict = CTYPES) -> int:
    """``e``'s value as a 64-bit pattern; Fault when it divides by zero. ``table``: the machine's C types."""
    def ev(x) -> int:
        return evaluate(x, types, args, cpu, table)

    def signed(x) -> bool:
        return is_signed(x, types, table)

    if isinstance(e, Lit):
        return e.value & M
    if isinstance(e, Arg):
        bits, sign = table[types[e.k]]
        return reduce(args[e.k], bits, sign)
    if isinstance(e, Cpu):
        return cpu
    if isinstance(e, CastTo):
        bits, sign = table[e.ctype]
        return reduce(ev(e.x), bits, sign)
    if isinstance(e, Un):
        x = ev(e.x)
        return {"-": -x, "~": ~x, "!": int(x == 0), "+": x}[e.op] & M
    if isinstance(e, Cond):
        return ev(e.t) if ev(e.c) else ev(e.f)
    if e.op == "&&":
        return int(bool(ev(e.a)) and bool(ev(e.b)))
    if e.op == "||":
        return int(bool(ev(e.a)) or bool(ev(e.b)))
    a, b = ev(e.a), ev(e.b)
    if e.op == "^^":
        return int(bool(a) != bool(b))
    both = signed(e.a) and signed(e.b)
    x, y = (signed_of(a), signed_of(b)) if both else (a, b)
    if e.op in ("/", "%"):
        if y == 0:
            raise Fault()
        q = abs(x) // abs(y)
        if e.op == "/":
            return (q if (x < 0) == (y < 0) else -q) & M
        r = abs(x) - q * abs(y)
        return (r if x >= 0 else -r) & M
    if e.op == "<<":
        return (a << (b & 63)) & M
    if e.op == ">>":
        return ((signed_of(a) if signed(e.a) else a) >> (b & 63)) & M
    return {"+": x + y, "-": x - y, "*": x * y, "&": a & b, "|": a | b, "^": a ^ b, "==": int(x == y),
            "!=": int(x != y), "<": int(x < y), "<=": int(x <= y), ">": int(x > y), ">=": int(x >= y)}[e.op] & M


def has_variables(e) -> bool:
    if isinstance(e, (Arg, Cpu)):
        return True
    if isinstance(e, Lit):
        return False
    return any(has_variables(c) for c in parts(e))


def parts(e) -> tuple:
    if isinstance(e, (Un, CastTo)):
        return (e.x,)
    if isinstance(e, Bin):
        return (e.a, e.b)
    if isinstance(e, Cond):
        return (e.c, e.t, e.f)
    return ()


def divides_by_constant_zero(e, types: dict[int, str], table: dict = CTYPES) -> bool:
    """Whether a division's divisor has no variable and is 0 (or faults itself): the compiler refuses that."""
    if isinstance(e, Bin) and e.op in ("/", "%") and not has_variables(e.b):
        try:
            if evaluate(e.b, types, [0] * 6, 0, table) == 0:
                return True
        except Fault:
            return True
    return any(divides_by_constant_zero(c, types, table) for c in parts(e))


# -- DTrace's aggregating functions, from their definitions --------------------------------------------------
def quantize_bucket(v: int) -> int:
    """DTrace's dtrace_aggregate_quantize, as its loop defines the bucket of a signed value."""
    zero = 63

    def bucketval(b: int) -> int:
        return -(1 << (zero - 1 - b)) if b < zero else 0 if b == zero else 1 << (b - zero - 1)

    if v < 0:
        return next(i for i in range(zero) if v <= bucketval(i))
    for i in range(zero + 1, 127):
        if v < bucketval(i):
            return i - 1
    return 126


def lquantize_bucket(v: int, low: int, step: int, levels: int) -> int:
    """DTrace's dtrace_aggregate_lquantize."""
    if v < low:
        return 0
    for i in range(levels):
        if v < low + (i + 1) * step:
            return i + 1
    return levels + 1


def aggregate(func: str, values: list[int], low: int = 0, step: int = 0, levels: int = 0) -> list[int]:
    """What an aggregation of ``values`` (signed) holds, as the kernel keeps it (u64 words)."""
    if func == "count":
        return [len(values)]
    if func == "sum":
        return [sum(values) & M]
    if func in ("min", "max"):
        return [(min if func == "min" else max)(values) & M]
    if func == "avg":
        return [len(values), sum(values) & M]
    if func == "quantize":
        out = [0] * 127
        for v in values:
            out[quantize_bucket(v)] += 1
        return out
    out = [0] * (levels + 2)
    for v in values:
        out[lquantize_bucket(v, low, step, levels)] += 1
    return out


# -- text ---------------------------------------------------------------------------------------------
def render(e, minimal: bool) -> str:
    """Source text of ``e``: with only the parentheses C's precedence needs, or around every operation."""
    if isinstance(e, Lit):
        digits = f"{e.value:#x}" if e.hex else str(e.value)
        return digits + e.suffix
    if isinstance(e, Arg):
        return f"arg{e.k}"
    if isinstance(e, Cpu):
        return "cpu"
    if isinstance(e, (Un, CastTo)):
        inner = render(e.x, minimal)
        if not minimal or isinstance(e.x, (Bin, Cond)):
            inner = f"({inner})"
        head = f"({e.ctype})" if isinstance(e, CastTo) else e.op
        return f"{head} {inner}" if inner[0] in "-+" else f"{head}{inner}"
    if isinstance(e, Cond):
        c, t, f = (render(x, minimal) for x in (e.c, e.t, e.f))
        if not minimal or isinstance(e.c, Cond):
            c = f"({c})"
        if not minimal:
            t, f = f"({t})", f"({f})"
        return f"{c} ? {t} : {f}"
    a, b = render(e.a, minimal), render(e.b, minimal)
    if not minimal:
        return f"({a}) {e.op} ({b})"
    if isinstance(e.a, Cond) or (isinstance(e.a, Bin) and PREC[e.a.op] < PREC[e.op]):
        a = f"({a})"
    if isinstance(e.b, Cond) or (isinstance(e.b, Bin) and PREC[e.b.op] <= PREC[e.op]):
        b = f"({b})"
    return f"{a} {e.op} {b}"


# -- random trees -------------------------------------------------------------------------------------
INTERESTING = [0, 1, 2, 3, 7, 31, 32, 63, 64, 65, 127, 128, 255, 256, 4096, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               1 << 32, (1 << 63) - 1, 1 << 63, M]


def literals() -> st.SearchStrategy:
    value = st.one_of(st.sampled_from(INTERESTING), st.integers(0, 1000), st.integers(0, M))
    return st.builds(Lit, value, st.sampled_from(["", "", "u"]), st.booleans())


def expressions(nargs: int, depth: int = 5, table: dict = CTYPES) -> st.SearchStrategy:
    leaves = st.one_of(literals(), st.builds(Arg, st.integers(0, nargs - 1)) if nargs else literals(),
                       st.just(Cpu()))
    if depth == 0:
        return leaves
    sub = expressions(nargs, depth - 1, table)
    return st.one_of(leaves, leaves,
                     st.builds(Un, st.sampled_from(UNARY), sub),
                     st.builds(Bin, st.sampled_from(BINARY), sub, sub),
                     st.builds(Bin, st.sampled_from(BINARY), sub, sub),
                     st.builds(Cond, sub, sub, sub),
                     st.builds(CastTo, st.sampled_from(sorted(table)), sub))


def registers() -> st.SearchStrategy:
    """A register's word: edge values and random ones."""
    return st.one_of(st.sampled_from(INTERESTING), st.integers(0, M), st.integers(0, 300))
