"""Clauses and an image's probes -> the programs its runtime runs (sdtgen/dscript/program.py's form).

Every value is 64 bits. An argument is read as its probe declares it (sdtgen/event_format.py): a
narrower integer is extended by its signedness, a ``char *`` is a string. An operation is unsigned when
either operand is (C's rule for 64-bit types), a comparison gives a signed 0 or 1, ``>>`` is arithmetic on a
signed value. Division and remainder truncate toward zero; by zero at run time, the clause stops and the
CPU counts an error; by a constant zero, the clause is refused. Shifts take their count modulo 64.

A clause's probes are grouped by the clauses that match them and the types of the arguments those
clauses read: each group gets one program, which lists its probes' keys (sdt_enable_program attaches it to
those only). Names (probeprov, probemod, probefunc, probename) are known per probe on the host: a
comparison of names and constants becomes a set of probe keys (PIN), a name as a key the probe's key,
which the consumer turns back into the name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sdtgen.dscript import program as pf
from sdtgen.dscript.parser import children
from sdtgen.dscript.tree import Aggregation, Binary, Cast, Clause, Int, Node, Str, Ternary, Unary, Var
from sdtgen.event_format import ArgType, arg_type
from sdtgen.layout import VALUES
from sdtgen.plaindata import factory, record, replace
from sdtgen.probes import ProbeSpec

MASK = (1 << 64) - 1
REGS = VALUES["SDT_PROG_REGS"]
MAX_ARGS = VALUES["SDT_MAX_ARGS"]
MAX_KEYS = VALUES["SDT_AGG_MAX_KEYS"]
MAX_VALS = VALUES["SDT_AGG_MAX_VALS"]
MAX_INSNS = VALUES["SDT_PROG_MAX_INSNS"]
MAX_AGGS = VALUES["SDT_PROG_MAX_AGGS"]
MAX_BYTES = VALUES["SDT_PROG_MAX_BYTES"]
MAX_STRING = VALUES["SDT_MAX_STRING"]
LQ_BOUND = 1 << 62  # the verifier's: |low| and levels * step below it
NAMES = {"probeprov": "provider", "probemod": "module", "probefunc": "function", "probename": "name"}
VARIABLES = "arg0..arg5, cpu, tid, curcontext, execname, probeprov, probemod, probefunc or probename"
# The task context (docs/runtime.md, Task context): curcontext's values, as sdt_hooks.task says them. `user` is
# SDT_CONTEXT_TASK (on behalf of a task: its system call, or the user task itself), also spelled `task`.
CONTEXT_WORDS = {"kernel": VALUES["SDT_CONTEXT_KERNEL"], "user": VALUES["SDT_CONTEXT_TASK"],
                 "task": VALUES["SDT_CONTEXT_TASK"], "interrupt": VALUES["SDT_CONTEXT_INTERRUPT"]}
# DTrace's built-in variables a kernel's program cannot read (it reads the firing's arguments, CPU, probe and task)
TIMES = ("timestamp", "vtimestamp", "walltimestamp")
CONTEXT = ("pid", "ppid", "uid", "gid", "curthread", "curpsinfo", "curlwpsinfo", "zonename",
           "errno", "caller", "ucaller", "epid", "id", "ipl", "uregs")


class ClauseError(ValueError):
    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


# -- what the compiler produces ------------------------------------------------------------------------------
@record(frozen=True)
class AggInfo:
    """An aggregation: its id in the kernel's tables, and how the consumer reads and prints its entries."""

    id: int
    name: str  # "" for @
    func: str
    keys: tuple[str, ...]  # per key: "int", "uint", or a probe name variable (probefunc ...)
    low: int = 0  # lquantize
    step: int = 0
    levels: int = 0

    @property
    def nvals(self) -> int:
        return {"avg": 2, "quantize": VALUES["SDT_AGG_QUANTIZE_BUCKETS"],
                "lquantize": self.levels + 2}.get(self.func, 1)


@record(frozen=True)
class Program:
    code: bytes  # what sdt_enable_program is given
    specs: tuple[str, ...]  # enable it with each (its probe keys narrow each to its probes)
    probes: tuple[str, ...]  # the probes it is for
    keys: tuple[int, ...]
    clauses: tuple[int, ...]


@record(frozen=True)
class Compiled:
    programs: tuple[Program, ...]
    aggregations: tuple[AggInfo, ...]
    names: dict[int, tuple[str, str, str, str]]  # probe key -> provider, module, function, name


# -- values --------------------------------------------------------------------------------------------------
@record(frozen=True)
class Const:
    value: int  # 0 .. 2^64 - 1
    signed: bool = True


@record(frozen=True)
class PerProbe:
    """An integer the host knows for each probe of the group (from their names)."""

    values: tuple[tuple[int, int], ...]  # (probe key, value)
    signed: bool = True


@record(frozen=True)
class Runtime:
    """An integer computed when the probe fires: ``emit(r)`` writes code leaving it in register r, using
    registers r .. r + need - 1."""

    emit: Callable[[int], None]
    need: int
    signed: bool
    boolean: bool = False  # 0 or 1 only
    fallible: bool = False  # may stop the clause (a division, a string read)
    load: tuple[int, int] | None = None  # a plain argument: (its number, SDT_EXT_*)
    guard: tuple[int, int, int, int] | None = None  # a test that must hold for the value not to be 0 (a header's)


