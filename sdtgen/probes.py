"""Probes, sites and probe specs: the plain data passed from stage to stage."""

from __future__ import annotations

from sdtgen.plaindata import record

DEFAULT_PREFIX = "__dtrace_sdt_"
ISENABLED_PREFIX = "__dtrace_isenabled_"  # SDT_PROBE_ENABLED()'s call: the probe's symbol with this prefix
DESC_SECTION = ".sdt_desc"
DESC_MAGIC = "SDT1"
ARGTYPE_MAGIC = "SDTA"  # one argument's native and translated type (SDT_PROBE_ARGTYPE, the _XLATE forms)
MAX_ARGS = 6

# Validation patterns, compiled on first use: `re` costs start-up time scan does not need.
_PATTERNS = {
    "ident": r"[A-Za-z_][A-Za-z0-9_]{0,1023}",
    "field": r"[A-Za-z0-9_]{0,255}",
    "name": r"[A-Za-z0-9_-]{1,255}",
    "type": r"[A-Za-z_][A-Za-z0-9_ *\[\]]{0,127}",
}


def _matches(kind: str, text: str) -> bool:
    import re

    return re.fullmatch(_PATTERNS[kind], text) is not None


def probe_key(symbol: str) -> int:
    """The 32-bit event id a probe's events carry: FNV-1a of its stub's symbol, never 0."""
    h = 0x811C9DC5
    for b in symbol.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h or 1

@record(frozen=True)
class Probe:
    provider: str
    module: str
    function: str
    name: str  # as listed: "exec__success" in C lists as "exec-success"
    args: tuple[str, ...]
    symbol: str  # the stub the sites call
    described: bool = True  # False when only the symbol name was there to go by
    xargs: tuple[str, ...] = ()  # translated types, "" where an argument has none (all "" or empty: none)

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"

    @property
    def isenabled_symbol(self) -> str:
        """What SDT_PROBE_ENABLED() of this probe calls."""
        return ISENABLED_PREFIX + self.symbol[len(DEFAULT_PREFIX):]


def probe_symbol(symbol: str) -> str:
    """The probe a site's symbol belongs to: an is-enabled check's symbol names its probe's."""
    return DEFAULT_PREFIX + symbol[len(ISENABLED_PREFIX):] if symbol.startswith(ISENABLED_PREFIX) else symbol


@record(frozen=True)
class Site:
    probe: str  # provider:module:function:name
    symbol: str
    section: str
    offset: int  # of the instruction in its section
    text_offset: int | None  # from the start of .text (btext after the partial link)
    reloc: str
    form: str  # call, tail, cond, isen (an is-enabled check's call), goto (an asm goto's NOP) or ref
    length: int
    detail: str = ""
    function: str = ""  # enclosing function and offset: "vfs_lookup+0x1c"
    # A goto site's out-of-line target (where arming jumps): its section, offset and offset from .text's start.
    target_section: str = ""
    target: int | None = None
    target_text_offset: int | None = None

    @property
    def where(self) -> str:
        """The site's place in the one diagnostic format: ``section:function+0xoff`` (``section+0xoff``)."""
        from sdtgen.errors import place

        func, plus, off = self.function.rpartition("+")
        return place(self.section, func, int(off, 16)) if plus and func else place(self.section, None, self.offset)


@record
class ProbeSpec:
    """A DTrace probe description: provider:module:function:name, globs, empty matches all."""

    fields: tuple[str, str, str, str] = ("", "", "", "")

    @classmethod
    def parse(cls, text: str) -> ProbeSpec:
        if not text:  # as dtrace refuses an empty description; ":::" matches every probe explicitly
            raise ValueError("an empty probe spec names no probe")
        parts = text.split(":")
        if len(parts) > 4:
            raise ValueError(f"probe spec {text!r} has more than four fields (provider:module:function:name)")
        # Like dtrace: "name", "function:name", "module:function:name" fill from the right.
        full = [""] * (4 - len(parts)) + parts
        return cls((full[0], full[1], full[2], full[3]))

    def matches(self, probe) -> bool:
        """Whether ``probe`` (anything with provider, module, function and name) matches."""
        import fnmatch

        values = (probe.provider, probe.module, probe.function, probe.name)
        return all(not pat or fnmatch.fnmatchcase(val, pat) for pat, val in zip(self.fields, values, strict=True))


def listed_name(c_name: str) -> str:
    return c_name.replace("__", "-")


