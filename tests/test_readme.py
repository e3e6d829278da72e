"""The README and docs/ say what is true: their recipe builds, their examples print what they show,
their links resolve, and every option the CLI has is documented."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, cross_tool, need_tool, run

from sdtgen import arch as arches

README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_DOC = DOCS / "cli.md"
MAX_README = 15_000
# What `make demo` writes, the README promises, and its boot example reads.
DEMO_IMAGE = "build/demo/kernel.elf"
# The README's example built with every probe compiled out, the baseline of `sdtgen cost` (sdt_baseline).
BASELINE = "build/kernel-out.elf"


def fenced(text: str, info: str) -> list[str]:
    """The bodies of the ```info blocks, in order."""
    return re.findall(rf"^```{re.escape(info)}\n(.*?)^```$", text, re.S | re.M)


def console_examples(text: str) -> list[tuple[list[str], list[str]]]:
    """(command, expected output lines) for every `$ ` line of the ```console blocks."""
    out = []
    for block in fenced(text, "console"):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, *expected = chunk.rstrip("\n").split("\n")
            out.append((shlex.split(command), expected))
    return out


def tool_env() -> dict[str, str]:
    """The environment a user has after `. .venv/bin/activate`: sdtgen on the PATH."""
    return {**os.environ, "PATH": f"{Path(SDTGEN).parent}{os.pathsep}{os.environ['PATH']}"}


def make_demo(cwd: Path) -> None:
    """The project's own `make demo`, run in cwd with this interpreter's sdtgen."""
    venv = Path(sys.prefix)
    run(["make", "-f", str(ROOT / "Makefile"), "--no-print-directory", "-o", f"{venv}/.installed",
         f"VENV={venv}", "demo"], cwd=cwd)


def write_user_tree(tree: Path) -> Path:
    """The README's main.c and Makefile, in ``tree``."""
    text = README.read_text()
    (source,) = [b for b in fenced(text, "c") if b.startswith("/* main.c")]
    (makefile,) = [b for b in fenced(text, "make") if b.startswith("# Makefile")]
    (tree / "main.c").write_text(source)
    (tree / "Makefile").write_text(makefile)
    return tree


@pytest.fixture(scope="module")
def user_tree(tmp_path_factory) -> Path:
    """A directory with the README's main.c and Makefile built, and `make demo` run in it."""
    tree = write_user_tree(tmp_path_factory.mktemp("readme"))
    run(["make", "--no-print-directory"], cwd=tree, env=tool_env())
    run(["make", "--no-print-directory", BASELINE], cwd=tree, env=tool_env())
    make_demo(tree)
    return tree


# -- size and links --------------------------------------------------------------------
def test_readme_fits_a_newcomer():
    assert len(README.read_text()) <= MAX_README


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_every_relative_link_points_at_an_existing_file_and_heading():
    broken = []
    for doc in markdown_files():
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []


# A path the documents name in the repository: under one of its tracked top-level directories (tests/, sdtgen/,
# tools/, fixtures/...; not build/, which a build writes), up to the first character no path here has (so
# `sdt_module.c:34` and `test_x.py::test_y` name their files), and not part of a longer path (.venv/bin/...).
def _repo_path_pattern() -> re.Pattern:
    tracked = run(["git", "ls-files"], cwd=ROOT).stdout.splitlines()
    tops = sorted({f.split("/")[0] for f in tracked if "/" in f and not f.startswith(".")})
    return re.compile(rf"(?<![\w./-])((?:{'|'.join(map(re.escape, tops))})/[\w./*-]*)")


# A dotted name in the package: a module, or something a module defines (`sdtgen.dscript.tables.read_cpu`).
_DOTTED = re.compile(r"(?<![\w./-])(sdtgen(?:\.\w+)+)")
# An upper-case word in a path is a placeholder the reader fills in (`sdtgen/arch/NAME.py`): any file fits it.
_PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9]+")


