"""What a user installs is what we test: `pip install .` builds a wheel, and that wheel, installed into a fresh
virtual environment outside the checkout, carries every file of the package and builds, boots, traces and
aggregates a kernel on its own (the editable install of `make venv` imports from the tree and would hide a
package or a runtime source the wheel leaves out)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, need_tool, run
from test_readme import write_user_tree


def tree_files() -> list[str]:
    """Every file git tracks or would (untracked, not ignored): the checkout as a clean clone has it."""
    return run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT).stdout.splitlines()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip install .` builds from a clean copy of this checkout (setuptools would otherwise take
    packages a stale build/lib still holds, which hid a missing package once)."""
    clean, out = tmp_path_factory.mktemp("clone"), tmp_path_factory.mktemp("wheel")
    for name in tree_files():
        source = ROOT / name
        if source.is_file() or source.is_symlink():
            (clean / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clean / name, follow_symlinks=False)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
         "-w", str(out), str(clean)])
    (path,) = out.glob("sdtgen-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict[str, str]:
    """The environment of a user who ran `pip install .` in a fresh venv: its bin first on the PATH, no
    PYTHONPATH, a working directory outside the checkout."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return env


def tracked_package_files() -> set[str]:
    """Every file of sdtgen/ in the checkout: the package as the tree holds it."""
    return {n for n in tree_files() if n.startswith("sdtgen/") and not (ROOT / n).is_symlink()}


def test_the_wheel_carries_every_file_of_the_package_and_nothing_else(wheel):
    with zipfile.ZipFile(wheel) as archive:
        carried = {n for n in archive.namelist() if n.startswith("sdtgen/")}
    assert tracked_package_files() - carried == set(), "pyproject.toml leaves these out of `pip install .`"
    assert carried - tracked_package_files() == set()


def test_the_installed_sdtgen_imports_from_its_own_environment(installed, tmp_path):
    where = subprocess.run(["python", "-c", "import sdtgen.session.session, sdtgen.targets.emulator, "
                            "sdtgen.dscript, sdtgen; print(sdtgen.__file__)"],
                           cwd=tmp_path, env=installed, capture_output=True, text=True, check=True).stdout
    assert not Path(where.strip()).is_relative_to(ROOT)


def test_an_installed_sdtgen_builds_boots_traces_and_aggregates_a_kernel(installed, tmp_path):
    """The README's kernel built with the installed fragment and runtime sources, then booted from the wheel:
    each probe fires once per call, which babeltrace2 and the in-kernel count() both see."""
    babeltrace = need_tool("babeltrace2", "babeltrace2")
    tree = write_user_tree(tmp_path)
    run(["make", "--no-print-directory"], cwd=tree, env=installed)
    image = tree / "build" / "kernel.elf"
    calls = ["--run", "vfs_open:int", "--arg", "1", "--arg", "0x42"] * 3

    traced = run(["sdtgen", "boot", str(image), "--enable", "my:vfs:open:", *calls, "--trace", "trace"],
                 cwd=tree, env=installed)
    assert traced.stdout.count("vfs_open(1, 66) = 4") == 3
    events = run([babeltrace, str(tree / "trace")]).stdout.splitlines()
    assert sum("my:vfs:open:entry" in e for e in events) == 3 and sum("my:vfs:open:return" in e for e in events) == 3

    counted = run(["sdtgen", "boot", str(image), "-q", "--aggregate", "my:vfs:open: { @n[probename] = count(); }",
                   *calls], cwd=tree, env=installed)
    rows = {tuple(line.split()) for line in counted.stdout.splitlines() if line.strip()}
    assert {("entry", "3"), ("return", "3")} <= rows, counted.stdout

    tortured = run(["sdtgen", "torture", str(image), "--run", "vfs_open", "--arg", "1", "--arg", "2",
                    "--cpus", "2", "--toggles", "6"], cwd=tree, env=installed)
    assert "0 torn" in tortured.stdout + tortured.stderr
