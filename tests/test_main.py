"""The sdtgen command's entry point: an interrupt while sdtgen starts is one line and exit 130."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from helpers import SDTGEN

import sdtgen.__main__ as entry


class Interrupting(types.ModuleType):
    """A module whose import is cut short by Ctrl-C (as ``raise_`` says)."""

    def __init__(self, name: str, raise_) -> None:
        super().__init__(name)
        self.raise_ = raise_

    def __getattr__(self, name: str):
        if name == "raise_":
            raise AttributeError(name)
        self.raise_()


def interrupt() -> None:
    raise KeyboardInterrupt


def interrupt_as_context() -> None:
    """What importlib turns an interrupted import into when it leaves a module lock behind."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise RuntimeError("deadlock detected by _ModuleLock('sdtgen.arch.x86_64')")  # noqa: B904


@pytest.mark.parametrize("raise_", [interrupt, interrupt_as_context])
def test_an_interrupt_while_sdtgen_imports_is_one_line_and_exit_130(monkeypatch, capsys, raise_):
    monkeypatch.setitem(sys.modules, "sdtgen.cli", Interrupting("sdtgen.cli", raise_))
    assert entry.main() == 130
    out = capsys.readouterr()
    assert out.out == "" and out.err == "sdtgen: error: interrupted\n"


def test_an_error_that_is_no_interrupt_is_not_hidden(monkeypatch):
    def broken() -> None:
        raise RuntimeError("a real bug")

    monkeypatch.setitem(sys.modules, "sdtgen.cli", Interrupting("sdtgen.cli", broken))
    with pytest.raises(RuntimeError, match="a real bug"):
        entry.main()


def test_the_command_is_the_entry_point_itself():
    """The installed command runs sdtgen.__main__.main first, with nothing imported before it."""
    script = Path(SDTGEN).read_text().splitlines()
    assert script[0].startswith("#!") and "from sdtgen.__main__ import main" in script
    assert not [ln for ln in script[1:] if ln.startswith(("import", "from")) and "sdtgen.__main__" not in ln]
