"""A recorder's string copy (sdt_event_string, the runtime built for the host) reads only memory the kernel
said is readable, stops at SDT_MAX_STRING, and marks NULL or unreadable strings: a string that ends at the
last byte of a mapping, with an inaccessible page after it, is copied without a fault."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sdtgen.layout import EVENT, HOOKS, VALUES

MAX = VALUES["SDT_MAX_STRING"]

# Run in a child: a read past the range would kill it, not the test session.
CHILD = r"""
import ctypes, mmap, sys
lib = ctypes.CDLL(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page = mmap.PAGESIZE
area = mmap.mmap(-1, 2 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(area))
assert libc.mprotect(base + page, page, 0) == 0  # the page after the string: no access at all
ranges = (ctypes.c_uint64 * 2)(base, page)  # struct sdt_range: only the first page is readable
hooks = ctypes.c_char.in_dll(lib, "sdt_hooks")
ctypes.c_void_p.from_address(ctypes.addressof(hooks) + {readable}).value = ctypes.addressof(ranges)
ctypes.c_uint32.from_address(ctypes.addressof(hooks) + {nreadable}).value = int(sys.argv[3])
lib.sdt_event_string.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint, ctypes.c_void_p]
text = sys.argv[2].encode()
at = base + page - len(text) - int(sys.argv[4])  # pad 0: it ends at the mapping's last byte, without a NUL
ctypes.memmove(at, text, len(text))
event, to = ctypes.create_string_buffer(16), ctypes.create_string_buffer(256)
unmapped = [(4, base + page + 64)] if int(sys.argv[3]) else []  # without ranges, reading it would fault
for k, s in ((2, at), (3, 0), *unmapped, (5, at + 1)):
    n = lib.sdt_event_string(event, to, k, s)
    print(n, to.raw[:n].hex(), int.from_bytes(event.raw[{unreadable}:{unreadable} + 2], "little"))
"""


@pytest.fixture(scope="module")
def library(host_runtime):
    return host_runtime("x86_64")._name


def copy(library, text: str, nreadable: int = 1, pad: int = 0) -> list[tuple[int, bytes, int]]:
    src = CHILD.replace("{readable}", str(HOOKS.offset("readable", 64))).replace(
        "{nreadable}", str(HOOKS.offset("nreadable", 64))).replace("{unreadable}", str(EVENT.offset("unreadable", 64)))
    out = subprocess.run([sys.executable, "-c", src, library, text, str(nreadable), str(pad)], capture_output=True,
                         text=True, check=True).stdout
    return [(int(n), bytes.fromhex(data), int(bits)) for n, data, bits in (line.split() for line in out.splitlines())]


def test_a_string_ending_at_the_last_readable_byte_is_copied_without_reading_past_it(library):
    at_end, null, unmapped, suffix = copy(library, "abc")
    assert at_end == (4, b"abc\0", 0) and suffix == (3, b"bc\0", 1 << 3 | 1 << 4)
    # unreadable bits, by argument; the string a reader that ignores them sees
    assert null == (13, b"<unreadable>\0", 1 << 3) and unmapped == (13, b"<unreadable>\0", 1 << 3 | 1 << 4)


def test_a_long_string_is_cut_at_sdt_max_string(library):
    at_end, *_ = copy(library, "x" * 200)
    assert at_end == (MAX + 1, b"x" * MAX + b"\0", 0)


def test_with_no_ranges_all_memory_is_readable(library):
    at_end, null, suffix = copy(library, "abc", nreadable=0, pad=8)  # the kernel vouches for every address
    assert at_end == (4, b"abc\0", 0) and null == (13, b"<unreadable>\0", 1 << 3) and suffix == (3, b"bc\0", 1 << 3)
