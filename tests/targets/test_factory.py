"""sdtgen.targets.open_target: one factory for every kind of target, with one set of defaults (what the command
line, the tests, the bench and `cost` build alike)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from sdtgen.errors import SdtError
from sdtgen.limits import DEFAULT_BUFFER, DEFAULT_TIMEOUT
from sdtgen.targets import ATTACH, DEFAULTS, EMULATOR, KINDS, LISTEN, OWN, PROCESS, QEMU, SHARED, target_options


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_takes_the_same_defaults_for_what_it_shares(kind):
    """A ring of DEFAULT_BUFFER bytes a CPU, overflow drop, DEFAULT_TIMEOUT to answer, one CPU: the same for every
    kind that takes them (no kind has a default of its own for a shared option)."""
    chosen = target_options(kind)
    shared = {"buffer_size": DEFAULT_BUFFER, "overflow": "drop", "timeout": DEFAULT_TIMEOUT, "cpus": 1}
    assert {k: chosen[k] for k in SHARED[kind]} == {k: shared[k] for k in SHARED[kind]}
    assert target_options(kind, buffer_size=None, timeout=None) == chosen  # None: the default


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_accepts_the_shared_options_and_refuses_what_none_takes(kind):
    """The shared options may be given to any kind (those it does without are left out); anything else is a
    caller's mistake."""
    given = {"buffer_size": 4096, "overflow": "overwrite", "timeout": 5.0, "cpus": 2}
    assert target_options(kind, **given) == {
        **target_options(kind), **{k: v for k, v in given.items()
                                    if k in SHARED[kind]}}
    with pytest.raises(TypeError):
        target_options(kind, bogus=1)


@pytest.mark.parametrize(("options", "said"), [({"buffer_size": 3000}, "--buffer-size 3000 is not a power of two"),
                                               ({"buffer_size": 1024}, "--buffer-size 1024"),
                                               ({"overflow": "ring"}, "unknown overflow policy 'ring'")])
def test_a_bad_option_is_one_line_before_anything_starts(options, said):
    for kind in ("emulator", "qemu", "attach", "process"):
        with pytest.raises(SdtError, match=said):
            target_options(kind, **options)


# -- one set of defaults: the factory's, and every construction path goes through it -------------------------------
REPO = Path(__file__).resolve().parents[2]
FACTORY = REPO / "sdtgen" / "targets" / "__init__.py"
# Where targets are built: the package (the command line, the sessions, `cost`), the bench and the tests.
PATHS = sorted(p for where in ("sdtgen", "bench", "tests") for p in (REPO / where).rglob("*.py"))
# What builds a session or a target with options: the factory, the session's start, the tests' boot.
BUILDERS = {"open_target", "target_options", "open_session", "Booted"}
# Restated defaults left where they are, by file name and text: none.
LEFT: set[str] = set()


def _target_classes() -> dict[str, type]:
    """kind -> the class the factory builds for it."""
    from sdtgen.targets.emulator.target import EmulatorTarget
    from sdtgen.targets.listen import ListenTarget
    from sdtgen.targets.process import ProcessTarget
    from sdtgen.targets.qemu import QemuTarget
    from sdtgen.targets.serial import AttachTarget

    return {EMULATOR: EmulatorTarget, QEMU: QemuTarget, ATTACH: AttachTarget, PROCESS: ProcessTarget,
            LISTEN: ListenTarget}


def _defaults() -> dict[str, set]:
    """option -> the values the factory gives it when none is given (None, "the default", aside)."""
    out: dict[str, set] = {}
    for name, value in [*DEFAULTS.items(), *(kv for own in OWN.values() for kv in own.items())]:
        if value is not None:
            out.setdefault(name, set()).add(value)
    return out


