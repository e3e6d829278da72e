"""The runtime's probe specs (sdt_manage.c's parse_spec and glob, built for the host) mean what Python's
do: fields filled from the right as sdtgen.probes.ProbeSpec fills them, globs as fnmatch.fnmatchcase."""

from __future__ import annotations

import ctypes
import fnmatch
from types import SimpleNamespace

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from sdtgen.probes import ProbeSpec

GLOB_CHARS = "ab-_*?[]!^\\"
NAME_CHARS = "ab-_[]!*?^\\"
patterns = st.text(alphabet=GLOB_CHARS, max_size=10)
names = st.text(alphabet=NAME_CHARS, max_size=8)
specs = st.text(alphabet=GLOB_CHARS + ":", max_size=14)


@pytest.fixture(scope="module")
def rt(host_runtime):
    lib = host_runtime("x86_64")
    lib.host_glob.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.host_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    lib.host_matches.argtypes = [ctypes.c_char_p, ctypes.c_char_p * 4]
    return lib


def c_parse(rt, text: str) -> tuple[str, str, str, str] | None:
    raw = text.encode()
    out = (ctypes.c_int * 8)()
    if rt.host_parse(raw, out):
        return None
    return tuple("" if out[2 * i] < 0 else raw[out[2 * i]:out[2 * i + 1]].decode() for i in range(4))


def py_parse(text: str) -> tuple[str, str, str, str] | None:
    try:
        return ProbeSpec.parse(text).fields
    except ValueError:
        return None


@settings(max_examples=1500, deadline=None)
@given(patterns, names)
@example("[!]]", "]")
@example("[]a]", "]")
@example("[z-a]", "b")
@example("[!z-a]", "b")
@example("[a-]", "-")
@example("[-a]", "-")
@example("a[", "a[")
@example("[", "[")
@example("[!", "[!")
@example("[]", "[]")
@example("*a*b", "xaxxb")
@example("**", "")
@example("\\*", "\\a")
def test_glob_is_fnmatchcase(rt, pattern, name):
    assume(not reversed_range(pattern))
    assert bool(rt.host_glob(pattern.encode(), name.encode())) == fnmatch.fnmatchcase(name, pattern)


def reversed_range(pattern: str) -> bool:
    """Whether a complete [set] of ``pattern`` holds a range whose end is below its start (``[z-a]``)."""
    i, n = 0, len(pattern)
    while i < n:
        if pattern[i] != "[":
            i += 1
            continue
        j = i + 1
        j += j < n and pattern[j] == "!"
        j += j < n and pattern[j] == "]"
        while j < n and pattern[j] != "]":
            j += 1
        if j >= n:
            return False
        body = pattern[i + 1:j]
        if any(body[k + 1] == "-" and body[k] > body[k + 2] for k in range(len(body) - 2)):
            return True
        i = j + 1
    return False


@pytest.mark.parametrize(("pattern", "name", "match"), [
    ("[z-a]", "b", False), ("[!z-a]", "b", True), ("[[-?!]?", "??", False), ("[[-?!]?", "!?", True),
    ("[b-a!x]", "y", False), ("[b-a!x]", "!", True)])
def test_a_reversed_range_matches_nothing_as_in_posix(rt, pattern, name, match):
    """Python's fnmatch drops a reversed range and then reads a set left starting with ! as a negation
    ([b-a!x] matches y); the runtime follows POSIX, as glibc's fnmatch(3) does."""
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    fnm_noescape = 2
    assert (libc.fnmatch(pattern.encode(), name.encode(), fnm_noescape) == 0) == match
    assert bool(rt.host_glob(pattern.encode(), name.encode())) == match


@settings(max_examples=1000, deadline=None)
@given(specs)
@example("")
@example(":::")
@example("::::")
@example("a:b")
@example("name")
def test_specs_fill_from_the_right_and_more_than_four_fields_are_refused(rt, text):
    assert c_parse(rt, text) == py_parse(text)


@settings(max_examples=1000, deadline=None)
@given(specs, st.tuples(names, names, names, names))
@example("hk:vfs::", ("hk", "vfs", "lookup", "entry"))
@example("exec-*", ("hk", "proc", "exec", "exec-success"))
@example(":::", ("", "", "", ""))
def test_a_spec_matches_exactly_the_probes_probespec_matches(rt, text, probe):
    assume(not any(reversed_range(f) for f in text.split(":")))
    spec = py_parse(text)
    got = rt.host_matches(text.encode(), (ctypes.c_char_p * 4)(*(n.encode() for n in probe)))
    if spec is None:
        assert got == -1
    else:
        assert bool(got) == ProbeSpec(spec).matches(SimpleNamespace(provider=probe[0], module=probe[1],
                                                                    function=probe[2], name=probe[3]))


def test_a_spec_longer_than_the_runtime_reads_is_refused(rt):
    assert c_parse(rt, "a" * 1023) == ("", "", "", "a" * 1023)
    assert c_parse(rt, "a" * 1025) is None
