"""The mutants of one source file, made by real mutation tools, each with a key that survives edits elsewhere.

C files get universalmutator's rules (universal, c and c_like: the ones its `mutate FILE c` applies); Python
files get cosmic-ray's core operators (those that take no arguments). Neither tool's runner is used: the
mutants run in tools/mutate.py, each against only the tests that cover its file, in a scratch copy of the tree.

A mutant's key is a hash of its file, what the line said before and after (or the operator, for Python) and
how many identical changes come before it in the file: line numbers move whenever someone edits above, and the
hand-kept list of equivalent mutants (tools/mutation_equivalent.txt) must still name the same mutant then.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import io
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# The rule files `mutate FILE c` uses (universalmutator's genmutants: universal + the language + c_like).
C_RULES = ["universal.rules", "c.rules", "c_like.rules"]


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the tree, with forward slashes
    line: int  # 1-based, in the unmutated file
    before: str  # the line as it is, stripped
    after: str  # the mutated line (C) or the operator's change (Python), stripped
    rule: str  # the tool's rule or operator that made it
    key: str
    make: Callable[[], str] = field(compare=False, repr=False)  # the whole mutated file

    def text(self) -> str:
        return self.make()


def _key(path: str, before: str, after: str, nth: int) -> str:
    return hashlib.sha1(f"{path}\0{before}\0{after}\0{nth}".encode()).hexdigest()[:12]


def _keyed(path: str, raw: list[tuple[int, str, str, str, Callable[[], str]]]) -> list[Mutant]:
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for line, before, after, rule, make in raw:
        nth = seen[(before, after)]
        seen[(before, after)] += 1
        out.append(Mutant(path, line, before, after, rule, _key(path, before, after, nth), make))
    return out


def c_mutants(root: Path, path: str) -> list[Mutant]:
    """universalmutator's mutants of a C file, in its order.

    It skips every line that holds a `/*`, code with a comment after it too (most of the runtime's lines that
    say why): it is given the file with its comments blanked, and each mutated line goes back into the file
    as it is, comments and all, with the line's own comment left out (a comment running on from or into the
    line is kept open or closed)."""
    from universalmutator import mutator

    text = (root / path).read_text()
    source = text.splitlines(keepends=True)
    code, opens, closes = blank_c_comments(text)
    code_lines = code.splitlines(keepends=True)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its rule files and counts
        made = mutator.mutants_regexp(code_lines, ruleFiles=C_RULES, ignorePatterns=[], ignoreStringOnly=True)
    raw = []
    for lineno, new_line, (rule, _where), _regex in made:
        body = new_line.rstrip("\n")
        line = ("*/ " if lineno in closes else "") + body + (" /*" if lineno in opens else "") + "\n"

        def make(lineno=lineno, line=line) -> str:
            return "".join(source[:lineno - 1]) + line + "".join(source[lineno:])
        raw.append((lineno, code_lines[lineno - 1].strip(), body.strip(), rule, make))
    return _keyed(path, raw)


_C_TOKENS = re.compile(r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|//[^\n]*|/\*.*?\*/', re.S)


def blank_c_comments(text: str) -> tuple[str, set[int], set[int]]:
    """The text with each comment made a space (its line ends kept, so lines keep their numbers), and the
    1-based lines on which a comment opens that goes on past the line, and on which one such ends."""
    opens: set[int] = set()
    closes: set[int] = set()
    parts, at = [], 0
    for m in _C_TOKENS.finditer(text):
        if m.group(1):
            continue
        first = text.count("\n", 0, m.start()) + 1
        newlines = m.group(0).count("\n")
        if newlines:
            opens.add(first)
            closes.add(first + newlines)
        parts += [text[at:m.start()], "\n" * newlines or " "]
        at = m.end()
    return "".join(parts) + text[at:], opens, closes


def py_mutants(root: Path, path: str) -> list[Mutant]:
    """cosmic-ray's mutants of a Python file: each operator that needs no arguments, at each of its positions."""
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator, operator_names

    source = (root / path).read_text()
    lines = source.splitlines()
    module = get_ast(source)
    raw = []
    for name in operator_names():
        cls = get_operator(name)
        if cls.arguments():
            continue
        operator = cls()
        positions = [start for node in ast_nodes(module) for start, _end in operator.mutation_positions(node)]
        for occurrence, (lineno, _col) in enumerate(positions):
            def make(operator=operator, occurrence=occurrence) -> str:
                return mutate_code(source, operator, occurrence)
            raw.append((lineno, lines[lineno - 1].strip(), name, name, make))
    return _keyed(path, raw)


def shown(root: Path, m: Mutant) -> str:
    """The mutated line as a reader wants it: universalmutator's line for C; for Python, the line cosmic-ray's
    change gives (its operator alone does not say which `<=` of `a <= b <= c` it changed) and the operator."""
    if not m.path.endswith(".py"):
        return m.after
    added = [line[1:].strip() for line in difflib.unified_diff((root / m.path).read_text().splitlines(),
                                                                m.text().splitlines(), n=0, lineterm="")
             if line.startswith("+") and not line.startswith("+++")]
    return f"{' ⏎ '.join(added) or '(line removed)'}  ({m.rule.removeprefix('core/')})"


def diff(root: Path, m: Mutant) -> str:
    return "".join(difflib.unified_diff((root / m.path).read_text().splitlines(keepends=True),
                                        m.text().splitlines(keepends=True), f"a/{m.path}", f"b/{m.path}"))


def mutants_of(root: Path, path: str) -> list[Mutant]:
    if path.endswith(".c"):
        return c_mutants(root, path)
    if path.endswith(".py"):
        return py_mutants(root, path)
    raise ValueError(f"{path}: no mutation tool for this kind of file (C and Python only)")


def python_redundant(original: str, mutated: str | None) -> str | None:
    """Why a Python mutant is no mutant (the same program, or no program), or None.

    Annotations are never evaluated under `from __future__ import annotations` (which every module here
    has), so a change inside one is the same program."""
    if mutated is None or mutated == original:
        return "cosmic-ray made no change"
    try:
        trees = [ast.parse(text) for text in (original, mutated)]
    except SyntaxError:
        return "not valid Python"
    if "from __future__ import annotations" in original:
        trees = [_NoAnnotations().visit(tree) for tree in trees]
    if ast.dump(trees[0]) == ast.dump(trees[1]):
        return "a change inside an annotation only"
    return None


class _NoAnnotations(ast.NodeTransformer):
    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AnnAssign:
        node.annotation = ast.Constant(None)
        self.generic_visit(node)
        return node


def shuffled(mutants: list[Mutant], seed: int) -> list[Mutant]:
    """The file's mutants in the order a seed gives: the same seed, the same order, on any machine (keyed by
    the mutants' keys, not by the order the tool made them in)."""
    ordered = sorted(mutants, key=lambda m: m.key)
    random.Random(f"{seed}:{ordered[0].path if ordered else ''}").shuffle(ordered)
    return ordered


def quotas(paths: list[str], size: int) -> dict[str, int]:
    """The sample split evenly over the files, the first files taking one more when it does not divide."""
    n = len(paths)
    return {p: size // n + (i < size % n) for i, p in enumerate(paths)} if n else {}