def _constant(node: ast.AST):
    """The value of an expression made of literals alone (``1 << 20`` included), else a sentinel."""
    if all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.operator, ast.unaryop, ast.Load))
           for n in ast.walk(node)):
        return eval(compile(ast.Expression(node), "<literal>", "eval"))  # literals only: checked just above
    return _constant


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def restated_defaults(path: Path) -> list[str]:
    """Each place in ``path`` that writes one of the factory's defaults again as a literal: a keyword given to a
    builder, the default of a parameter named as an option in a function that calls a builder, an `add_argument`
    default of an option's flag (None and () say "nothing given": they restate nothing)."""
    defaults = _defaults()
    out = []

    def check(name: str, value: ast.AST, where: ast.AST) -> None:
        literal = _constant(value)
        if name in defaults and literal not in (_constant, None, ()) and any(
                literal == d and type(literal) is type(d) for d in defaults[name]):
            out.append(f"{path.relative_to(REPO)}:{where.lineno}: {name}={ast.unparse(value)}")

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and _called(node) in BUILDERS:
            for k in node.keywords:
                if k.arg is not None:
                    check(k.arg, k.value, node)
        elif isinstance(node, ast.Call) and _called(node) == "add_argument" and node.args:
            flag = node.args[0]
            if isinstance(flag, ast.Constant) and isinstance(flag.value, str) and flag.value.startswith("--"):
                for k in node.keywords:
                    if k.arg == "default":
                        check(flag.value[2:].replace("-", "_"), k.value, node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(n, ast.Call) and _called(n) in BUILDERS for n in ast.walk(node)):
            a = node.args  # a function that builds one: its parameters are options on their way to the factory
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
            for arg, d in pairs:
                check(arg.arg, d, node)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_a_target_class_has_no_default_of_its_own(kind):
    """Each class the factory builds takes exactly the options target_options fills, every one required: the
    factory's DEFAULTS and OWN are the only defaults there are."""
    cls = _target_classes()[kind]
    params = list(inspect.signature(cls.__init__).parameters.values())[2:]  # after self and the Host
    assert sorted(p.name for p in params) == sorted(target_options(kind)), cls.__name__
    assert [p.name for p in params if p.default is not inspect.Parameter.empty] == [], cls.__name__


def test_every_target_is_built_by_the_factory():
    """No module of the package, the bench or the tests builds a target class itself: the command line, the
    sessions, `cost`, the bench and the tests all open targets through sdtgen.targets.open_target."""
    classes = {c.__name__ for c in _target_classes().values()} | {"ControlTarget"}
    built = [f"{p.relative_to(REPO)}:{n.lineno}: {_called(n)}" for p in PATHS if p != FACTORY
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Call) and _called(n) in classes]
    assert built == []


def test_no_construction_path_writes_a_default_again():
    """Not one literal anywhere restates a factory default (as `timeout=20.0` and `buffer_size=1 << 20` once did
    beside DEFAULT_TIMEOUT and DEFAULT_BUFFER): the command line's option defaults, the sessions' parameters, the
    bench's and the tests' read the constants, or leave the option out."""
    found = [line for p in PATHS for line in restated_defaults(p)]
    assert [line for line in found if f"{Path(line.split(':')[0]).name}: {line.split(': ', 1)[1]}" not in LEFT] == []


def test_a_literal_default_is_found(tmp_path):
    """The check above sees each form it looks for (so an empty answer means something)."""
    probe = REPO / "tests" / "targets" / "_restated_probe.py"
    probe.write_text("def f(timeout: float = 20.0, *, overflow='drop', module=None, qemu_args=()):\n"
                     "    open_session('qemu', 'x', None, buffer_size=1 << 20, transport='serial')\n"
                     "    b.add_argument('--schedule', default='parallel')\n"
                     "    b.add_argument('--cpus', type=int, default=4)\n")
    try:
        found = [line.split(": ", 1)[1] for line in restated_defaults(probe)]
    finally:
        probe.unlink()
    assert sorted(found) == ["buffer_size=1 << 20", "overflow='drop'", "schedule='parallel'", "timeout=20.0"]
