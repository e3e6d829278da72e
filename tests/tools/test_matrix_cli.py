"""tools/matrix.py from the command line: filters, JSON, the document block it rewrites, and any kernel's
sources with the calls its user names, driving the sdtgen on PATH with nothing of the checkout beside it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from helpers import ROOT, SDTGEN, need_tool

README_KERNEL = """\
#include <sdt.h>
SDT_PROVIDER_DEFINE(my);
SDT_PROBE_DEFINE2(my, vfs, open, entry, "const char *", "int");
SDT_PROBE_DEFINE1(my, vfs, open, return, "int");
static const char *const paths[] = { "/etc/passwd", "/dev/null" };
int vfs_open(int which, int flags)
{
	int fd = 3 + which;
	SDT_PROBE2(my, vfs, open, entry, paths[which & 1], flags);
	SDT_PROBE1(my, vfs, open, return, fd);
	return fd;
}
int quiet(int x) { return x * 2; }
"""


def matrix(*args, tools=ROOT / "tools", env: dict | None = None) -> subprocess.CompletedProcess:
    """tools/matrix.py with site-packages off (-S): it must need nothing but the standard library and the
    sdtgen command it is given."""
    env = env or {**os.environ, "SDTGEN": SDTGEN}
    return subprocess.run([sys.executable, "-S", str(tools / "matrix.py"), *map(str, args)], capture_output=True,
                          text=True, env=env)


def test_one_cell_as_json():
    proc = matrix("--mode", "stubs-first", "--compiler", "gcc", "--toolchain", "gcc:bfd/bfd", "--json")
    assert proc.returncode == 0, proc.stderr
    (cell,) = json.loads(proc.stdout)["cells"]
    assert (cell["row"], cell["column"], cell["state"]) == ("stubs-first", "gcc bfd/bfd", "done")
    assert cell["results"]["reloc"]["status"] == "ok" and cell["results"]["reloc"]["boot"] is True
    assert cell["results"]["offset"]["status"] == "broken"


def test_the_output_block_is_rewritten_in_place_and_is_the_same_from_run_to_run(tmp_path):
    """Only the block between the markers changes. Each run builds in a fresh temporary directory and the
    linker's messages name files in it, yet two runs write the same block."""
    need_tool("i686-linux-gnu-gcc", "gcc-i686-linux-gnu")
    need_tool("ld.lld", "lld")
    first, second = tmp_path / "first.md", tmp_path / "second.md"
    first.write_text("intro\n<!-- matrix:begin -->\nOLD-TABLE\n<!-- matrix:end -->\nafter\n")
    second.write_text("<!-- matrix:begin -->\n<!-- matrix:end -->\n")
    for doc in (first, second):
        proc = matrix("--arch", "i386", "--mode", "pie", "--mode", "pic-noplt", "--compiler", "gcc",
                      "--toolchain", "gcc:lld/bfd", "--toolchain", "gcc:lld/gold", "--output", doc)
        assert proc.returncode == 0, proc.stderr
    text, again = first.read_text(), second.read_text()
    assert text.startswith("intro\n<!-- matrix:begin -->\n") and text.endswith("<!-- matrix:end -->\nafter\n")
    assert "OLD-TABLE" not in text and "| mode (i386) | gcc lld/bfd | gcc lld/gold |" in text
    # lld's i386 PIE object is one GNU ld and gold reject, naming the file: the reasons carry a path
    assert "- final link: kernel-reloc.o: file not recognized" in text
    assert "/tmp" not in text and "sdtgen-matrix-" not in text
    # a refusal keeps its place in the object, which is the same in every run
    assert "- reloc: .text:kchecksum+0x" in text and "R_386_GOT32X" in text
    assert text.removeprefix("intro\n").removesuffix("after\n") == again


def tools_alone(tmp_path):
    """tools/ copied where no fixtures/ (and no sdtgen package) is beside it, and a kernel of the user's."""
    shutil.copytree(ROOT / "tools", tmp_path / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    kernel = tmp_path / "mykernel"
    kernel.mkdir()
    (kernel / "main.c").write_text(README_KERNEL)
    env = {**os.environ, "PATH": f"{os.path.dirname(SDTGEN)}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SDTGEN", None)  # the sdtgen on PATH
    return tmp_path / "tools", kernel, env


def test_any_kernel_with_the_calls_its_user_names(tmp_path):
    need_tool("ld.lld", "lld")
    tools, kernel, env = tools_alone(tmp_path)
    proc = matrix("--sources", kernel, "--call", "vfs_open:int 1 0x42", "--call", "vfs_open:int 0 7",
                  "--cflags=-O1", "--mode", "plain", "--mode", "gc", "--compiler", "gcc", "--toolchain",
                  "gcc:bfd/lld", "--json", tools=tools, env=env)
    assert proc.returncode == 0, proc.stderr
    for cell in json.loads(proc.stdout)["cells"]:
        assert [(r["status"], r["sites"], r["boot"]) for r in cell["results"].values()] == [("ok", 2, True)] * 2


def test_calls_that_fire_no_probe_are_shown_as_compared_nothing(tmp_path):
    tools, kernel, env = tools_alone(tmp_path)
    proc = matrix("--sources", kernel, "--call", "quiet:int 4", "--mode", "plain", "--compiler", "gcc",
                  "--toolchain", "gcc:bfd/bfd", tools=tools, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "? / ?" in proc.stdout and "✓" not in proc.stdout
    assert "reloc: the calls fire no probe natively: nothing to compare" in proc.stdout


def test_other_sources_need_their_calls_named(tmp_path):
    tools, kernel, env = tools_alone(tmp_path)
    proc = matrix("--sources", kernel, "--mode", "plain", tools=tools, env=env)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"{kernel}: error: no calls to compare" in proc.stderr and "--call" in proc.stderr
    bad = matrix("--sources", kernel, "--call", "vfs_open:int one", tools=tools, env=env)
    assert bad.returncode == 2 and "--call 'vfs_open:int one'" in bad.stderr


def test_usage_errors_are_one_line():
    for args, words in ((["--mode", "nosuch"], "no matrix cell matches"), (["--arch", "vax"], "'vax'")):
        proc = matrix(*args)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and words in proc.stderr, proc.stderr
    gone = matrix("--mode", "plain", env={**os.environ, "SDTGEN": "/nonexistent/sdtgen"})
    assert gone.returncode == 2 and "set SDTGEN" in gone.stderr and "Traceback" not in gone.stderr
