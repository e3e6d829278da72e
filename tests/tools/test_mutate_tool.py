"""tools/mutate.py (make mutate) on a tree of two tiny files and their tests: the mutants universalmutator and
cosmic-ray make are run in a scratch copy against the tests that cover each file; a mutant the tests see is
killed, one in code no test reaches survives, one listed as equivalent is reported with its reason and left
out of the score, and the tree itself is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import mutants
import mutate
import pytest
from helpers import ROOT, need_module, need_tool
from mutate_map import EXTRA, covering_tests

CLAMP_C = """\
/* clamp.c: v, or hi when v is above it */
int clamp(int v, int hi)
{
	if (v > hi)	/* above the bound */
		return hi;
	return v;	/* at or below it,
 * as it is */
}

int spare(int x)
{
	return x * 3;
}

static int unused(int x)
{
	return x - 1;
}
"""

# The test of clamp.c: a native run of the C source (gcc), clamp() at, below and above the bound.
TEST_CLAMP = """\
import subprocess
from pathlib import Path

def test_clamp(tmp_path):
    src = Path(__file__).resolve().parent.parent / "tiny" / "clamp.c"
    main = tmp_path / "main.c"
    main.write_text('#include <stdio.h>\\nint clamp(int, int);\\n'
                    'int main(void) { printf("%d %d %d\\\\n", clamp(5, 3), clamp(2, 3), clamp(3, 3)); return 0; }\\n')
    exe = tmp_path / "t"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), str(main)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    # A long message makes pytest's summary line long: the report must still name the test that failed.
    assert out == "3 2 3\\n", "clamp.c run natively: " + out + "=" * 4000
"""

PICK_PY = """\
from __future__ import annotations


def smaller(a: int, b: int) -> int:
    return a if a < b else b


def spare(x: int) -> int | None:
    return x * 3
"""

TEST_PICK = """\
from tiny.pick import smaller

def test_smaller():
    assert smaller(2, 5) == 2
    assert smaller(5, 2) == 2
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    need_tool("gcc", "gcc")
    need_module("universalmutator", "pip install -e '.[mutate]'")
    need_module("cosmic_ray", "pip install -e '.[mutate]'")
    for rel, text in {"tiny/clamp.c": CLAMP_C, "tiny/pick.py": PICK_PY, "tests/test_clamp.py": TEST_CLAMP,
                      "tests/test_pick.py": TEST_PICK}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def one(made: list[mutants.Mutant], before: str, after: str) -> mutants.Mutant:
    found = [m for m in made if m.before == before and m.after == after]
    assert len(found) == 1, (before, after, [(m.before, m.after) for m in made])
    return found[0]


def test_mutants_come_from_the_tools_with_stable_keys(tree: Path):
    made = mutants.mutants_of(tree, "tiny/clamp.c")
    assert one(made, "if (v > hi)", "if (v < hi)").line == 4
    assert not [m for m in made if m.line in (1, 7)], "a change inside a comment is no mutant"
    key = one(made, "return x * 3;", "return x + 3;").key
    # Lines added above move the mutant, not its key.
    (tree / "tiny/clamp.c").write_text("/* a new first line */\n" + CLAMP_C)
    moved = one(mutants.mutants_of(tree, "tiny/clamp.c"), "return x * 3;", "return x + 3;")
    assert (moved.key, moved.line) == (key, 13)
    py = mutants.mutants_of(tree, "tiny/pick.py")
    assert one(py, "return a if a < b else b", "core/ReplaceComparisonOperator_Lt_Gt").line == 5
    # `int | None` is never evaluated (from __future__ import annotations): changing it is no mutant.
    annotation = one(py, "def spare(x: int) -> int | None:", "core/ReplaceBinaryOperator_BitOr_BitAnd")
    assert mutants.python_redundant(PICK_PY, annotation.text()) == "a change inside an annotation only"
    assert mutants.python_redundant(PICK_PY, one(py, "return x * 3", "core/ReplaceBinaryOperator_Mul_Add").text()) \
        is None


def test_the_tests_of_a_file_are_found_by_what_they_name(tree: Path):
    assert covering_tests(tree, "tiny/clamp.c") == ["tests/test_clamp.py"]
    assert covering_tests(tree, "tiny/pick.py") == ["tests/test_pick.py"]


def test_every_file_the_declared_table_names_is_in_the_repository():
    """covering_tests drops a declared test file that does not exist (a scratch tree has only some): so a file
    moved without its entry here would leave its source's mutants quietly untested by it."""
    named = [*EXTRA, *(t for tests in EXTRA.values() for t in tests)]
    assert [f for f in named if not (ROOT / f).is_file()] == []