@record(frozen=True)
class StrArg:
    k: int
    ctype: str


@record(frozen=True)
class Name:
    var: str  # probeprov ...


@record(frozen=True)
class StrConst:
    value: bytes


@record(frozen=True)
class TaskName:
    """execname: the current task's name, as the kernel's task hook gives it (compared only)."""


Value = Const | PerProbe | Runtime | StrArg | Name | StrConst | TaskName


def to_signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def fold(op: str, a: int, b: int, signed: bool) -> int:
    """``a op b`` as the runtime computes it (u64 operands, ``signed`` selects the signed operation)."""
    x, y = (to_signed(a), to_signed(b)) if signed else (a, b)
    if op in ("/", "%"):
        q, r = abs(x) // abs(y), abs(x) % abs(y)
        if op == "/":
            return (-q if (x < 0) != (y < 0) else q) & MASK
        return (-r if x < 0 else r) & MASK
    if op == "<<":
        return (a << (b & 63)) & MASK
    if op == ">>":
        return (x >> (b & 63)) & MASK
    return {"+": x + y, "-": x - y, "*": x * y, "&": a & b, "|": a | b, "^": a ^ b, "==": x == y, "!=": x != y,
            "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op] & MASK


COMPARE = ("==", "!=", "<", "<=", ">", ">=")
MIRROR = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
COMMUTES = ("+", "*", "&", "|", "^", "==", "!=")
ARITH_OPS = {"+": "ADD", "-": "SUB", "*": "MUL", "&": "AND", "|": "OR", "^": "XOR", "<<": "SHL"}
SIGNED_OPS = {"/": ("SDIV", "UDIV"), "%": ("SMOD", "UMOD"), ">>": ("SAR", "SHR"), "<": ("SLT", "ULT"),
              "<=": ("SLE", "ULE"), ">": ("SGT", "UGT"), ">=": ("SGE", "UGE"), "==": ("EQ", "EQ"),
              "!=": ("NE", "NE")}


def fits_imm(v: int) -> bool:
    return -(1 << 31) <= to_signed(v) < 1 << 31


# -- emitting code -------------------------------------------------------------------------------------------
class Steps:
    """A value's code as a flat run of steps, each given the register the value goes to: a chain a + b + c ...
    is emitted in a loop, not through calls nested as deep as the chain is long."""

    def __init__(self, steps: tuple[Callable[[int], None], ...]) -> None:
        self.steps = steps

    def __call__(self, r: int) -> None:
        for step in self.steps:
            step(r)


def then(first: Callable[[int], None], step: Callable[[int], None]) -> Steps:
    """Code that emits ``first`` and then ``step`` into the same register."""
    return Steps((first.steps if isinstance(first, Steps) else (first,)) + (step,))


class Label:
    pass


@record
class Emitter:
    """Instructions with labels, and the tables they name: resolved into a ProgramForm at the end."""

    items: list[pf.Insn | Label | tuple[str, int, int, Label]] = factory(list)
    consts: list[int] = factory(list)
    strings: bytearray = factory(bytearray)
    aggs: list[pf.AggDesc] = factory(list)
    nargs: int = 0
    _const_at: dict[tuple[int, ...], int] = factory(dict)
    _string_at: dict[bytes, int] = factory(dict)

    def op(self, name: str, dst: int = 0, a: int = 0, b: int = 0, imm: int = 0, with_imm: bool = False) -> None:
        self.items.append(pf.Insn(pf.OPS[name] | (pf.IMM if with_imm else 0), dst, a, b, imm))

    def jump(self, name: str, target: Label, a: int = 0) -> None:
        self.items.append((name, a, 0, target))

    def place(self, label: Label) -> None:
        self.items.append(label)

    def table(self, values: tuple[int, ...]) -> int:
        """The index of ``values`` as consecutive constants (shared with an equal run already there)."""
        if values not in self._const_at:
            self._const_at[values] = len(self.consts)
            self.consts += values
        return self._const_at[values]

    def string(self, s: bytes) -> int:
        if s not in self._string_at:
            self._string_at[s] = len(self.strings)
            self.strings += s + b"\0"
        return self._string_at[s]

    def load(self, r: int, v: int) -> None:
        if fits_imm(v):
            self.op("LDI", r, imm=to_signed(v))
        else:
            self.op("LDC", r, imm=self.table((v,)))

    def resolve(self) -> list[pf.Insn]:
        at, n = {}, 0
        for item in self.items:
            if isinstance(item, Label):
                at[id(item)] = n
            else:
                n += 1
        out = []
        for item in self.items:
            if isinstance(item, pf.Insn):
                out.append(item)
            elif isinstance(item, tuple):
                name, a, _, target = item
                out.append(pf.Insn(pf.OPS[name], 0, a, 0, at[id(target)]))
        return out


# -- one group's program -------------------------------------------------------------------------------------
class Group:
    """The probes one program serves: they match the same clauses and declare the same argument types."""

    def __init__(self, probes: list, clauses: list[Clause], types: dict[int, ArgType], ctypes: dict[int, str],
                 bits: int, registry: Registry) -> None:
        self.probes = probes
        self.keys = tuple(sorted(p.key for p in probes))
        self.clauses = clauses
        self.types, self.ctypes = types, ctypes
        self.bits = bits
        self.registry = registry
        self.e = Emitter()
        self.descs: dict[int, int] = {}  # aggregation id -> its descriptor in this program

    # -- checking and folding ---------------------------------------------------------------------------
    def value(self, node: Node) -> Value:
        if isinstance(node, Int):
            return Const(node.value & MASK, not node.unsigned)
        if isinstance(node, Str):
            if b"\0" in node.value:
                raise ClauseError("a string constant holds a NUL byte", "the kernel compares strings up to their NUL")
            if len(node.value) > MAX_STRING:
                raise ClauseError(f"a string constant is {len(node.value)} bytes, longer than the {MAX_STRING} the "
                                  "kernel compares", "shorten it")
            return StrConst(node.value)
        if isinstance(node, Var):
            return self.variable(node)
        if isinstance(node, Cast):
            return self.cast(node)
        if isinstance(node, Unary):
            return self.unary(node)
        if isinstance(node, Binary):
            spine = []  # a flat chain a || b || c ... is a left-deep tree: walked in a loop, not recursed through
            while isinstance(node, Binary):
                spine.append(node)
                node = node.left
            left = self.value(node)
            for b in reversed(spine):
                left = self.binary(b, left)
            return left
        if isinstance(node, Ternary):
            return self.ternary(node)
        raise ClauseError(f"{type(node).__name__} is not an expression")

    def variable(self, node: Var) -> Value:
        name = node.name
        if name in NAMES:
            return Name(name)
        if name == "cpu":
            return Runtime(lambda r: self.e.op("LDCPU", r), 1, True)
        if name in ("tid", "curcontext"):  # fallible: a kernel without the task hook counts an error
            field = pf.TASK_FIELDS["id" if name == "tid" else "context"]
            return Runtime(lambda r: self.e.op("LDTASK", r, b=field), 1, name != "tid", fallible=True)
        if name in CONTEXT_WORDS:
            return Const(CONTEXT_WORDS[name])
        if name == "execname":
            return TaskName()
        if name in TIMES:
            raise ClauseError(f"DTrace's {name} is not supported: a program reads no clock",
                              "record the firings (a clause without aggregations): the trace holds each one's time")
        if name in CONTEXT:
            raise ClauseError(f"DTrace's {name} is not supported: a program reads only the firing's arguments, CPU, "
                              "probe and task", f"pass it as a probe argument, or use {VARIABLES}")
        k = arg_index(name)
        if k is None:
            raise ClauseError(f"unknown variable {name!r}", f"use {VARIABLES}")
        t = self.types[k]
        if t.kind == "str":
            return StrArg(k, self.ctypes[k])
        ext, signed = extension(t, self.bits)

        def emit(r: int) -> None:
            self.e.nargs = max(self.e.nargs, k + 1)
            self.e.op("LDARG", r, k, pf.EXT[ext])
        return Runtime(emit, 1, signed, load=(k, pf.EXT[ext]))

    def integer(self, v: Value, node: Node) -> Const | PerProbe | Runtime:
        """``v`` where an integer is needed; a string is refused, saying what it is."""
        if isinstance(v, StrArg):
            raise ClauseError(f"arg{v.k} is a string ({v.ctype}) in {self.named_probes()}, not an integer",
                              "compare it with a string constant (arg == \"...\")")
        if isinstance(v, Name):
            raise ClauseError(f"{v.var} is a string, not an integer", "compare it with a string constant")
        if isinstance(v, StrConst):
            raise ClauseError("a string constant is not an integer")
        if isinstance(v, TaskName):
            raise ClauseError("execname is a string, not an integer", "compare it with a string constant, or use tid")
        return v

    def named_probes(self) -> str:
        specs = sorted(p.spec for p in self.probes)
        return specs[0] + (f" (and {len(specs) - 1} more probes)" if len(specs) > 1 else "")

    def per_probe(self, fn: Callable[[object], int], signed: bool) -> Const | PerProbe:
        values = tuple((p.key, fn(p) & MASK) for p in sorted(self.probes, key=lambda p: p.key))
        distinct = {v for _, v in values}
        return Const(distinct.pop(), signed) if len(distinct) == 1 else PerProbe(values, signed)

    @staticmethod
    def known(v: Value, probe) -> int:
        return v.value if isinstance(v, Const) else dict(v.values)[probe.key]

    def runtime(self, v: Const | PerProbe | Runtime) -> Runtime:
        if isinstance(v, Runtime):
            return v
        if isinstance(v, Const):
            return Runtime(lambda r: self.e.load(r, v.value), 1, v.signed, v.value in (0, 1))
        sets: dict[int, list[int]] = {}
        for key, value in v.values:
            sets.setdefault(value, []).append(key)
        boolean = set(sets) <= {0, 1}

        def emit(r: int) -> None:
            if boolean:
                self.pin(r, sets[1])
                return
            self.e.op("LDI", r, imm=0)
            for value, keys in sorted(sets.items()):
                if value == 0:
                    continue
                self.pin(r + 1, keys)
                if value != 1:
                    self.e.load(r + 2, value)
                    self.e.op("MUL", r + 1, r + 1, r + 2)
                self.e.op("ADD", r, r, r + 1)
        return Runtime(emit, 1 if boolean else 3, v.signed, boolean)

    def pin(self, r: int, keys: list[int]) -> None:
        keys = tuple(sorted(keys))
        at = self.e.table(keys)
        if at > 0xFFFF or len(keys) > 0xFFFF:
            raise ClauseError("the probes' names make a set too large for one program", "match fewer probes")
        self.e.op("PIN", r, imm=at | len(keys) << 16)

    def cast(self, node: Cast) -> Value:
        t = arg_type(node.ctype, self.bits)
        if t.kind == "str":
            raise ClauseError(f"cannot cast to ({node.ctype}): strings are compared, never made",
                              "cast to an integer type")
        v = self.integer(self.value(node.operand), node.operand)
        width, signed = min(t.bits, 64), t.kind == "int"

        def convert(x: int) -> int:
            x &= (1 << width) - 1
            return (x - (1 << width) if signed and x >> (width - 1) else x) & MASK

        if isinstance(v, Const):
            return Const(convert(v.value), signed)
        if isinstance(v, PerProbe):
            return PerProbe(tuple((k, convert(x)) for k, x in v.values), signed)
        if width == 64:
            return Runtime(v.emit, v.need, signed, v.boolean, v.fallible)
        inner = v

        def narrow(r: int) -> None:
            self.e.op("SHL", r, r, imm=64 - width, with_imm=True)
            self.e.op("SAR" if signed else "SHR", r, r, imm=64 - width, with_imm=True)
        return Runtime(then(inner.emit, narrow), inner.need, signed, False, inner.fallible)

    def unary(self, node: Unary) -> Value:
        v = self.integer(self.value(node.operand), node.operand)
        if node.op == "+":
            return v
        fn = {"-": lambda x: -x, "~": lambda x: ~x, "!": lambda x: int(x == 0)}[node.op]
        signed = True if node.op == "!" else v.signed
        if isinstance(v, Const):
            return Const(fn(v.value) & MASK, signed)
        if isinstance(v, PerProbe):
            return PerProbe(tuple((k, fn(x) & MASK) for k, x in v.values), signed)
        inner, name = v, {"-": "NEG", "~": "NOT", "!": "LNOT"}[node.op]
        return Runtime(then(inner.emit, lambda r: self.e.op(name, r, r)), inner.need, signed, node.op == "!",
                       inner.fallible)

    def binary(self, node: Binary, left: Value) -> Value:
        """``node`` whose left operand's value is ``left``."""
        if node.op in ("&&", "||", "^^"):
            return self.logical(node, left)
        right = self.value(node.right)
        strings = (StrArg, Name, StrConst, TaskName)
        if node.op in COMPARE and (isinstance(left, strings) or isinstance(right, strings)):
            return self.compare_strings(node, left, right)
        left, right = self.integer(left, node.left), self.integer(right, node.right)
        if node.op in ("<<", ">>"):
            signed = left.signed
        elif node.op in COMPARE:
            signed = True
        else:
            signed = left.signed and right.signed
        operate_signed = left.signed and right.signed  # the operation's own signedness (division, compares)
        if node.op == ">>":
            operate_signed = left.signed
        if node.op in ("/", "%") and isinstance(right, Const) and right.value == 0:
            raise ClauseError("divides by zero" if node.op == "/" else "takes a remainder of a division by zero",
                              "divide by something else")
        known = (Const, PerProbe)
        op = node.op
        if isinstance(left, Const) and not isinstance(right, known) and (op in COMMUTES or op in COMPARE):
            left, right, op = right, left, MIRROR.get(op, op)  # the constant as the immediate (it has no effect)
        if isinstance(left, known) and isinstance(right, known):
            if isinstance(left, Const) and isinstance(right, Const):
                return Const(fold(node.op, left.value, right.value, operate_signed), signed)
            if node.op in ("/", "%") and any(self.known(right, p) == 0 for p in self.probes):
                raise ClauseError("divides by zero for some of its probes", "divide by something else")
            return self.per_probe(lambda p: fold(node.op, self.known(left, p), self.known(right, p), operate_signed),
                                  signed)
        return self.operate(op, self.runtime(left), self.runtime(right), right, operate_signed, signed,
                            op in COMPARE)

    def operate(self, op: str, left: Runtime, right: Runtime, right_value: Value, operate_signed: bool,
                signed: bool, boolean: bool) -> Runtime:
        """Code for ``left op right`` (an immediate right operand when it is a small constant)."""
        name = ARITH_OPS.get(op) or SIGNED_OPS[op][0 if operate_signed else 1]
        fallible = left.fallible or right.fallible or (op in ("/", "%") and not isinstance(right_value, Const))
        if isinstance(right_value, Const) and fits_imm(right_value.value):
            imm = to_signed(right_value.value)

            guard = (pf.OPS[name], *left.load, imm) if boolean and left.load else None
            return Runtime(then(left.emit, lambda r: self.e.op(name, r, r, imm=imm, with_imm=True)), left.need,
                           signed, boolean, fallible, guard=guard)

        def with_right(r: int) -> None:
            self.check_registers(r + 1 + right.need)
            right.emit(r + 1)
            self.e.op(name, r, r, r + 1)
        return Runtime(then(left.emit, with_right), max(left.need, 1 + right.need), signed, boolean, fallible)

    def check_registers(self, top: int) -> None:
        if top > REGS:
            raise ClauseError(f"an expression needs more than the runtime's {REGS} registers",
                              "split it, or nest it less to the right")

    def compare_strings(self, node: Binary, left: Value, right: Value) -> Value:
        op = node.op
        if isinstance(left, StrConst) and not isinstance(right, StrConst):
            left, right, op = right, left, MIRROR[op]
        ints = (Const, PerProbe, Runtime)
        if isinstance(left, ints) or isinstance(right, ints):
            string = right if isinstance(left, ints) else left
            what = f"arg{string.k} is a string ({string.ctype}) in {self.named_probes()}, compared" \
                if isinstance(string, StrArg) else "compares a string"
            raise ClauseError(f"{what} with an integer ({op})", "compare a string with a string constant")

        def text(v: Value, p) -> bytes:
            return v.value if isinstance(v, StrConst) else getattr(p, NAMES[v.var]).encode()

        def order(a: bytes, b: bytes) -> int:
            return (a > b) - (a < b)

        if isinstance(left, (Name, StrConst)) and isinstance(right, (Name, StrConst)):
            return self.per_probe(lambda p: fold(op, order(text(left, p), text(right, p)) & MASK, 0, True), True)
        if isinstance(left, TaskName) and isinstance(right, StrConst):
            at, name = self.e.string(right.value), SIGNED_OPS[op][0]

            def emit_task(r: int) -> None:
                self.e.op("TASKCMP", r, imm=at)
                self.e.op(name, r, r, imm=0, with_imm=True)
            return Runtime(emit_task, 1, True, True, True)
        if isinstance(left, TaskName) or isinstance(right, TaskName):
            raise ClauseError("execname is compared only with a string constant",
                              "compare each string with a constant")
        if not (isinstance(left, StrArg) and isinstance(right, StrConst)):
            raise ClauseError("a string argument is compared only with a string constant",
                              "compare each string with a constant")
        at, k = self.e.string(right.value), left.k
        name = SIGNED_OPS[op][0]

        def emit(r: int) -> None:
            self.e.nargs = max(self.e.nargs, k + 1)
            self.e.op("STRCMP", r, k, imm=at)
            self.e.op(name, r, r, imm=0, with_imm=True)
        return Runtime(emit, 1, True, True, True)

    def logical(self, node: Binary, left: Value) -> Value:
        left = self.integer(left, node.left)
        right = self.integer(self.value(node.right), node.right)
        known = (Const, PerProbe)
        truth = {"&&": lambda a, b: int(bool(a) and bool(b)), "||": lambda a, b: int(bool(a) or bool(b)),
                 "^^": lambda a, b: int(bool(a) != bool(b))}[node.op]
        if isinstance(left, known) and isinstance(right, known):
            return self.per_probe(lambda p: truth(self.known(left, p), self.known(right, p)), True)
        if isinstance(left, Const) and node.op != "^^":  # decided, or the right operand alone decides
            if bool(left.value) == (node.op == "||"):
                return Const(int(node.op == "||"))
            return self.boolean(self.runtime(right))
        if isinstance(right, Const) and node.op != "^^" and bool(right.value) == (node.op == "&&"):
            return self.boolean(self.runtime(left))  # x && 1, x || 0: x alone decides (and is still run)
        a, b = self.runtime(left), self.runtime(right)
        fallible = a.fallible or b.fallible
        if node.op == "^^":
            a, b = self.boolean(a), self.boolean(b)

            def xor(r: int) -> None:
                self.check_registers(r + 1 + b.need)
                b.emit(r + 1)
                self.e.op("XOR", r, r, r + 1)
            return Runtime(then(a.emit, xor), max(a.need, 1 + b.need), True, True, fallible)
        jump = "JZ" if node.op == "&&" else "JNZ"
        exact = b.boolean and (node.op == "&&" or a.boolean)  # r holds 0 or 1 on both paths already

        def decided(r: int) -> None:
            done = Label()
            self.e.jump(jump, done, r)
            b.emit(r)
            self.e.place(done)
            if not exact:
                self.e.op("NE", r, r, imm=0, with_imm=True)
        # a && b is 0 unless a holds, and unless b holds when a cannot stop the clause first
        guard = (a.guard or (None if a.fallible else b.guard)) if node.op == "&&" else None
        return Runtime(then(a.emit, decided), max(a.need, b.need), True, True, fallible, guard=guard)

    def boolean(self, v: Runtime) -> Runtime:
        if v.boolean:
            return v

        return Runtime(then(v.emit, lambda r: self.e.op("NE", r, r, imm=0, with_imm=True)), v.need, True, True,
                       v.fallible, guard=v.guard)

    def ternary(self, node: Ternary) -> Value:
        cond = self.integer(self.value(node.cond), node.cond)
        then = self.integer(self.value(node.then), node.then)
        other = self.integer(self.value(node.other), node.other)
        signed = then.signed and other.signed
        if isinstance(cond, Const):  # the branch chosen, with the type of the whole (C's usual conversions)
            chosen = then if cond.value else other
            if isinstance(chosen, Const):
                return Const(chosen.value, signed)
            if chosen.signed == signed:
                return chosen
            if isinstance(chosen, PerProbe):
                return replace(chosen, signed=signed)
            return replace(chosen, signed=signed, load=None, guard=None)  # both assume the argument's own type
        known = (Const, PerProbe)
        if isinstance(cond, PerProbe) and isinstance(then, known) and isinstance(other, known):
            return self.per_probe(lambda p: self.known(then if self.known(cond, p) else other, p), signed)
        c, t, o = self.runtime(cond), self.runtime(then), self.runtime(other)

        def emit(r: int) -> None:
            otherwise, done = Label(), Label()
            c.emit(r)
            self.e.jump("JZ", otherwise, r)
            t.emit(r)
            self.e.jump("JA", done)
            self.e.place(otherwise)
            o.emit(r)
            self.e.place(done)
        return Runtime(emit, max(c.need, t.need, o.need), signed, t.boolean and o.boolean,
                       c.fallible or t.fallible or o.fallible)

    # -- clauses ------------------------------------------------------------------------------------------
    def aggregation(self, agg: Aggregation) -> tuple[int, list[Value], Runtime | None]:
        """The program's descriptor of ``agg``, its keys and its value."""
        nargs = {"count": (0, 0), "lquantize": (3, 4)}.get(agg.func, (1, 1))
        if not nargs[0] <= len(agg.args) <= nargs[1]:
            want = "no argument" if nargs[1] == 0 else "(value, low, high[, step])" if agg.func == "lquantize" \
                else "one argument"
            raise ClauseError(f"{agg.func}() takes {want}, not {len(agg.args)}")
        if len(agg.keys) > MAX_KEYS:
            raise ClauseError(f"{display(agg.name)} has {len(agg.keys)} keys, more than the {MAX_KEYS} the kernel's "
                              "tables keep", "use fewer keys")
        keys, kinds = [], []
        for key in agg.keys:
            v = self.value(key)
            if isinstance(v, Name):
                keys.append(Runtime(lambda r: self.e.op("LDPROBE", r), 1, False))
                kinds.append(v.var)
                continue
            if isinstance(v, (StrArg, StrConst, TaskName)):
                what = f"arg{v.k} is a string ({v.ctype})" if isinstance(v, StrArg) else "execname is a string" \
                    if isinstance(v, TaskName) else "a string constant"
                raise ClauseError(f"{what}: an aggregation's keys are integers and probe names",
                                  "key by an integer (tid: the trace's task events name each), or by "
                                  "probefunc/probename")
            v = self.integer(v, key)
            keys.append(self.runtime(v))
            kinds.append("int" if v.signed else "uint")
        params = (0, 0, 0)
        if agg.func == "lquantize":
            params = self.lquantize_params(agg.args[1:])
        value = None
        if agg.args:
            value = self.runtime(self.integer(self.value(agg.args[0]), agg.args[0]))
        info = self.registry.use(agg, tuple(kinds), params)
        if info.id not in self.descs:
            if len(self.e.aggs) == MAX_AGGS:
                raise ClauseError(f"the clauses of these probes update more than {MAX_AGGS} aggregations",
                                  "split the script")
            self.descs[info.id] = len(self.e.aggs)
            self.e.aggs.append(pf.AggDesc(info.id, pf.FUNCS[info.func], len(kinds), info.nvals, info.low,
                                          info.step, info.levels))
        return self.descs[info.id], keys, value

    def lquantize_params(self, args: tuple[Node, ...]) -> tuple[int, int, int]:
        got = []
        for arg in args:
            v = self.integer(self.value(arg), arg)
            if not isinstance(v, Const):
                raise ClauseError("lquantize()'s low, high and step are integer constants")
            got.append(to_signed(v.value))
        low, high, step = got + [1] * (3 - len(got))
        if step < 1:
            raise ClauseError(f"lquantize()'s step is {step}", "give a step of 1 or more")
        if high <= low:
            raise ClauseError(f"lquantize()'s high bound {high} is not above its low bound {low}")
        levels = (high - low) // step
        if levels < 1:
            raise ClauseError(f"lquantize() has no bucket between {low} and {high} with step {step}")
        if levels + 2 > MAX_VALS:
            raise ClauseError(f"lquantize() has {levels} levels, more than the {MAX_VALS - 2} an entry keeps",
                              "use a larger step or a narrower range")
        if abs(low) > LQ_BOUND or levels * step > LQ_BOUND:
            raise ClauseError("lquantize()'s range does not fit 62 bits", "use a smaller range")
        return low, step, levels

    def compile(self, text_of: Callable[[Clause], str]) -> bytes:
        e = self.e
        end = Label()
        single = len(self.clauses) == 1 and self.clauses[0].record
        guard = pf.NO_GUARD
        for clause in self.clauses:
            with error_context(clause, text_of):
                pred = self.integer(self.value(clause.predicate), clause.predicate) if clause.predicate else Const(1)
                actions = [self.aggregation(a) for a in clause.actions]
            if isinstance(pred, Const) and not pred.value:
                continue  # never true: nothing to run (checked all the same)
            pred_rt = None if isinstance(pred, Const) else self.runtime(pred)
            if len(self.clauses) == 1 and pred_rt is not None and pred_rt.guard:
                guard = guard_test(*pred_rt.guard, self.bits) or pf.NO_GUARD  # the recorder tests it first
            fallible = (pred_rt is not None and pred_rt.fallible) or any(
                k.fallible for _, keys, _ in actions for k in keys) or any(v and v.fallible for _, _, v in actions)
            skip = Label()
            with error_context(clause, text_of):
                if fallible:
                    e.jump("CATCH", skip)
                if pred_rt is not None:
                    self.check_registers(pred_rt.need)
                    pred_rt.emit(0)
                    if single:
                        e.op("RECNZ", a=0)
                        e.place(skip)
                        continue
                    e.jump("JZ", skip, 0)
                for desc, keys, value in actions:
                    for k, key in enumerate(keys):
                        self.check_registers(k + key.need)
                        key.emit(k)
                    if value is not None:
                        self.check_registers(len(keys) + value.need)
                        value.emit(len(keys))
                    e.op("AGG", 0, len(keys) if value is not None else 0, desc)
                if clause.snapshot:
                    e.op("SNAPSHOT")
                if clause.record:
                    e.op("REC")
            e.place(skip)
        e.place(end)
        e.op("EXIT")
        insns = e.resolve()
        where = ", ".join(str(c.number) for c in self.clauses)
        if len(insns) > MAX_INSNS:
            several = len(self.clauses) > 1
            raise ClauseError(f"clause{'s' if several else ''} {where} compile{'' if several else 's'} to "
                              f"{len(insns)} instructions for {self.named_probes()}, more than the {MAX_INSNS} of a "
                              "program", "simplify the predicate or the keys (a test of an argument or cpu takes about "
                              "3 instructions; tests of probe names, one for all of them: the host decides them)")
        code = pf.encode(pf.ProgramForm(tuple(insns), tuple(e.aggs), tuple(e.consts), self.keys, bytes(e.strings),
                                        e.nargs, guard=guard))
        if len(code) > MAX_BYTES:
            raise ClauseError(f"clauses {where} compile to {len(code)} bytes, more than the {MAX_BYTES} of a program",
                              "match fewer probes with probe names")
        return code


class error_context:
    """ClauseError inside names the clause: ``clause N (TEXT): message``."""

    def __init__(self, clause: Clause, text_of: Callable[[Clause], str]) -> None:
        self.clause, self.text_of = clause, text_of

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if isinstance(err, ClauseError) and not getattr(err, "placed", False):
            placed = ClauseError(f"clause {self.clause.number} ({self.text_of(self.clause)}): {err}", err.fix)
            placed.placed = True
            raise placed from None
        return False


def guard_test(op: int, arg: int, ext: int, imm: int, word_bits: int) -> tuple[int, int, int, int, int] | None:
    """The guard a recorder tests for ``extend(argument, ext) OP imm`` (sdtgen/layout.py, PROGRAM): (argument, shift,
    flip, lo, span), or None when the test is always or never true (no interval says it; the program decides).

    The argument's low ``width`` bits, shifted to the top of a word, with bit 63 flipped when the order is the
    signed one, order the patterns as the comparison orders their extended values; the patterns that pass are
    then one interval of them (a point's complement for NE), which (y - lo) <= span tests."""
    name = pf.OP_NAMES[op]
    exts = {v: k for k, v in pf.EXT.items()}
    kind = exts[ext]
    width = word_bits if kind == "WORD" else int(kind[1:])
    sign_extends = kind.startswith("S")
    signed_compare = name in ("SLT", "SLE", "SGT", "SGE")
    flip = int(signed_compare and (sign_extends or width == 64))
    shift, n = 64 - width, 1 << width

    def value(t: int) -> int:
        """The t-th pattern, in the comparison's order, as the comparison sees it."""
        pattern = t ^ (1 << (width - 1)) if flip else t
        v = pattern - n if sign_extends and pattern >> (width - 1) else pattern
        return to_signed(v & MASK) if signed_compare else v & MASK

    c = to_signed(imm & MASK) if signed_compare else imm & MASK

    def first(holds: Callable[[int], bool]) -> int:
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if holds(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    below, upto = first(lambda t: value(t) >= c), first(lambda t: value(t) > c)
    if name == "NE":
        if below == upto:
            return None
        return arg, shift, flip, ((below + 1) << shift) & MASK, (n - 2) << shift
    t0, t1 = {"EQ": (below, upto - 1), "SLT": (0, below - 1), "ULT": (0, below - 1), "SLE": (0, upto - 1),
              "ULE": (0, upto - 1), "SGT": (upto, n - 1), "UGT": (upto, n - 1), "SGE": (below, n - 1),
              "UGE": (below, n - 1)}[name]
    if t0 > t1 or (t0, t1) == (0, n - 1):
        return None
    return arg, shift, flip, t0 << shift, (t1 - t0) << shift


def display(name: str) -> str:
    return f"@{name}" if name else "@"


def arg_index(name: str) -> int | None:
    if name.startswith("arg") and name[3:].isdigit() and (name == "arg0" or not name[3:].startswith("0")):
        return int(name[3:])
    return None


def extension(t: ArgType, bits: int) -> tuple[str, bool]:
    """How LDARG reads an argument of type ``t`` on a ``bits``-bit CPU, and whether the value is signed."""
    signed = t.kind == "int"
    width = min(t.bits, bits)
    if width >= 64:
        return "WORD", signed
    return f"{'S' if signed else 'U'}{width}", signed


class Registry:
    """Aggregations by name across every clause: one id each, one function, one shape."""

    def __init__(self, first_id: int, declared: list[str]) -> None:
        self.first_id = first_id
        self.by_name: dict[str, AggInfo] = {}
        self.order = {name: i for i, name in enumerate(dict.fromkeys(declared))}  # ids in declaration order

    def use(self, agg: Aggregation, kinds: tuple[str, ...], params: tuple[int, int, int]) -> AggInfo:
        low, step, levels = params
        have = self.by_name.get(agg.name)
        if have is None:
            have = AggInfo(self.first_id + self.order[agg.name], agg.name, agg.func, kinds, low, step, levels)
            self.by_name[agg.name] = have
            return have
        if have.func != agg.func or (have.low, have.step, have.levels) != (low, step, levels):
            was = have.func + (f"({have.low}..{have.low + have.levels * have.step} by {have.step})"
                               if have.func == "lquantize" else "()")
            raise ClauseError(f"{display(agg.name)} is {was} elsewhere, {agg.func}() here",
                              "give each aggregating function its own aggregation")
        if len(have.keys) != len(kinds):
            raise ClauseError(f"{display(agg.name)} has {len(have.keys)} keys elsewhere, {len(kinds)} here",
                              "key an aggregation the same way in every clause")
        merged = []
        for k, (a, b) in enumerate(zip(have.keys, kinds, strict=True)):
            if a == b:
                merged.append(a)  # a probe name stays the name it keys by, in every program that updates it
                continue
            if {a, b} == {"int", "uint"}:
                merged.append("int")  # signed wherever it is signed once
                continue
            raise ClauseError(f"{display(agg.name)}'s key {k + 1} is {a} elsewhere, {b} here",
                              "key an aggregation the same way in every clause")
        have = AggInfo(have.id, have.name, have.func, tuple(merged), low, step, levels)
        self.by_name[agg.name] = have
        return have


def referenced_args(clause: Clause) -> set[int]:
    nodes: list[Node] = [clause.predicate] if clause.predicate else []
    for a in clause.actions:
        nodes += [*a.keys, *a.args]
    found = set()
    while nodes:
        n = nodes.pop()
        if isinstance(n, Var) and arg_index(n.name) is not None:
            found.add(arg_index(n.name))
        nodes += children(n)
    return found


def compile_clauses(clauses: list[Clause], probes: Iterable, bits: int, first_id: int = 1,
                    text_of: Callable[[Clause], str] = lambda c: c.text) -> Compiled:
    """Programs for ``clauses`` over the image's ``probes`` (anything with provider, module, function, name, args
    (their C types), key and spec); ClauseError naming the clause for whatever the runtime could not run."""
    probes = list(probes)
    matched: dict[int, list] = {}
    for clause in clauses:
        with error_context(clause, text_of):
            patterns = []
            for spec in clause.specs:
                try:
                    patterns.append(ProbeSpec.parse(spec))
                except ValueError as e:
                    raise ClauseError(str(e), "give provider:module:function:name") from None
                if len(spec.encode()) > 1024:
                    raise ClauseError("its probe description is longer than 1024 bytes")
            hits = [p for p in probes if any(pat.matches(p) for pat in patterns)]
            if not hits:
                raise ClauseError(f"{', '.join(clause.specs)} matches no probe of the image",
                                  "list them with `sdtgen probes IMAGE`")
            refs = referenced_args(clause)
            bad = sorted(k for k in refs if k >= MAX_ARGS)
            if bad:
                raise ClauseError(f"arg{bad[0]}: a probe has at most {MAX_ARGS} arguments (arg0..arg{MAX_ARGS - 1})")
            for p in hits:
                missing = sorted(k for k in refs if k >= len(p.args))
                if missing:
                    n = len(p.args)
                    raise ClauseError(f"arg{missing[0]}: probe {p.spec} has {n} argument{'' if n == 1 else 's'}"
                                      + (f" (arg0..arg{n - 1})" if n > 1 else " (arg0)" if n == 1 else ""),
                                      "match only probes that have it, or read another argument")
            matched[clause.number] = hits
    by_probe: dict[int, tuple] = {}
    groups: dict[tuple, list] = {}
    for p in probes:
        which = tuple(c for c in clauses if any(h is p for h in matched[c.number]))
        if not which:
            continue
        refs = sorted(set().union(*(referenced_args(c) for c in which)))
        types = tuple((k, arg_type(p.args[k], bits), p.args[k]) for k in refs)
        key = (tuple(c.number for c in which), tuple((k, t) for k, t, _ in types))
        by_probe[p.key] = key
        groups.setdefault(key, []).append((p, which, types))
    # ids follow the order the script first names each aggregation: printa prints them in it, as DTrace does
    registry = Registry(first_id, [a.name for c in clauses for a in c.actions])
    programs = []
    for members in groups.values():
        group_probes = [p for p, _, _ in members]
        which, types = members[0][1], members[0][2]
        g = Group(group_probes, list(which), {k: t for k, t, _ in types}, {k: c for k, _, c in types}, bits, registry)
        try:
            code = g.compile(text_of)
        except ClauseError as e:
            if getattr(e, "placed", False):
                raise
            placed = ClauseError(str(e), e.fix)
            placed.placed = True
            raise placed from None
        specs = []
        for c in which:
            for spec in c.specs:
                pat = ProbeSpec.parse(spec)
                if spec not in specs and any(pat.matches(p) for p in group_probes):
                    specs.append(spec)
        programs.append(Program(code, tuple(specs), tuple(sorted(p.spec for p in group_probes)), g.keys,
                                tuple(c.number for c in which)))
    names = {p.key: (p.provider, p.module, p.function, p.name) for p in probes}
    return Compiled(tuple(programs), tuple(sorted(registry.by_name.values(), key=lambda a: a.id)), names)