# A test the documents name by its function (`test_x.py::test_y`, or alone): the file name is a path above.
_TEST_NAME = re.compile(r"(?<![\w/])(test_\w+)\b(?!\.)")


def _path_exists(path: str) -> bool:
    pattern = _PLACEHOLDER.sub("*", path.rstrip("/"))
    return any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists()


def _dotted_exists(name: str) -> bool:
    """``name`` is a module of the package or something one defines, or a file the package ships (sdtgen.mk)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
        if obj is not None:
            return True
        break
    return any((ROOT / "sdtgen").rglob(name))


def test_every_path_and_package_name_the_documents_give_exists():
    """A document that sends the reader to tests/..., sdtgen/... or another of the repository's directories, to a
    test by its name or to a name in the package, sends them somewhere: a test that proves what the text says,
    the module that does it, the fixture it builds. Files move; the sentences naming them must move too."""
    repo_path = _repo_path_pattern()
    tests = set(re.findall(r"^\s*def (test_\w+)", "".join(p.read_text() for p in (ROOT / "tests").rglob("*.py")),
                           re.M))
    missing = []
    for doc in markdown_files():
        text = doc.read_text()
        missing += [f"{doc.name}: {p}" for p in sorted({p.rstrip(".") for p in repo_path.findall(text)})
                    if not _path_exists(p.rstrip("."))]
        missing += [f"{doc.name}: {n}" for n in sorted(set(_DOTTED.findall(text))) if not _dotted_exists(n)]
        missing += [f"{doc.name}: {n}" for n in sorted(set(_TEST_NAME.findall(text)) - tests)]
    assert missing == []


def test_the_readme_links_every_document_in_docs():
    linked = set(re.findall(r"\]\(docs/([^)#]+)", README.read_text()))
    assert linked == {p.name for p in DOCS.glob("*.md")}


# -- the CLI reference is complete -----------------------------------------------------
def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text.split("options:", 1)[1]))


def subcommands() -> list[str]:
    usage = run([SDTGEN, "--help"]).stdout
    return re.search(r"\{([\w,-]+)\}", usage).group(1).split(",")


def test_every_option_the_help_prints_is_in_the_cli_reference():
    doc = CLI_DOC.read_text()
    missing = []
    for command in ["", *subcommands()]:
        help_text = run([SDTGEN, *command.split(), "--help"]).stdout
        if command and not re.search(rf"^#+ .*\bsdtgen {re.escape(command)}(?![\w-])", doc, re.M):
            missing.append(f"sdtgen {command}: no section")
        for option in sorted(_options(help_text)):
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", doc):
                missing.append(f"sdtgen {command} {option}")
    assert missing == []
    assert len(subcommands()) >= 9


def test_every_json_event_of_a_session_is_in_the_cli_reference():
    emitted = set()
    for source in [*(ROOT / "sdtgen" / "session").glob("*.py"), *(ROOT / "sdtgen" / "targets").glob("*.py")]:
        emitted |= set(re.findall(r"""["']event["']:\s*["'](\w+)["']""", source.read_text()))
    assert {"patched", "fire", "folded"} - emitted == {"folded"}  # the scan is not blind
    table = CLI_DOC.read_text().split("### JSON events", 1)[1]
    assert {e for e in emitted if f"| `{e}` |" not in table} == set()
    assert "`folded`" in table and "| `action` |" in table


# -- the recipe and the examples -------------------------------------------------------
def test_the_readme_makefile_builds_and_checks_an_image(user_tree):
    image, partial = user_tree / "build" / "kernel.elf", user_tree / "build" / "kernel.o"
    assert "Type:                              EXEC" in run(["readelf", "-hW", str(image)]).stdout
    symbols = run(["nm", str(image)]).stdout
    assert " T vfs_open" in symbols and "__start_set_sdt_sites_set" in symbols
    # the two probe calls of main.c, as the assembler-level relocations readelf lists
    relocs = [ln for ln in run(["readelf", "-rW", str(partial)]).stdout.splitlines() if "__dtrace_sdt_my_" in ln]
    assert len(relocs) == 2
    assert run([SDTGEN, "check", str(partial), str(image)]).returncode == 0