def test_killed_survived_and_equivalent(tree: Path):
    c = mutants.mutants_of(tree, "tiny/clamp.c")
    py = mutants.mutants_of(tree, "tiny/pick.py")
    killed_c = one(c, "if (v > hi)", "if (v < hi)")
    # clamp(v, hi) with v == hi returns hi or v: the same number, whichever branch; no test can tell.
    equivalent = one(c, "if (v > hi)", "if (v >= hi)")
    unreached = one(c, "return x * 3;", "return x + 3;")
    killed_py = one(py, "return a if a < b else b", "core/ReplaceComparisonOperator_Lt_Gt")
    unreached_py = one(py, "return x * 3", "core/ReplaceBinaryOperator_Mul_Add")
    (tree / "tools").mkdir()
    (tree / "tools/equivalent.txt").write_text(f"# key path reason\n{equivalent.key} tiny/clamp.c "
                                               "v == hi returns the same value from either branch\n")
    before = {p: (tree / p).read_bytes() for p in ("tiny/clamp.c", "tiny/pick.py")}
    stamps = {p: (tree / p).stat().st_mtime_ns for p in before}  # written and put back would show here
    scratch_before = set(Path(tempfile.gettempdir()).glob("sdtgen-mutate-*"))
    cfg = mutate.Config(tree, ["tiny/clamp.c", "tiny/pick.py"], sample=5, seed=1, jobs=2, budget=600,
                        include=[], equivalent="tools/equivalent.txt")
    results = mutate.run(cfg, log=lambda s: None, chosen={
        "tiny/clamp.c": [killed_c, equivalent, unreached], "tiny/pick.py": [killed_py, unreached_py]})
    status = {o.mutant.key: o.status for fr in results for o in fr.outcomes}
    assert status == {killed_c.key: "killed", equivalent.key: "equivalent", unreached.key: "survived",
                      killed_py.key: "killed", unreached_py.key: "survived"}
    clamp, pick = results
    assert clamp.baseline == pick.baseline == "passed"
    assert (clamp.score(), pick.score()) == (0.5, 0.5)  # the equivalent mutant is not counted
    killer = next(o for o in clamp.outcomes if o.mutant is killed_c).detail
    assert killer.startswith("FAILED tests/test_clamp.py::test_clamp")
    # The tree is as it was, and no scratch copy is left.
    assert {p: (tree / p).read_bytes() for p in before} == before
    assert {p: (tree / p).stat().st_mtime_ns for p in before} == stamps
    assert set(Path(tempfile.gettempdir()).glob("sdtgen-mutate-*")) == scratch_before

    text = mutate.report(cfg, results, 1.0)
    survivors = text.split("## Survivors")[1].split("## Equivalent")[0]
    assert f"| tiny/clamp.c:12 | `return x * 3;` | `return x + 3;` | {unreached.key} |" in survivors
    assert f"tiny/pick.py:9 | `return x * 3` | `return x + 3  (ReplaceBinaryOperator_Mul_Add)` | {unreached_py.key}" \
        in survivors
    assert killed_c.key not in survivors and equivalent.key not in survivors
    assert "v == hi returns the same value from either branch" in text.split("## Equivalent survivors")[1]
    assert "| tiny/clamp.c | 90 % | " not in text  # the tiny files are held to no target


def test_a_mutant_that_does_not_compile_or_changes_no_code_is_drawn_again(tree: Path):
    c = mutants.mutants_of(tree, "tiny/clamp.c")
    scratch = mutate.Scratch(tree, mutate.tree_files(tree))
    try:
        reference = mutate.c_object(scratch.dir, "tiny/clamp.c", [])
        assert reference
        broken = one(c, "int clamp(int v, int hi)", "/*int clamp(int v, int hi)*/")
        unused = one(c, "return x - 1;", "return x + 1;")  # a static function no code calls: not emitted
        real = one(c, "if (v > hi)", "if (v < hi)")
        # On a line whose comment runs on to the next: the comment stays open, and the file compiles.
        before_comment = one(c, "return v;", "/*return v;\t*/")
        why = [mutate.rejection(scratch.dir, m, m.text(), CLAMP_C, reference, [])
               for m in (broken, unused, real, before_comment)]
        assert (scratch.dir / "tiny/clamp.c").read_text() == CLAMP_C  # each check puts the file back
    finally:
        scratch.remove()
    assert why == ["does not compile", "compiles to the same object", None, None]


def test_a_spent_budget_runs_nothing_and_says_so(tree: Path):
    c = mutants.mutants_of(tree, "tiny/clamp.c")
    cfg = mutate.Config(tree, ["tiny/clamp.c"], sample=1, seed=1, budget=0, include=[])
    [clamp] = mutate.run(cfg, log=lambda s: None, chosen={"tiny/clamp.c": [one(c, "if (v > hi)", "if (v < hi)")]})
    assert [(o.status, o.detail) for o in clamp.outcomes] == [("not run", "the budget ran out")]
    assert clamp.baseline == "not run" and clamp.score() is None
    assert "| tiny/clamp.c |  | " in mutate.report(cfg, [clamp], 0.0)


def test_bad_input_is_one_line_and_no_report(tmp_path: Path):
    out = tmp_path / "report.md"
    for env, args, said in [({"MUTATE_SAMPLE": "many"}, [], "argument --sample: invalid int value: 'many'"),
                            ({}, ["--file", "README.md"], "README.md: no mutation tool for this kind of file"),
                            ({}, ["--file", "sdtgen/nope.c"], "sdtgen/nope.c: no such file"),
                            ({}, ["--jobs", "0"], "--jobs must be at least 1")]:
        proc = subprocess.run([sys.executable, str(ROOT / "tools/mutate.py"), *args, "--output", str(out)],
                              capture_output=True, text=True, env={**os.environ, **env})
        assert proc.returncode == 2, proc.stderr
        assert said in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr
    assert not out.exists()