# C's keywords (C23 included): never a function name, so never a probe symbol.
C_KEYWORDS = frozenset([
    "alignas", "alignof", "auto", "bool", "break", "case", "char", "const", "constexpr", "continue",
    "default", "do", "double", "else", "enum", "extern", "false", "float", "for", "goto", "if", "inline",
    "int", "long", "nullptr", "register", "restrict", "return", "short", "signed", "sizeof", "static",
    "static_assert", "struct", "switch", "thread_local", "true", "typedef", "typeof", "typeof_unqual",
    "union", "unsigned", "void", "volatile", "while", "_Alignas", "_Alignof", "_Atomic", "_BitInt", "_Bool",
    "_Complex", "_Decimal128", "_Decimal32", "_Decimal64", "_Generic", "_Imaginary", "_Noreturn",
    "_Static_assert", "_Thread_local", "asm",
])


def is_c_identifier(name: str) -> bool:
    return _matches("ident", name) and name not in C_KEYWORDS


def probe_from_symbol(symbol: str, prefix: str) -> Probe:
    """Name a probe that has no descriptor (a direct call to a ``__dtrace_sdt_*`` function).

    The symbol alone cannot say where provider, module and function end, so the
    text up to the first underscore is the provider and the rest is the name:
    ``__dtrace_sdt_raw_hello`` lists as ``raw:::hello``.
    """
    rest = symbol[len(prefix):] if symbol.startswith(prefix) else symbol
    provider, _, name = rest.partition("_")
    if not name:  # "__fentry__" with prefix "__fentry__": the symbol is the name
        return Probe("", "", "", rest or symbol, (), symbol, described=False)
    return Probe(provider, "", "", listed_name(name), (), symbol, described=False)


class DescriptorError(ValueError):
    pass


class DescriptorConflict(DescriptorError):
    """Two records that cannot both hold: ``where`` is the later one's offset in the section,
    the message names the earlier one's."""

    def __init__(self, message: str, where: int, fix: str) -> None:
        super().__init__(message)
        self.where, self.fix = where, fix


RENAME_FIX = "rename one of them: a probe's stub symbol joins its four names with '_', so they must differ there too"
AGREE_FIX = ("define the probe once (SDT_PROBE_DEFINE in one file, SDT_PROBE_DECLARE in the others), with one "
             "list of argument types")


def parse_descriptors(blob: bytes) -> tuple[dict[str, Probe], dict[str, int]]:
    """Read the records ``sdt.h`` leaves in ``.sdt_desc``, one probe per stub symbol, and the offset of
    each one's first SDT1 record in the section (what a later refusal names).

    An SDTA record (SDT_PROBE_ARGTYPE, the _XLATE forms) sets one argument's native and
    translated type of a probe an SDT1 record defines, wherever in the section it lies. The same
    definition twice (a header included by several files) is one probe; two different definitions
    of one stub symbol are refused (``DescriptorConflict``), as FreeBSD's link refuses them: two
    probes whose names join to one symbol, or one probe defined with different argument types.
    """
    if not blob:
        return {}, {}
    if blob[-1:] != b"\0":
        raise DescriptorError("the descriptor section does not end with a NUL")
    tokens = blob[:-1].split(b"\0")
    starts, at = [], 0  # each token's offset in the section, for the places a conflict names
    for t in tokens:
        starts.append(at)
        at += len(t) + 1
    out: dict[str, Probe] = {}
    defined_at: dict[str, int] = {}
    argtypes: dict[str, dict[int, tuple[str, str, int]]] = {}  # symbol -> argument -> (type, xtype, offset)
    i = 0
    while i < len(tokens):
        if tokens[i] == b"":  # alignment padding between input sections
            i += 1
            continue
        if tokens[i] == ARGTYPE_MAGIC.encode():
            if i + 5 > len(tokens):
                raise DescriptorError("an argument type record is truncated")
            sym, num, ctype, xtype = _ascii(tokens[i + 1:i + 5], "an argument type record")
            if not num.isdigit() or int(num) >= MAX_ARGS:
                raise DescriptorError(f"probe {_quoted(sym)} types argument {_quoted(num)} (0 to {MAX_ARGS - 1} "
                                      "allowed)")
            k = int(num)
            earlier = argtypes.setdefault(sym, {}).setdefault(k, (ctype, xtype, starts[i]))
            if earlier[:2] != (ctype, xtype):
                raise DescriptorConflict(
                    f"probe {_quoted(sym)} types argument {k} as {_typed(ctype, xtype)} here and as "
                    f"{_typed(*earlier[:2])} at {DESC_SECTION}+{earlier[2]:#x}", starts[i], AGREE_FIX)
            i += 5
            continue
        if tokens[i] != DESC_MAGIC.encode():
            raise DescriptorError(f"unexpected token at record {len(out)}: expected {DESC_MAGIC}")
        if i + 7 > len(tokens):
            raise DescriptorError("a descriptor record is truncated")
        sym, prov, mod, func, name, nargs = _ascii(tokens[i + 1:i + 7], "a descriptor field")
        if not nargs.isdigit() or int(nargs) > MAX_ARGS:
            raise DescriptorError(f"probe {_quoted(sym)} declares {_quoted(nargs)} arguments (0 to {MAX_ARGS} allowed)")
        n = int(nargs)
        if i + 7 + n > len(tokens):
            raise DescriptorError(f"the argument types of {_quoted(sym)} are truncated")
        types = _ascii(tokens[i + 7:i + 7 + n], f"an argument type of {_quoted(sym)}")
        probe = Probe(prov, mod, func, listed_name(name), types, sym)
        first = out.setdefault(sym, probe)
        if first != probe:
            _conflict(first, probe, defined_at[sym], starts[i])
        defined_at.setdefault(sym, starts[i])
        i += 7 + n
    for sym, typed in argtypes.items():
        if sym not in out:
            raise DescriptorError(f"SDT_PROBE_ARGTYPE names probe {_quoted(sym)}, which no SDT_PROBE_DEFINE defines")
        out[sym] = _with_argtypes(out[sym], {k: t[:2] for k, t in typed.items()})
    for probe in out.values():
        problem = descriptor_problem(probe)
        if problem:
            raise DescriptorError(problem)
    return out, defined_at


