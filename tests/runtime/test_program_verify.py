"""The runtime's verifier (sdt_program_verify) refuses what is not a program with the SDT_ERR_PROG_* code of what
is wrong; a corrupted program is refused or, accepted, runs to its end without a fault."""

from __future__ import annotations

import ctypes
import os
import random
import signal
import struct

import pytest
from programs import FakeProbe, compile_for

from sdtgen.dscript import program as pf
from sdtgen.dscript.program import AggDesc, Insn, ProgramForm, encode
from sdtgen.layout import VALUES

OP = pf.OPS
IMM = pf.IMM
FORM, INSN, FLOW, AGG = (VALUES[f"SDT_ERR_PROG_{n}"] for n in ("FORM", "INSN", "FLOW", "AGG"))
COUNT, SUM, LQ = VALUES["SDT_AGG_COUNT"], VALUES["SDT_AGG_SUM"], VALUES["SDT_AGG_LQUANTIZE"]


def prog(*insns: Insn, **kw) -> bytes:
    return encode(ProgramForm(tuple(insns), **kw))


EXIT = Insn(OP["EXIT"])
GOOD = prog(Insn(OP["LDARG"], 0, 0, 3), Insn(OP["SGT"] | IMM, 0, 0, 0, 4096), Insn(OP["RECNZ"], a=0), EXIT, nargs=1)

