"""What the runtime could not run is refused on the host, before anything is armed, with one line in sdtgen's
diagnostic format naming the clause, what is wrong and what to do."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from sdtgen.dscript import compile_script
from sdtgen.dscript.parser import parse
from sdtgen.dscript.program import OP_NAMES, decode
from sdtgen.dscript.tree import Binary, Var
from sdtgen.errors import SdtError


@dataclass(frozen=True)
class P:
    provider: str
    module: str
    function: str
    name: str
    args: tuple[str, ...]
    key: int

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"


PROBES = [P("hk", "vfs", "lookup", "entry", ("const char *",), 1), P("hk", "vfs", "lookup", "component",
          ("const char *", "int"), 2), P("hk", "sched", "run", "tick", ("int", "long"), 3), P("hk", "", "", "boot",
          (), 4), P("hk", "mem", "alloc", "done", ("unsigned long",), 5)]


def refusal(text: str) -> str:
    with pytest.raises(SdtError) as e:
        compile_script(text, PROBES, 64, source="--aggregate")
    line = str(e.value)
    assert "\n" not in line and line.startswith("--aggregate: error: ")
    return line


@pytest.mark.parametrize(("text", "says"), [
    ("hk:vfs::entry /arg1 > 0/ @[cpu] = count()",
     r"clause 1 \(hk:vfs::entry /arg1 > 0/ @\[cpu\] = count\(\)\): arg1: probe hk:vfs:lookup:entry has 1 argument "
     r"\(arg0\); match only probes that have it"),
    ("hk:::boot\nhk:sched:: @ = sum(arg2)", r"clause 2 \(hk:sched:: @ = sum\(arg2\)\): arg2: probe "
     r"hk:sched:run:tick has 2 arguments \(arg0\.\.arg1\)"),
    ("hk:vfs:lookup:entry /arg0 > 5/", r"clause 1 .*: arg0 is a string \(const char \*\) in hk:vfs:lookup:entry, "
     r"compared with an integer \(>\); compare a string with a string constant"),
    ("hk:vfs:lookup:entry /arg0 + 1/", r"clause 1 .*: arg0 is a string \(const char \*\) in hk:vfs:lookup:entry, not "
     r"an integer; compare it with a string constant"),
    ("hk:sched:run:tick /arg1 / 0 > 1/", r"clause 1 .*: divides by zero"),
    ("hk:sched:run:tick @[arg1 % (3 - 3)] = count()", r"clause 1 .*: takes a remainder of a division by zero"),
    ("hk:sched:run:tick @[arg0, arg1, cpu, arg0, arg1] = count()", r"clause 1 .*: @ has 5 keys, more than the 4 the "
     r"kernel's tables keep"),
    ("hk:sched:run:tick /arg6 > 0/", r"arg6: a probe has at most 6 arguments \(arg0\.\.arg5\)"),
    ("hk:sched:run:tick /pdi == 3/", r"unknown variable 'pdi'; use arg0\.\.arg5, cpu, tid, curcontext, execname, "
     r"probeprov"),
    ("hk:sched:run:tick /pid == 3/", r"DTrace's pid is not supported: a program reads only the firing's arguments, "
     r"CPU, probe and task; pass it as a probe argument, or use arg0\.\.arg5"),
    ("hk:sched:run:tick /execname > 3/", r"compares a string with an integer \(>\)"),
    ("hk:sched:run:tick /execname == probefunc/", r"execname is compared only with a string constant"),
    ("hk:sched:run:tick @[execname] = count()", r"execname is a string: an aggregation's keys are integers and probe "
     r"names; key by an integer \(tid"),
    ("hk:sched:run:tick @ = sum(execname)", r"execname is a string, not an integer"),
    ("hk:sched:run:tick @ = max(timestamp)", r"DTrace's timestamp is not supported: a program reads no clock; record "
     r"the firings"),
    ("hk:sched:run:tick @a = count()\nhk:mem:: @a = sum(arg0)", r"clause 2 .*: @a is count\(\) elsewhere, sum\(\) "
     r"here"),
    ("hk:sched:run:tick @a[cpu] = count(); hk:mem:: @a[probefunc] = count()", r"clause 2 .*: @a's key 1 is int "
     r"elsewhere, probefunc here"),
    ("hk:sched:run:tick @ = lquantize(arg0, 10, 5, 1)", r"high bound 5 is not above its low bound 10"),
    ("hk:sched:run:tick @ = lquantize(arg0, 0, 10, 0)", r"lquantize\(\)'s step is 0"),
    ("hk:sched:run:tick @ = lquantize(arg0, 0, 100000, 1)", r"lquantize\(\) has 100000 levels, more than the 1022"),
    ("hk:sched:run:tick @ = lquantize(arg0, 0, arg1, 1)", r"low, high and step are integer constants"),
    ("hk:sched:run:tick @ = quantize()", r"quantize\(\) takes one argument, not 0"),
    ("hk:sched:run:tick @ = count(arg0)", r"count\(\) takes no argument, not 1"),
    ("hk:nope:: @ = count()", r"clause 1 .*: hk:nope:: matches no probe of the image; list them with `sdtgen probes"),
    ("hk:sched:run:tick /arg0 == \"x\"/", r"compares a string with an integer"),
    ("hk:vfs::component /arg0 == probefunc/", r"a string argument is compared only with a string constant"),
    ("hk:vfs::component @[arg0] = count()", r"arg0 is a string \(const char \*\): an aggregation's keys are integers"),
    (f"hk:vfs::component /arg0 == \"{'x' * 128}\"/", r"a string constant is 128 bytes, longer than the 127"),
    ("hk:sched:run:tick /1 - (2 - (3 - (4 - (5 - (6 - (7 - (8 - (9 - arg0))))))))/",
     r"an expression needs more than the runtime's 8 registers"),
    ("hk:sched:run:tick /" + " || ".join("(" + " || ".join(f"arg1 == {(j * 10 + i) * 0x100000001}" for i in range(10))
                                         + ")" for j in range(20)) + "/",
     r"compiles to \d+ instructions for hk:sched:run:tick, more than the 256 of a program"),
    ("hk:sched:run:tick /(char *)arg0 == \"x\"/", r"cannot cast to \(char \*\)"),
])
def test_what_the_runtime_could_not_run_is_one_line_naming_the_clause(text, says):
    assert re.search(says, refusal(text)), refusal(text)


@pytest.mark.parametrize(("text", "says"), [
    ("hk:sched:run:tick /arg0 > (1 + /", r"column 32 \('/'\): expected an expression, found '/'"),
    ("hk:sched:run:tick /arg0 > 1", r"expected '/' at the end of the predicate, found the end of the script"),
    ("hk:sched:run:tick @[arg0 = count()", r"expected '\]' after the aggregation's keys"),
    ("hk:sched:run:tick @ = stddev(arg0)", r"stddev\(\) is not an aggregating function: use one of count, sum"),
    ("hk:sched:run:tick /arg0 > 12abc/", r"'12abc' is not an integer constant"),
    ("hk:sched:run:tick /arg0 > 99999999999999999999/", r"does not fit in 64 bits"),
    ("hk:sched:run:tick /arg0 > " + "9" * 5000 + "/", r"'99999999999999999999\.\.\. \(5000 digits\)' does not fit in "
     r"64 bits"),
    ("hk:sched:run:tick /arg0 > 0x" + "f" * 5000 + "/", r"'0xffffffffffffffffff\.\.\. \(5000 digits\)' does not fit"),
    ("hk:sched:run:tick /arg0 > 0" + "7" * 22 + "/", r"'07777777777777777777777' does not fit in 64 bits"),
    ('hk:vfs::entry /arg0 == "abc/', r"a string constant is not closed"),
    ("hk:sched:run:tick /arg0 > 1/ @ = count() junk", r"expected the end of the clause \(a newline or ';'\)"),
    ("hk:sched:run:tick /* never closed", r"a comment is not closed"),
    ("\n\n  ;", r"the script has no clause"),
    ("hk:sched:run:tick\n  /arg0 $ 1/", r"line 2, column 9 \('\$ 1/'\): unexpected character '\$'"),
])
def test_what_is_not_the_language_is_one_line_with_its_place(text, says):
    assert re.search(says, refusal(text)), refusal(text)


def test_a_clause_laid_out_on_lines_as_dtrace_scripts_are_is_one_clause():
    [clause] = parse("hk:sched:run:tick\n/arg0 > 5/\n{\n    @[cpu] = count();\n}\n")
    assert clause.predicate is not None and [a.func for a in clause.actions] == ["count"]


def test_clauses_are_separated_by_semicolons_or_newlines_and_take_several_probe_descriptions():
    clauses = parse("hk:sched::tick /arg0 > 1/; hk:vfs::entry,\n  hk:vfs::return\n\n:::boot { @a = count()\n"
                    "  @b[cpu] = sum(1) ; }\n/* a comment */ hk::: @ = count()")
    assert [c.specs for c in clauses] == [("hk:sched::tick",), ("hk:vfs::entry", "hk:vfs::return"), (":::boot",),
                                          ("hk:::",)]
    assert [c.record for c in clauses] == [True, True, False, False]
    assert [[a.name for a in c.actions] for c in clauses] == [[], [], ["a", "b"], [""]]


def test_a_slash_divides_unless_what_follows_it_ends_the_predicate():
    [clause] = parse("p:::n /arg0 / arg1 > (arg2 / 2)/ @ = count()")
    assert isinstance(clause.predicate, Binary) and clause.predicate.op == ">"
    assert clause.predicate.left == Binary(7, "/", Var(7, "arg0"), Var(14, "arg1"))
    [clause] = parse("p:::n /arg0 /\n")
    assert clause.predicate == Var(7, "arg0")


def test_constants_are_cs_decimal_hex_octal_with_suffixes():
    probe = [P("t", "m", "f", "n", ("unsigned long",), 9)]
    code = compile_script("t::: /arg0 == 0x10 + 010 + 8u + 1UL + 0xffffffffffffffff/", probe, 64).programs[0].code
    insns = decode(code).insns
    assert [i.imm for i in insns if i.op & 0x80] == [16 + 8 + 8 + 1 - 1]  # folded: one compare with 32


def test_a_clause_that_reads_no_argument_of_a_probe_without_them_compiles():
    compiled = compile_script("hk::: @[probename] = count()", PROBES, 64)
    assert sum(len(p.keys) for p in compiled.programs) == len(PROBES)


def test_an_integer_constant_is_read_whatever_its_length_up_to_64_bits():
    """Python's own int() of the digits is the truth; leading zeros do not count against the 64 bits."""
    probe = [P("t", "m", "f", "n", ("unsigned long",), 9)]
    for text, value in [("0" * 40 + "1110642547423257157360", 0x923456789abcdef0),
                        ("12345678901234567890", 12345678901234567890),
                        ("0x" + "0" * 40 + "fedcba9876543210", 0xfedcba9876543210)]:
        code = compile_script(f"t::: @[{text}] = count()", probe, 64).programs[0].code
        assert decode(code).consts == (value,)
    refusal("hk:sched:run:tick /arg0 > 18446744073709551616/")