def _conflict(first: Probe, second: Probe, first_at: int, second_at: int) -> None:
    earlier = f"{DESC_SECTION}+{first_at:#x}"
    if first.spec != second.spec:
        raise DescriptorConflict(
            f"probe {_quoted(second.spec)} and probe {_quoted(first.spec)} (defined at {earlier}) have one stub "
            f"symbol, {_quoted(second.symbol)}, so their sites and arguments would be merged", second_at, RENAME_FIX)
    raise DescriptorConflict(
        f"probe {_quoted(second.spec)} is defined here with arguments ({_quoted_list(second.args)}) and at {earlier} "
        f"with ({_quoted_list(first.args)})", second_at, AGREE_FIX)


def _typed(ctype: str, xtype: str) -> str:
    return f"{_quoted(ctype)} (translated {_quoted(xtype)})" if xtype else _quoted(ctype)


def _quoted_list(types: tuple[str, ...]) -> str:
    from sdtgen.errors import printable

    return ", ".join(printable(t) for t in types) or "none"


def _ascii(raw: list[bytes], what: str) -> tuple[str, ...]:
    try:
        return tuple(t.decode("ascii") for t in raw)
    except UnicodeDecodeError:
        raise DescriptorError(f"{what} is not ASCII") from None


def _with_argtypes(probe: Probe, typed: dict[int, tuple[str, str]]) -> Probe:
    """The probe with its SDTA records applied: native types filled in, translated types beside them."""
    n = max(len(probe.args), max(typed) + 1)
    args, xargs = list(probe.args) + [""] * (n - len(probe.args)), [""] * n
    for k, (ctype, xtype) in typed.items():
        args[k], xargs[k] = ctype, xtype
    missing = [k for k in range(n) if not args[k]]
    if missing:
        raise DescriptorError(f"probe {_quoted(probe.symbol)} types arguments up to {n - 1} but not argument "
                              f"{missing[0]}")
    from sdtgen.plaindata import replace

    return replace(probe, args=tuple(args), xargs=tuple(xargs) if any(xargs) else ())


def descriptor_problem(probe: Probe, prefix: str = DEFAULT_PREFIX) -> str:
    """Why a probe's names cannot be written into generated C or assembly ('' when they can).

    The symbol must carry the probe prefix: gen defines an empty function of that name, so a
    descriptor naming ``memcpy`` would replace the real one at link time.
    """
    if not is_c_identifier(probe.symbol):
        return f"probe symbol {_quoted(probe.symbol)} is not a valid C identifier"
    if not probe.symbol.startswith(prefix) or probe.symbol == prefix:
        return f"probe symbol {_quoted(probe.symbol)} does not start with the probe prefix {prefix}"
    for what, value in (("provider", probe.provider), ("module", probe.module), ("function", probe.function)):
        if not _matches("field", value):
            return f"probe {probe.symbol}: {what} {_quoted(value)} may hold only letters, digits and '_'"
    if not _matches("name", probe.name):
        return f"probe {probe.symbol}: name {_quoted(probe.name)} may hold only letters, digits, '_' and '-'"
    for t in probe.args + tuple(x for x in probe.xargs if x):
        if not _matches("type", t):
            return (f"probe {probe.symbol}: argument type {_quoted(t)} may hold only letters, digits, '_', ' ', "
                    "'*', '[]'")
    return ""


def _quoted(text: str) -> str:
    """A refused name, quoted, control characters escaped and a long one cut short."""
    from sdtgen.errors import printable

    return f"'{printable(text)}'"