def test_the_readme_baseline_is_its_image_without_probes_and_cost_reads_it(user_tree):
    """`make build/kernel-out.elf` (the fragment's sdt_baseline) builds the same kernel with -DSDT_COMPILED_OUT in
    a directory of its own, leaving the probed build as it was: nm and readelf say so, and `sdtgen cost` compares
    the two."""
    probed = user_tree / "build" / "kernel.elf"
    before = probed.read_bytes()
    run(["make", "--no-print-directory", BASELINE], cwd=user_tree, env=tool_env())
    assert probed.read_bytes() == before
    inner = user_tree / f"{BASELINE}.d" / "build" / "main.o"
    assert "__dtrace_sdt_" not in run(["readelf", "-rW", str(inner)]).stdout  # compiled out: no probe call
    assert "__dtrace_sdt_my_" in run(["readelf", "-rW", str(user_tree / "build" / "main.o")]).stdout
    def body(image) -> str:  # vfs_open as objdump disassembles it
        return run(["objdump", "-dr", "--disassemble=vfs_open", str(image)]).stdout.split("<vfs_open>:", 1)[1]

    assert "__dtrace_sdt_my_vfs_open" in body(user_tree / "build" / "kernel.o")  # the probed: its two calls
    assert "call" not in body(user_tree / BASELINE) and "ret" in body(user_tree / BASELINE)
    report = json.loads(run([SDTGEN, "cost", str(probed), str(user_tree / BASELINE), "--json"]).stdout)
    (vfs_open,) = [f for f in report["functions"] if f["function"] == "vfs_open"]
    assert len(vfs_open["sites"]) == 2 and vfs_open["baseline_path"] is not None and report["missing"] == []


def test_the_demo_writes_where_the_readme_says(user_tree):
    text = README.read_text()
    assert (user_tree / DEMO_IMAGE).is_file()
    paths = set(re.findall(r"\bbuild/[\w./-]+", text))
    assert DEMO_IMAGE in paths
    assert [p for p in sorted(paths) if not (user_tree / p.rstrip("./")).exists()] == []
    section = text.split("## After `make demo`", 1)[1].split("\n## ", 1)[0]
    files = re.findall(r"`([\w.]+\.(?:o|c|S|elf))`", section)
    assert len(files) >= 4 and [f for f in files if not (user_tree / "build" / "demo" / f).is_file()] == []


def test_every_console_example_prints_what_the_readme_shows(user_tree):
    examples = console_examples(README.read_text())
    assert any(DEMO_IMAGE in cmd for cmd, _ in examples) and any("build/kernel.elf" in cmd for cmd, _ in examples)
    for command, expected in examples:
        assert command[0] == "sdtgen", command
        proc = run(command, cwd=user_tree, env=tool_env())
        assert proc.stdout.splitlines() == expected, shlex.join(command)


def cross_builds() -> list[str]:
    """The README's cross-build commands, one make command line each."""
    (block,) = [b for b in fenced(README.read_text(), "sh") if "CC=" in b]
    return block.splitlines()


def readme_boot() -> tuple[list[str], list[str]]:
    """The README's boot of its own example: the command and what it prints."""
    (example,) = [(cmd, out) for cmd, out in console_examples(README.read_text()) if "build/kernel.elf" in cmd]
    return example


def test_the_readme_cross_builds_every_architecture_with_gcc_and_two_with_clang():
    commands = cross_builds()
    assert {"i686-linux-gnu-gcc", "aarch64-linux-gnu-gcc", "riscv64-linux-gnu-gcc"} <= {make_vars(c)["CC"] for c in
                                                                                     commands}
    assert sum(bool(make_vars(c)["TARGET"]) for c in commands) >= 2


