"""The seam between the session and its targets (sdtgen/targets/base.py): a target is built with a Host and sees
nothing else of the host, and what only some targets can do is declared, never probed."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import sdtgen.targets
from sdtgen.targets import base

ROOT = Path(sdtgen.targets.__file__).parent
SESSION = ROOT.parent / "session"
CAPABILITIES = {base.MODULES: base.Modules, base.ACTIONS: base.Actions, base.LISTENS: base.Listens,
                base.IDLE: base.Idles, base.EXHAUSTIVE: base.Exhaustive, base.LEAVES: base.Leaves,
                base.SALVAGES: base.Salvages,
                base.SESSIONS: base.Sessions, base.CLOCK: base.Clock}


def _modules(where: Path) -> list[Path]:
    return sorted(where.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_target_imports_the_session_or_reaches_for_one(path):
    """Not one module under sdtgen/targets imports sdtgen.session, nor names a ``session`` of anything: the Host's
    image and sinks are all a target has."""
    tree = ast.parse(path.read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in imported if m.startswith("sdtgen.session")] == []
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "session"] == []
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, ast.arg) and n.arg == "session"] == []


def _target_classes() -> list[type]:
    from sdtgen.targets.emulator.target import EmulatorTarget
    from sdtgen.targets.listen import ListenTarget
    from sdtgen.targets.process import ProcessTarget
    from sdtgen.targets.qemu import QemuTarget
    from sdtgen.targets.serial import AttachTarget

    return [EmulatorTarget, QemuTarget, AttachTarget, ProcessTarget, ListenTarget]


@pytest.mark.parametrize("cls", _target_classes(), ids=lambda c: c.__name__)
def test_every_capability_a_target_declares_it_has_and_it_is_built_with_a_host(cls):
    """Each declared capability is a protocol of base.py whose verbs the class has; the first parameter it is built
    with is the Host."""
    assert cls.capabilities <= set(CAPABILITIES), cls.capabilities
    for name in cls.capabilities:
        verbs = [v for v in vars(CAPABILITIES[name]) if not v.startswith("_")]
        assert verbs and [v for v in verbs if not callable(getattr(cls, v, None))] == [], (name, verbs)
    first = list(inspect.signature(cls.__init__).parameters.values())[1]
    assert first.name == "host" and first.annotation in (base.Host, "Host")


@pytest.mark.parametrize("path", _modules(SESSION), ids=lambda p: p.name)
def test_the_session_probes_no_target_with_getattr(path):
    """The session asks a target's declared capabilities, never getattr/hasattr on it."""
    tree = ast.parse(path.read_text())
    probes = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("getattr", "hasattr") and n.args and "target" in ast.unparse(n.args[0])]
    assert [ast.unparse(n) for n in probes] == []


def self_probes(source: str) -> list[str]:
    """getattr(self, NAME, ...) calls in ``source``: an attribute of a target's own probed instead of declared."""
    return [ast.unparse(n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == "getattr" and n.args
            and ast.unparse(n.args[0]) == "self"]


@pytest.mark.parametrize("path", _modules(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_target_declares_its_own_attributes_rather_than_probing_them(path):
    """ControlTarget.module (the module the host placed for the kernel's loader) and QEMU's process, shared RAM and
    logs are declared on the class with their empty value: no target asks getattr(self, ...) whether it has one."""
    assert self_probes(path.read_text()) == []
    assert self_probes('linked = getattr(self, "module", None)') == ['getattr(self, "module", None)'.replace('"', "'")]


def test_a_capability_is_never_named_as_a_kind_of_target():
    """Each name means one thing: the kinds the factory opens (sdtgen.targets: ..., LISTEN) and the capabilities a
    target declares (sdtgen.targets.base: ..., LISTENS) share neither a constant's name nor a value."""
    kinds = {n for n, v in vars(sdtgen.targets).items() if n.isupper() and isinstance(v, str)
             and v in sdtgen.targets.KINDS}
    capabilities = {n for n, v in vars(base).items() if n.isupper() and isinstance(v, str) and v in CAPABILITIES}
    assert kinds == {"EMULATOR", "QEMU", "ATTACH", "PROCESS", "LISTEN"} and len(capabilities) == len(CAPABILITIES)
    assert kinds & capabilities == set() and set(sdtgen.targets.KINDS) & set(CAPABILITIES) == set()
