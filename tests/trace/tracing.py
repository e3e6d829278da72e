"""What the trace tests share. Traces of real boots: a small kernel whose probes carry every kind of
argument (strings with quotes, newlines, UTF-8 and backslashes, a NULL, integers of each width and
signedness, a pointer), booted on three CPUs in branch mode with `sdtgen boot --trace`.

``expected`` is the test's own reading of each C type, independent of sdtgen: what a reader must show for
the values the kernel's C passed (the --arg values converted as C converts them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from helpers import sdtgen

SOURCE = r"""
#include <sdt.h>
typedef long long int64_t;
SDT_PROVIDER_DEFINE(tt);
SDT_PROBE_DEFINE2(tt, str, copy, quoted, "const char *", "char *");
SDT_PROBE_DEFINE6(tt, int, wide, six, "int", "unsigned int", "long", "unsigned long", "int64_t", "void *");
SDT_PROBE_DEFINE1(tt, , , never, "int");
static const char *const strs[] = {
	"he said \"hi\"", "two\nlines", "na\xc3\xafve \xe2\x98\x83 \xe6\x97\xa5\xe6\x9c\xac", "back\\slash", "x", 0
};
long strings(long i)
{
	SDT_PROBE2(tt, str, copy, quoted, strs[i], (char *)strs[5 - i]);
	return i;
}
long wide(long a, long b, long c, long d, long e, long f)
{
	SDT_PROBE6(tt, int, wide, six, (int)a, (unsigned int)b, c, (unsigned long)d, (int64_t)e, (void *)f);
	return a;
}
long burst(long n)
{
	for (long i = 0; i < n; i++)
		SDT_PROBE6(tt, int, wide, six, (int)i, (unsigned int)i, i, (unsigned long)i, (int64_t)i, (void *)i);
	return n;
}
long never(long x)
{
	if (x == 12345)
		SDT_PROBE1(tt, , , never, (int)x);
	return x;
}
"""
STRINGS = ['he said "hi"', "two\nlines", "naïve ☃ 日本", "back\\slash", "x", None]
WIDE = ("int", "unsigned int", "long", "unsigned long", "int64_t", "void *")
WIDE_VALUES = [(-1, 0xFFFFFFFF, -(1 << 63), (1 << 64) - 1, -2, 0xFFFF_8000_0000_1000),
               (0x7FFFFFFF, 0, (1 << 63) - 1, 0, 1 << 40, 0), (-(1 << 31), 1 << 31, -1, 1 << 63, 5, 8)]
CPUS = 3
# (signed, bits) of each integer type these probes declare, as C has them on x86-64.
INTEGERS = {"int": (True, 32), "unsigned int": (False, 32), "long": (True, 64), "unsigned long": (False, 64),
            "int64_t": (True, 64), "void *": (False, 64)}
POINTERS = {"void *"}
TYPES = {"tt:str:copy:quoted": ("const char *", "char *"), "tt:int:wide:six": WIDE}


def expected(probe: str, value: list, unreadable=None) -> list:
    """What a reader must show for ``value`` of ``probe``'s arguments: C's conversion to each type."""
    out = []
    for ctype, v in zip(TYPES[probe], value, strict=True):
        if ctype in ("const char *", "char *"):
            out.append(unreadable if v is None else v)
        else:
            signed, bits = INTEGERS[ctype]
            v %= 1 << bits
            out.append(v - (1 << bits) if signed and v >= 1 << (bits - 1) else v)
    return out


def calls() -> list[str]:
    """--run options: each string pair, each wide row, and a function whose probe never fires."""
    argv = []
    for i in range(len(STRINGS)):
        argv += ["--run", "strings", "--arg", str(i)]
    for row in WIDE_VALUES:
        argv += ["--run", "wide"] + [a for v in row for a in ("--arg", str(v if v < 1 << 63 else v - (1 << 64)))]
    return [*argv, "--run", "never", "--arg", "1"]


def fired_values() -> list[tuple[str, list]]:
    """What the C passed, in the order each CPU fires it."""
    out = [("tt:str:copy:quoted", [STRINGS[i], STRINGS[5 - i]]) for i in range(len(STRINGS))]
    return out + [("tt:int:wide:six", list(row)) for row in WIDE_VALUES]


@dataclass
class Traced:
    path: Path
    fires: list[dict]  # the run's JSON fire events (for the CPU and timestamp of each)
    stats: dict


def boot_with_trace(image: Path, path: Path, fmt: str, *extra: str) -> Traced:
    proc = sdtgen("boot", image, "--arm", "branch", "--enable", ":::", "--cpus", str(CPUS), "--schedule", "seeded",
                  *calls(), "--json", "--trace", path, "--trace-format", fmt, *extra)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    (stats,) = [e for e in events if e["event"] == "stats"]
    return Traced(path, [e for e in events if e["event"] == "fire"], stats)