HOSTILE = {
    "a jump backwards": (prog(Insn(OP["LDI"], 0), Insn(OP["JA"], imm=0), EXIT), FLOW),
    "a jump to itself": (prog(Insn(OP["JA"], imm=0), EXIT), FLOW),
    "a jump past the end": (prog(Insn(OP["JA"], imm=2), EXIT), FLOW),
    "a conditional jump backwards": (prog(Insn(OP["LDI"], 0), Insn(OP["JZ"], a=0, imm=0), EXIT), FLOW),
    "a catch backwards": (prog(Insn(OP["LDI"], 0), Insn(OP["CATCH"], imm=0), EXIT), FLOW),
    "running off the end": (prog(Insn(OP["REC"])), FLOW),
    "a register read before any write": (prog(Insn(OP["RECNZ"], a=3), EXIT), INSN),
    "a register written on one path only": (prog(Insn(OP["LDI"], 0), Insn(OP["JZ"], a=0, imm=3),
                                                 Insn(OP["LDI"], 1), Insn(OP["RECNZ"], a=1), EXIT), INSN),
    "register 8": (prog(Insn(OP["LDI"], 8), EXIT), INSN),
    "an argument past nargs": (prog(Insn(OP["LDARG"], 0, 1), EXIT, nargs=1), INSN),
    "an argument extension C has not": (prog(Insn(OP["LDARG"], 0, 0, 7), EXIT, nargs=1), INSN),
    "a constant past the table": (prog(Insn(OP["LDC"], 0, imm=1), EXIT, consts=(5,)), INSN),
    "a far constant": (prog(Insn(OP["LDC"], 0, imm=0x7FFFFFFF), EXIT), INSN),
    "a string past the table": (prog(Insn(OP["STRCMP"], 0, 0, imm=4), EXIT, nargs=1, strings=b"abc\0"), INSN),
    "a string without its NUL": (prog(Insn(OP["STRCMP"], 0, 0, imm=0), EXIT, nargs=1, strings=b"abcd"), INSN),
    "a string longer than SDT_MAX_STRING": (prog(Insn(OP["STRCMP"], 0, 0, imm=0), EXIT, nargs=1,
                                                 strings=b"x" * 128 + b"\0"), INSN),
    "a set past the constants": (prog(Insn(OP["PIN"], 0, imm=1 | 2 << 16), EXIT, consts=(1, 2)), INSN),
    "a set out of order": (prog(Insn(OP["PIN"], 0, imm=0 | 2 << 16), EXIT, consts=(2, 1)), INSN),
    "an aggregation it does not have": (prog(Insn(OP["AGG"], 0, 0, 1), EXIT,
                                             aggs=(AggDesc(1, COUNT, 0, 1),)), INSN),
    "keys past the last register": (prog(*[Insn(OP["LDI"], r) for r in range(8)], Insn(OP["AGG"], 6, 0, 0), EXIT,
                                         aggs=(AggDesc(1, COUNT, 3, 1),)), INSN),
    "an immediate on an operation that takes none": (prog(Insn(OP["LDCPU"] | IMM, 0), EXIT), INSN),
    "an unknown operation": (prog(Insn(0x7F), EXIT), INSN),
    "a task field it has not": (prog(Insn(OP["LDTASK"], 0, 0, 2), Insn(OP["RECNZ"], a=0), EXIT), INSN),
    "a task load with an immediate": (prog(Insn(OP["LDTASK"] | IMM, 0), EXIT), INSN),
    "a task load reading a register": (prog(Insn(OP["LDTASK"], 0, 1), EXIT), INSN),
    "a task name against a string past the table": (prog(Insn(OP["TASKCMP"], 0, imm=4), EXIT, strings=b"abc\0"),
                                                     INSN),
    "a task name against a string without its NUL": (prog(Insn(OP["TASKCMP"], 0, imm=0), EXIT, strings=b"abcd"),
                                                      INSN),
    "a field an operation does not use": (prog(Insn(OP["EXIT"], 1)), INSN),
    "an unknown aggregating function": (prog(EXIT, aggs=(AggDesc(1, 9, 0, 1),)), AGG),
    "values a function does not keep": (prog(EXIT, aggs=(AggDesc(1, SUM, 0, 3),)), AGG),
    "five keys": (prog(EXIT, aggs=(AggDesc(1, COUNT, 5, 1),)), AGG),
    "an lquantize step of 0": (prog(EXIT, aggs=(AggDesc(1, LQ, 0, 12, 0, 0, 10),)), AGG),
    "an lquantize without levels": (prog(EXIT, aggs=(AggDesc(1, LQ, 0, 2, 0, 1, 0),)), AGG),
    "an lquantize past 62 bits": (prog(EXIT, aggs=(AggDesc(1, LQ, 0, 12, 0, 1 << 60, 10),)), AGG),
    "an lquantize of 1023 levels": (prog(EXIT, aggs=(AggDesc(1, LQ, 0, 1025, 0, 1, 1023),)), AGG),
    "a bad magic": (prog(EXIT, magic=0x12345678), FORM),
    "another version": (prog(EXIT, version=2), FORM),
    "flags": (prog(EXIT, flags=1), FORM),
    "no instruction": (prog(), FORM),
    "more than 256 instructions": (prog(*[Insn(OP["REC"])] * 256, EXIT), FORM),
    "more than 16 aggregations": (prog(EXIT, aggs=tuple(AggDesc(k, COUNT, 0, 1) for k in range(17))), FORM),
    "seven arguments": (prog(EXIT, nargs=7), FORM),
    "probe keys out of order": (prog(EXIT, probes=(5, 3)), FORM),
    "a guard on an argument it does not read": (prog(EXIT, nargs=1, guard=(1, 0, 0, 0, 5)), FORM),
    "a guard on a seventh argument": (prog(EXIT, guard=(6, 0, 0, 0, (1 << 64) - 1)), FORM),
    "a guard shift of 64": (prog(EXIT, nargs=1, guard=(0, 64, 0, 0, 5)), FORM),
    "a guard flip of 2": (prog(EXIT, nargs=1, guard=(0, 0, 2, 0, 5)), FORM),
}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_a_hostile_program_is_refused_with_the_code_of_what_is_wrong(harness, what):
    code, error = HOSTILE[what]
    assert harness.verify(GOOD) == 0
    assert harness.verify(code) == error, what
    assert harness.fire(code, 1, [0] * 6) == error, "refused, never run"


def test_an_aggregation_of_as_many_keys_as_an_entry_holds_is_taken_and_one_more_refused(harness):
    """SDT_AGG_MAX_KEYS (sdtgen/layout.py) keys, read from registers set before the AGG: the descriptor and the
    program verify; a descriptor of one key more is refused as an aggregation."""
    most = VALUES["SDT_AGG_MAX_KEYS"]

    def keyed(n: int) -> bytes:
        return prog(*[Insn(OP["LDI"], r) for r in range(n)], Insn(OP["AGG"], 0, 0, 0), EXIT,
                    aggs=(AggDesc(1, COUNT, n, 1),))

    assert harness.verify(keyed(most)) == 0
    assert harness.verify(keyed(most + 1)) == AGG