def chain(n: int, term) -> str:
    return " || ".join(term(i) for i in range(n))


def test_a_flat_chain_of_300_tests_is_not_nested_and_names_fold_into_one_set():
    """A || b || c ... is as long as the script is, not as deep: 300 tests of names are one PIN of the probes they
    hold for; 300 tests of an argument are refused by the program's instruction limit, saying so."""
    for n in (300, 2000):  # 2000: as long as a script may be, past what recursing through the chain could
        names = chain(n - 1, lambda i: f'probefunc == "f{i}"') + ' || probename == "tick"'
        [program] = compile_script(f"hk::: /{names}/", PROBES, 64).programs
        ops = [OP_NAMES[i.op] for i in decode(program.code).insns]
        assert ops == ["PIN", "RECNZ", "EXIT"], "the host decided the tests: one set of the probes they hold for"
    line = refusal(f"hk:sched:run:tick /{chain(300, lambda i: f'arg1 == {i}')}/")
    assert re.search(r"clause 1 compiles to \d+ instructions for hk:sched:run:tick, more than the 256 of a "
                     r"program; simplify .* about 3 instructions", line), line
    nested = "-" * 33 + "arg1"
    assert "nests deeper than 32 levels" in refusal(f"hk:sched:run:tick /{nested}/")


