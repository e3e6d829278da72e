"""What a kernel's C source itself declares of its probes, read from the source text (an oracle for
the tests and the matrix).

Nothing here asks sdtgen: probe names, symbols and argument types come from the
`SDT_PROBE_DEFINEn` lines, the `SDT_PROBEn` and `SDT_PROBE_ENABLED` uses and the
direct `__dtrace_sdt_*` calls of the .c and .h files, by the naming rules sdt.h
documents. Each function takes the kernel's directories or files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PREFIX = "__dtrace_sdt_"
_DEFINE = re.compile(r"\bSDT_PROBE_DEFINE(\d?)\(([^;]*)\);")
_XLATE = re.compile(r"\bSDT_PROBE_DEFINE\d_XLATE\(([^;]*)\);")  # native and translated type, in pairs
_ARGTYPE = re.compile(r"\bSDT_PROBE_ARGTYPE\(([^;]*)\);")
_DTRACE = re.compile(r"\bDTRACE_PROBE\d?\(([^;]*)\);")  # provider sdt: name, then C type and argument pairs
_USE = re.compile(r"\bSDT_PROBE\d?\(\s*(\w*)\s*,\s*(\w*)\s*,\s*(\w*)\s*,\s*(\w+)\s*[,)]")
_DIRECT = re.compile(rf"\b{PREFIX}(\w+)\b")
_ENABLED = re.compile(r"\bSDT_PROBE_ENABLED\(\s*(\w*)\s*,\s*(\w*)\s*,\s*(\w*)\s*,\s*(\w+)\s*\)")
ISENABLED_PREFIX = "__dtrace_isenabled_"


@dataclass(frozen=True)
class SourceProbe:
    provider: str
    module: str
    function: str
    name: str  # as listed ("__" -> "-")
    args: tuple[str, ...]  # the declared types; a probe without SDT_PROBE_DEFINE declares none
    symbol: str  # the function the site calls
    xargs: tuple[str | None, ...] = ()  # translated types (_XLATE, SDT_PROBE_ARGTYPE); None: none

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"


def _symbol(prov: str, mod: str, func: str, name: str) -> str:
    return f"{PREFIX}{prov}_{mod}_{func}_{name}"  # sdt.h's token pasting


def _from_symbol(symbol: str) -> SourceProbe:
    """A probe without a descriptor: up to the first `_` is the provider, the rest the name."""
    provider, _, name = symbol[len(PREFIX):].partition("_")
    return SourceProbe(provider, "", "", name, (), symbol)


def _texts(roots: tuple[Path, ...]) -> list[str]:
    """The .c and .h files of each directory in ``roots``, and each file given itself."""
    files = [f for r in roots for f in (sorted(r.glob("*.[ch]")) if r.is_dir() else [r])]
    return [f.read_text() for f in files]


def _fields(text: str) -> list[str]:
    return [f.strip() for f in text.split(",")]


def defined_probes(*roots: Path) -> list[SourceProbe]:
    out = []
    for text in _texts(roots):
        for m in _DEFINE.finditer(text):
            prov, mod, func, name, *types = _fields(m.group(2))
            out.append(SourceProbe(prov, mod, func, name.replace("__", "-"), tuple(t.strip('"') for t in types),
                                   _symbol(prov, mod, func, name)))
        for m in _XLATE.finditer(text):
            prov, mod, func, name, *pairs = _fields(m.group(1))
            out.append(SourceProbe(prov, mod, func, name.replace("__", "-"), tuple(t.strip('"') for t in pairs[::2]),
                                   _symbol(prov, mod, func, name), tuple(x.strip('"') for x in pairs[1::2])))
        for m in _DTRACE.finditer(text):
            name, *pairs = _fields(m.group(1))
            out.append(SourceProbe("sdt", "", "", name.replace("__", "-"), tuple(pairs[::2]),
                                   _symbol("sdt", "", "", name)))
    for text in _texts(roots):  # SDT_PROBE_ARGTYPE: one argument's types of a probe defined above
        for m in _ARGTYPE.finditer(text):
            prov, mod, func, name, num, ctype, xtype = _fields(m.group(1))
            k = int(num)
            for i, p in enumerate(out):
                if p.symbol == _symbol(prov, mod, func, name):
                    args = list(p.args) + [""] * (k + 1 - len(p.args))
                    xargs = list(p.xargs) + [None] * (len(args) - len(p.xargs))
                    args[k], xargs[k] = ctype.strip('"'), None if xtype == "NULL" else xtype.strip('"')
                    out[i] = SourceProbe(p.provider, p.module, p.function, p.name, tuple(args), p.symbol,
                                         tuple(xargs))
    return out


def called_probes(*roots: Path) -> list[SourceProbe]:
    """Every probe the source calls: through the macros, defined or not, and by direct calls."""
    defined = {p.symbol: p for p in defined_probes(*roots)}
    symbols: set[str] = set()
    for text in _texts(roots):
        symbols.update(_symbol(*m.groups()) for m in _USE.finditer(text))
        symbols.update(PREFIX + m.group(1) for m in _DIRECT.finditer(text))
        symbols.update(_symbol("sdt", "", "", _fields(m.group(1))[0]) for m in _DTRACE.finditer(text))
    return [defined.get(s) or _from_symbol(s) for s in sorted(symbols)]


def checked_probes(*roots: Path) -> list[str]:
    """The is-enabled functions the source's SDT_PROBE_ENABLED() checks call."""
    return sorted({ISENABLED_PREFIX + _symbol(*m.groups())[len(PREFIX):] for text in _texts(roots)
                   for m in _ENABLED.finditer(text)})