def test_a_program_is_exactly_the_bytes_given_and_no_more_than_the_limit(harness):
    assert harness.verify(GOOD + b"\0" * 8) == FORM  # the header's size is not what was given
    assert harness.verify(GOOD[:-1]) == FORM
    header = bytearray(GOOD)
    struct.pack_into("<I", header, 16, 4)  # four bytes of strings the program does not have
    assert harness.verify(bytes(header)) == FORM
    big = prog(EXIT, strings=b"\0" * VALUES["SDT_PROG_MAX_BYTES"])
    assert harness.verify(big) == FORM
    assert harness.lib.h_verify(None, len(GOOD)) == FORM


def test_a_program_not_8_byte_aligned_is_refused(harness):
    buf = (ctypes.c_uint64 * (len(GOOD) // 8 + 2))()
    ctypes.memmove(ctypes.addressof(buf) + 4, GOOD, len(GOOD))
    assert harness.lib.h_verify(ctypes.c_char_p(ctypes.addressof(buf) + 4), len(GOOD)) == FORM


SCRIPTS = [
    ("t:m:f:n /arg0 > 4096 && arg1 / arg0 != 3 || arg2 % 7 == cpu/", ("int", "long", "unsigned int")),
    ('t:m:f:n /arg0 == "/etc" || arg0 < "m"/ @[arg1, cpu] = quantize(arg1 * 3)', ("const char *", "long")),
    ("t:m:f:n { @a[arg0 & 3] = count(); @b = lquantize(arg1, -10, 90, 7); @c[arg0 ? arg1 : -arg1] = avg(arg1 >> 2) }",
     ("short", "unsigned long")),
    ("t:m:f:n /(unsigned char)arg0 ^^ arg1 <= 0x7fffffffffffffffu/ { @x[probefunc] = max(arg0 - arg1); "
     "@y = min(~arg0) }", ("int", "int64_t")),
]


def _mutants(rng: random.Random, code: bytes, n: int):
    for _ in range(n):
        m = bytearray(code)
        how = rng.randrange(4)
        if how == 0:  # flip bits anywhere
            for _ in range(rng.randint(1, 4)):
                m[rng.randrange(len(m))] ^= 1 << rng.randrange(8)
        elif how == 1:  # a random byte in an instruction
            at = 24 + 8 * rng.randrange(max(1, (len(m) - 24) // 8))
            m[min(at + rng.randrange(8), len(m) - 1)] = rng.randrange(256)
        elif how == 2:  # a header field set to a random value
            at = rng.choice([6, 12, 14, 15, 16, 20])
            m[at] = rng.randrange(256)
        else:  # an instruction's operands shuffled into another's
            k = (len(m) - 24) // 8
            if k >= 2:
                i, j = rng.randrange(k), rng.randrange(k)
                m[24 + 8 * i + 1:24 + 8 * i + 8] = code[24 + 8 * j + 1:24 + 8 * j + 8]
        yield bytes(m)


def test_a_corrupted_program_is_refused_or_runs_to_its_end_without_a_fault(harness):
    """Random corruptions of compiled programs, in a child process: a fault or a program that never ends
    kills it (SIGSEGV, SIGALRM), and the test fails. Some corruptions are valid programs: they run."""
    probes = {text: FakeProbe("t", "m", "f", "n", types, 0x77) for text, types in SCRIPTS}
    codes = [p.code for text, probe in probes.items() for p in compile_for(text, [probe]).programs]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child runs them; it reports how many were accepted
        os.close(read)
        signal.alarm(120)
        rng = random.Random(20261127)
        accepted = refused = 0
        strings = [harness.string(b"/etc"), harness.string(b"zz" * 100), 0, 8]
        # strings are read only where the kernel says memory is (as every kernel that can be given a bad
        # pointer says: with no ranges, all memory is readable)
        ranges = (ctypes.c_uint64 * 4)(strings[0], 5, strings[1], 201)
        harness.lib.h_readable(ranges, 2)
        for code in codes:
            for m in _mutants(rng, code, 5000):
                r = harness.verify(m)
                if r < 0:
                    refused += 1
                    continue
                accepted += 1
                harness.attach(4096)
                for _ in range(4):
                    args = [rng.choice([rng.getrandbits(64), rng.randrange(8), rng.choice(strings)]) for _ in range(6)]
                    harness.fire(m, 0x77, args)
        os.write(write, f"{accepted} {refused}".encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    report = os.read(read, 100).decode()
    os.close(read)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
        f"the child died: {signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else status}"
    accepted, refused = map(int, report.split())
    assert accepted > 200 and refused > 5000, (accepted, refused)
