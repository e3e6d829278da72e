"""Which tests cover a source file: derived from the tests' own text, plus one declared table for the rest.

A Python module is covered by each test file that imports it (`sdtgen.transport.frames`, or `frames` from
`sdtgen.transport`); a C file by each test file that names it (`sdt_module.c`) or one of the functions it defines
for others to call (`sdt_module_load`), in Python or in a C harness the test builds. A test helper (a module of
tests/ that is not a test file) that covers a file passes it on to the test files that import the helper, and a
C harness to the test files that name it. Test files come ordered by how often they name the file: the
likeliest killers run first, and a mutant ends at its first failing test (pytest -x).

EXTRA holds what the text cannot show: tests that reach a file only through the fixture kernel or the CLI.
"""

from __future__ import annotations

import re
from pathlib import Path

# Source file -> test files that exercise it without naming it (each entry says why in a word).
EXTRA: dict[str, list[str]] = {
    # D programs compiled to aggregation tables: run by the boot tests through `--aggregate`.
    "sdtgen/runtime/sdt_aggregate.c": ["tests/targets/emulator/test_aggregation_tables.py",
                                       "tests/targets/emulator/test_aggregation_printed.py"],
    # The packet rings: every boot that records reads them.
    "sdtgen/runtime/sdt_transport.c": ["tests/targets/emulator/test_datapath.py",
                                       "tests/targets/emulator/test_session_end.py"],
    # The patch protocol: static functions only, reached through arming and disarming.
    "sdtgen/runtime/sdt_patch.c": ["tests/runtime/test_patch_protocol.py", "tests/targets/emulator/test_patcher.py",
                                   "tests/targets/emulator/test_torture.py"],
    # The kernel-log lines: static functions only, printed when a boot reports a damaged ring or a refusal.
    "sdtgen/runtime/sdt_report.c": ["tests/targets/emulator/test_guest_damage.py",
                                    "tests/targets/emulator/test_hostile_images.py"],
    # The control core's program and table commands: static functions of a file sdt_control.c includes.
    "sdtgen/runtime/sdt_control_programs.c": ["tests/runtime/test_control.py", "tests/targets/test_control_tables.py",
                                              "tests/runtime/test_program_tables.py"],
    # Programs' task instructions (LDTASK, TASKCMP): reached through a kernel with the task hook, by D's tid.
    "sdtgen/runtime/sdt_program.c": ["tests/targets/test_task_programs.py"],
    # The runtime's shared state (its lock, the trap's entry count, the gone list): what every layer includes.
    "sdtgen/runtime/sdt_state.c": ["tests/runtime/test_hold.py", "tests/runtime/test_patch_protocol.py",
                                   "tests/runtime/test_process_modules.py", "tests/targets/emulator/test_modules.py"],
    # Modules in a Linux process (dlopen) as well as in the emulator and QEMU.
    "sdtgen/runtime/sdt_module.c": ["tests/runtime/test_process_modules.py"],
    # The emulated boot's consumer of the rings: reached through `sdtgen boot`.
    "sdtgen/transport/consumer.py": ["tests/targets/emulator/test_datapath.py",
                                     "tests/targets/emulator/test_session_end.py",
                                     "tests/targets/emulator/test_guest_damage.py"],
    # The per-CPU stream reader behind every trace format.
    "sdtgen/trace/streams.py": ["tests/trace/test_packets.py", "tests/trace/test_ctf.py",
                                "tests/targets/emulator/test_guest_damage.py"],
}

_DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \t*]*?\b(sdt_\w+)\s*\(", re.M)


def c_names(text: str) -> set[str]:
    """The functions a C file defines for other files (definitions at the line's start, not static)."""
    return {m.group(1) for m in _DEF.finditer(text)}


def _py_patterns(path: str) -> list[re.Pattern]:
    module = path[:-3].replace("/", ".")
    package, _, name = module.rpartition(".")
    return [re.compile(rf"\b{re.escape(module)}\b"),
            re.compile(rf"from {re.escape(package)} import (\([^)]*\b{name}\b[^)]*\)|[^\n]*\b{name}\b)")]


def _c_patterns(root: Path, path: str) -> list[re.Pattern]:
    names = {Path(path).name, *c_names((root / path).read_text())}
    return [re.compile(rf"\b{re.escape(n)}\b") for n in sorted(names)]


def _mentions(text: str, patterns: list[re.Pattern]) -> int:
    return sum(len(p.findall(text)) for p in patterns)


def covering_tests(root: Path, path: str, tests_dir: str = "tests") -> list[str]:
    """The test files (relative to root) that cover ``path``, likeliest killers first."""
    patterns = _c_patterns(root, path) if path.endswith(".c") else _py_patterns(path)
    texts = {p.relative_to(root).as_posix(): p.read_text(errors="replace")
             for p in sorted((root / tests_dir).rglob("*")) if p.suffix in (".py", ".c") and p.is_file()}
    score = {f: n for f, t in texts.items() if (n := _mentions(t, patterns))}
    # Helpers and harnesses pass what they cover on to the test files that use them (one level is what the
    # suite has: conftest and helper modules imported by test files, C harnesses named by them).
    for helper, n in list(score.items()):
        if Path(helper).name.startswith("test_"):
            continue
        stem = Path(helper).stem
        used = re.compile(rf"(\bimport {stem}\b|\bfrom {stem} import\b|\b{re.escape(Path(helper).name)}\b)")
        for f, t in texts.items():
            if f != helper and used.search(t):
                score[f] = score.get(f, 0) + n
    for extra in EXTRA.get(path, []):
        score.setdefault(extra, 0)
    chosen = [f for f in score if Path(f).name.startswith("test_") and f.endswith(".py") and (root / f).exists()]
    return sorted(chosen, key=lambda f: (-score[f], f))
