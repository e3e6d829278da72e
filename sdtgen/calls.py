"""What a session asks of the kernel, the same for the emulated boot and QEMU, checked against the image
before anything runs: a call (`--run SYMBOL[:TYPE] --arg N...`, its return register read as TYPE) and a
probe spec (`--enable`, `--disable`, the console's)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from sdtgen.elf.linkerset import STRIPPED_FIX, stripped
from sdtgen.elf.reader import STT_FUNC
from sdtgen.errors import SdtError, printable
from sdtgen.image import Image
from sdtgen.limits import MAX_SPEC
from sdtgen.probes import ProbeSpec

RETURN_TYPES = ("long", "int", "uint", "ulong", "str", "void")
STRING_PREFIX = "str:"  # an argument written str:TEXT is the string TEXT (the call gets a pointer to it)
MAX_STRING_ARG = 255  # bytes of a string argument (UTF-8)


def parse_int(text: str) -> int:
    """An argument as a user writes it: decimal, 0x hex, negative."""
    try:
        return int(text, 0)
    except ValueError:
        raise SdtError("", f"{printable(text)!r} is not an integer",
                       f"give decimal, 0x hex or negative numbers, or {STRING_PREFIX}TEXT for a string") from None


def parse_arg(text: str) -> int | str:
    """A call's argument as a user writes it: an integer, or ``str:TEXT`` for a string (a pointer to TEXT)."""
    if text.startswith(STRING_PREFIX):
        return text[len(STRING_PREFIX):]
    return parse_int(text)


def function_address(image: Image, symbol: str) -> int:
    """The address of the image's function ``symbol``."""
    sym = image.symbols.get(symbol)
    if sym is None or sym.type != STT_FUNC:
        if stripped(image.elf):
            raise image.elf.fail(f"is stripped (no symbol table), so it has no function {printable(symbol)!r} "
                                 "to call", STRIPPED_FIX)
        raise SdtError(image.path, f"no function {printable(symbol)!r} in the image", "check the symbol name")
    return sym.value


def check_call(image: Image, target: str, args: list[int | str],
               more: dict[str, int] | None = None) -> tuple[str, int, str]:
    """(symbol, address, return type) of ``SYMBOL[:TYPE]`` called with ``args``, or the one line saying why
    not: an unknown type, no such function, too many arguments, one that fits no register."""
    symbol, _, rtype = target.partition(":")
    rtype = rtype or "long"
    if rtype not in RETURN_TYPES:
        raise SdtError("", f"unknown return type {printable(rtype)!r} in {printable(target)!r}",
                       f"use one of {', '.join(RETURN_TYPES)}")
    func = more[symbol] if more and symbol in more else function_address(image, symbol)  # more: a loaded module's
    arch = image.arch
    if len(args) > arch.max_args:
        raise SdtError("", f"{printable(symbol)}: at most {arch.max_args} arguments can be passed")
    for a in args:
        if isinstance(a, str):
            if len(a.encode("utf-8", "surrogatepass")) > MAX_STRING_ARG or "\0" in a:
                raise SdtError("", f"a string argument of {printable(symbol)} is longer than {MAX_STRING_ARG} "
                               "bytes or holds a NUL", "give a shorter string")
            continue
        if not -(1 << (arch.bits - 1)) <= a < 1 << arch.bits:
            raise SdtError("", f"argument {a} of {printable(symbol)} does not fit in a {arch.bits}-bit register",
                           f"give a value from {-(1 << (arch.bits - 1))} to {(1 << arch.bits) - 1}")
    return symbol, func, rtype


def decode_return(raw: int, rtype: str, bits: int, read_string: Callable[[int], str | None]) -> int | str | None:
    """The return register as the C type asked for: ``int`` and ``long`` signed, a string read from memory."""
    if rtype == "void":
        return None
    if rtype == "str":
        return read_string(raw)
    width = 32 if rtype in ("int", "uint") else bits
    value = raw & ((1 << width) - 1)
    if rtype in ("int", "long") and value >> (width - 1):
        value -= 1 << width
    return value


MAX_STRING_RESULT = 256  # bytes of a `str` result shown


def read_string(read: Callable[[int, int], bytes | None], addr: int, chunk: int) -> str | None:
    """The NUL-terminated string at ``addr`` (at most MAX_STRING_RESULT bytes) through ``read(addr, size)``,
    which gives None where there is no memory; None when a byte before the NUL cannot be read."""
    out = bytearray()
    while len(out) < MAX_STRING_RESULT:
        data = read(addr + len(out), chunk)
        if data is None:  # the string may end before the memory does: a byte at a time
            data = read(addr + len(out), 1)
            if data is None:
                return None
        end = data.find(b"\0")
        if end >= 0:
            return (out + data[:end]).decode("utf-8", "replace")
        out += data
    return out[:MAX_STRING_RESULT].decode("utf-8", "replace")


def parse_spec(text: str) -> ProbeSpec:
    """A probe spec as a user gives it (--enable, a console's enable...), checked as the runtime will read it."""
    if len(text) > MAX_SPEC:
        raise SdtError("", f"a probe spec of {len(text)} characters is longer than the {MAX_SPEC} allowed",
                       "give a shorter spec (globs match many probes)")
    if not text.isascii() or not text.isprintable():
        raise SdtError("", f"probe spec {printable(text)!r} has characters a probe name cannot have")
    if not text:
        raise SdtError("", "an empty probe spec names no probe (an unset shell variable?)",
                       "give ':::' to match every probe")
    try:
        return ProbeSpec.parse(text)
    except ValueError as e:
        raise SdtError("", printable(str(e))) from None


def matching_spec(text: str, probes) -> ProbeSpec:
    """A spec that matches one of ``probes`` at least (which of their sites verify is sdt_init's say)."""
    pattern = parse_spec(text)
    if not any(pattern.matches(p) for p in probes):
        raise SdtError("", f"probe spec {printable(text)!r} reads as {describe(pattern)} and matches no "
                       "probe of the image", "list the probes with `sdtgen probes IMAGE`; "
                       "a spec is provider:module:function:name, filled from the right")
    return pattern


def describe(pattern: ProbeSpec) -> str:
    """What each field of a spec means: ``'my:net'`` is function ``my``, name ``net``."""
    named = [f"{field} {printable(value)!r}" for field, value in
             zip(("provider", "module", "function", "name"), pattern.fields, strict=True) if value]
    return ", ".join(named) if named else "every probe"


def single_sites(image: Image) -> dict[str, int]:
    """Each probe of one site, and that site: a record does not say which site fired, so only these name it."""
    sites = image.sites()
    count = Counter(s.probe.spec for s in sites)
    return {s.probe.spec: s.addr for s in sites if count[s.probe.spec] == 1}