def make_vars(command: str) -> dict[str, str]:
    """VAR=value of a make command line; TARGET, clang's --target in ARCH_CFLAGS, or ''."""
    words = dict(w.split("=", 1) for w in shlex.split(command)[1:] if "=" in w)
    return {**words, "TARGET": words["ARCH_CFLAGS"].partition("--target=")[2].split(" ")[0]}


def _build_id(command: str) -> str:
    v = make_vars(command)
    return f"{v['CC']}-{v['TARGET']}" if v["TARGET"] else v["CC"]


@pytest.mark.parametrize("command", cross_builds(), ids=_build_id)
def test_each_readme_cross_build_builds_checks_and_boots_as_shown(command, tmp_path):
    """Word for word: the README's Makefile, the command line, then its boot example, which must print the
    same firings on every architecture (the fragment compiles its code with the kernel's flags: a RISC-V
    soft-float kernel links, clang's --target in CFLAGS reaches the stubs)."""
    words = make_vars(command)
    for tool in (words["CC"], words["LD"]):
        prefixed = [a for a in arches.all_arches()
                    if a.toolchain.cross_prefix and tool.startswith(a.toolchain.cross_prefix)]
        if prefixed:
            cross_tool(prefixed[0].name, tool[len(prefixed[0].toolchain.cross_prefix):])
        else:
            need_tool(tool, {"clang": "clang", "ld.lld": "lld"}[tool])
    tree = write_user_tree(tmp_path)
    env = tool_env()
    run(["bash", "-c", command], cwd=tree, env=env)
    triple = words["TARGET"] or words["CC"].rpartition("-gcc")[0]
    machine = run(["readelf", "-hW", str(tree / "build" / "kernel.elf")], env=env).stdout
    assert MACHINES[triple.split("-")[0]] in machine
    boot, expected = readme_boot()
    assert run(boot, cwd=tree, env=env).stdout.splitlines() == expected


MACHINES = {"i686": "Intel 80386", "aarch64": "AArch64", "riscv64": "RISC-V"}


def test_a_make_with_nothing_to_do_starts_sdtgen_at_most_once(user_tree, tmp_path):
    """The README's Makefile, made again: only its own `include $(shell sdtgen makefile)` may start sdtgen."""
    calls = tmp_path / "calls"
    counting = tmp_path / "bin" / "sdtgen"
    counting.parent.mkdir()
    counting.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\nexec {SDTGEN} \"$@\"\n")
    counting.chmod(0o755)
    env = {**os.environ, "PATH": f"{counting.parent}{os.pathsep}{os.environ['PATH']}"}
    proc = run(["make", "--no-print-directory"], cwd=user_tree, env=env)
    assert "Nothing to be done" in proc.stdout
    assert calls.read_text().splitlines() == ["makefile"]


# -- the layout matches the tree -------------------------------------------------------
def _layout() -> dict[str, str]:
    """path -> what, from the README's Layout table."""
    section = README.read_text().split("## Layout", 1)[1]
    return dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", section, re.M))


def test_every_path_in_the_layout_exists_and_every_module_it_names():
    layout = _layout()
    assert [p for p in layout if not (ROOT / p).exists()] == []
    modules = re.findall(r"`(\w+\.py)`", layout["sdtgen/"])
    assert [m for m in modules if not (ROOT / "sdtgen" / m).is_file()] == []


def test_the_layout_lists_every_package_module_and_directory():
    layout = _layout()
    tracked = run(["git", "ls-files"], cwd=ROOT).stdout.splitlines()
    top = {f.split("/")[0] for f in tracked if "/" in f and not f.startswith(".")}
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "sdtgen").glob("*/__init__.py")}
    listed = {p.rstrip("/") for p in layout}
    assert top - {p.split("/")[0] for p in listed} == set()
    assert packages - listed == set()
    modules = {p.name for p in (ROOT / "sdtgen").glob("*.py")} - {"__init__.py", "__main__.py"}
    assert modules - set(re.findall(r"`(\w+\.py)`", layout["sdtgen/"])) == set()