@pytest.mark.parametrize(("text", "says"), [
    ("hk:sched:run:tick /args[0] > 1/", r"column 20 \('args\[0\] > 1/'\): args\[\] is not supported; read the "
     r"arguments as arg0\.\.arg5"),
    ('hk:vfs:lookup:entry /stringof(arg0) == "etc"/', r"stringof\(\) is not supported; a char \* argument already "
     r"is a string: compare it with a string constant"),
    ("hk:sched:run:tick /self->start/", r"thread-local \(self->\) and clause-local \(this->\) variables are not "
     r"supported: a program keeps no state but its aggregations; aggregate by a key instead"),
    ("hk:sched:run:tick { self -> start = arg1; }", r"thread-local \(self->\) .* not supported"),
    ("hk:sched:run:tick { this->x = 1; @ = count() }", r"clause-local \(this->\) variables are not supported"),
    ("hk:sched:run:tick @[stack()] = count()", r"stack\(\) is not supported: the kernel's programs read no stack; key "
     r"by probefunc"),
    ("hk:sched:run:tick { trace(arg0); }", r"trace\(\) is not supported; a clause without aggregations records the "
     r"firing"),
    ("hk:sched:run:tick { printf(\"%d\", arg0); }", r"printf\(\) is not supported"),
    ("hk:sched:run:tick /count() > 1/", r"count\(\) aggregates: it is an aggregation's value, not an expression; "
     r"write @name\[keys\] = count\(...\)"),
    ("hk:sched:run:tick /strlen(arg0)/", r"strlen\(\) is not supported: an expression calls no function"),
])
def test_dtrace_constructs_the_kernel_does_not_run_are_named_not_supported_with_what_to_write(text, says):
    line = refusal(text)
    assert re.search(says, line), line
    assert "write clauses as" not in line, "the construct's own alternative, not the grammar's"
