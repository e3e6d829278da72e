"""gen's outputs: checked before anything is written, never a device, a FIFO, a directory or the
input, and all changed together or not at all, whatever interrupts it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import time

import pytest
from helpers import SDTGEN, compile_c, partial_link, readelf_probe_relocs, run, sdtgen
from tables import readelf

OLD_STUBS, OLD_TABLE = b"/* old stubs */\n", b"/* old table */\n"


@pytest.fixture
def obj(kernel, tmp_path):
    out = tmp_path / "k.o"
    shutil.copy(kernel.partial, out)
    return out


def one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def untouched(tmp_path, obj, before: bytes, *absent: str) -> None:
    assert obj.read_bytes() == before
    for name in absent:
        assert not (tmp_path / name).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_stubs_in_a_missing_directory_is_one_line(obj, tmp_path):
    before = obj.read_bytes()
    one_error_line(sdtgen("gen", obj, "--stubs", "/nonexistent/x.c", "--table", tmp_path / "t.S"),
                   "/nonexistent/x.c", "does not exist")
    untouched(tmp_path, obj, before, "t.S")


@pytest.mark.parametrize("which", ["--stubs", "--table"])
def test_an_output_that_is_a_directory_is_refused_before_anything_is_written(obj, tmp_path, which):
    (tmp_path / "s.c").write_bytes(OLD_STUBS)
    before = obj.read_bytes()
    paths = {"--stubs": tmp_path / "s.c", "--table": tmp_path / "t.S"}
    paths[which] = tmp_path
    one_error_line(sdtgen("gen", obj, "--stubs", paths["--stubs"], "--table", paths["--table"]), "directory")
    assert (tmp_path / "s.c").read_bytes() == OLD_STUBS  # the stubs were not replaced first
    untouched(tmp_path, obj, before, "t.S")


def test_the_table_may_not_be_the_object(obj, tmp_path):
    before = obj.read_bytes()
    one_error_line(sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", obj), "same file")
    untouched(tmp_path, obj, before, "s.c")


def test_two_outputs_may_not_be_one_file_by_path_or_by_inode(obj, tmp_path):
    before = obj.read_bytes()
    one_error_line(sdtgen("gen", obj, "--stubs", tmp_path / "x.c", "--table", tmp_path / "x.c"), "same file")
    one_error_line(sdtgen("gen", obj, "--stubs", tmp_path / "x.c", "--table", tmp_path / "." / "x.c"), "same file")
    untouched(tmp_path, obj, before, "x.c")
    (tmp_path / "a.c").write_bytes(OLD_STUBS)
    os.link(tmp_path / "a.c", tmp_path / "b.S")  # one inode, two names
    one_error_line(sdtgen("gen", obj, "--stubs", tmp_path / "a.c", "--table", tmp_path / "b.S"), "same file")
    os.link(obj, tmp_path / "obj-alias.S")
    one_error_line(sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "obj-alias.S"), "same file")
    assert (tmp_path / "a.c").read_bytes() == OLD_STUBS and obj.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_character_device_is_never_replaced(obj, tmp_path):
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    one_error_line(sdtgen("gen", obj, "--stubs", node, "--table", tmp_path / "t.S"), "character device")
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert not (tmp_path / "t.S").exists()


def test_a_fifo_output_is_refused_without_waiting_on_it(obj, tmp_path):
    fifo = tmp_path / "t.S"
    os.mkfifo(fifo)
    proc = subprocess.run([SDTGEN, "gen", str(obj), "--stubs", str(tmp_path / "s.c"), "--table", str(fifo)],
                          capture_output=True, text=True, timeout=60)
    one_error_line(proc, "FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not (tmp_path / "s.c").exists()


def test_a_fifo_input_is_refused_without_waiting_on_it(tmp_path):
    fifo = tmp_path / "k.o"
    os.mkfifo(fifo)
    proc = subprocess.run([SDTGEN, "scan", str(fifo)], capture_output=True, text=True, timeout=60)
    one_error_line(proc, "not a regular file")


def test_a_link_to_dev_zero_is_replaced_without_reading_it(obj, tmp_path):
    link = tmp_path / "s.c"
    link.symlink_to("/dev/zero")
    proc = subprocess.run([SDTGEN, "gen", str(obj), "--stubs", str(link), "--table", str(tmp_path / "t.S")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISREG(os.lstat(link).st_mode) and b"SDT_STUB" in link.read_bytes()
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)


def test_a_setuid_link_target_lends_the_stubs_none_of_its_bits(obj, tmp_path):
    target = tmp_path / "tool"
    target.write_bytes(b"#!/bin/sh\n")
    os.chmod(target, 0o4755)
    (tmp_path / "s.c").symlink_to(target)
    sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S", check=True)
    mode = os.lstat(tmp_path / "s.c").st_mode
    assert stat.S_ISREG(mode) and not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IXUSR)
    assert os.stat(target).st_mode & 0o7777 == 0o4755 and target.read_bytes() == b"#!/bin/sh\n"


# -- interrupted: all or nothing ------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_object(kernel, tmp_path_factory):
    """The fixture's partial object with 24 MB of unloaded padding (objcopy), so writing takes a while."""
    out = tmp_path_factory.mktemp("big")
    pad = out / "pad.bin"
    pad.write_bytes(os.urandom(24 << 20))
    fresh = out / "fresh.o"  # a partial link not yet through gen: it has no anchors
    script = sdtgen("linker-script", "partial", "--path", check=True).stdout.strip()
    sources = ("main", "vfs", "sched", "mem", "proc", "lib")
    run(["ld", "-r", "-T", script, "-o", str(fresh), *(str(kernel.dir / f"{n}.o") for n in sources)])
    big = out / "big.o"
    run(["objcopy", "--add-section", f".comment.pad={pad}", str(fresh), str(big)])
    assert not anchored(big)
    return big


def anchored(path) -> bool:
    """Whether readelf sees sdtgen's site anchors in the object."""
    return "__sdt_site_" in run(["readelf", "-sW", str(path)]).stdout


def wait_until_open(proc: subprocess.Popen, path) -> None:
    """Until the process has the file open: sdtgen is running (past the interpreter's start-up)."""
    fds = f"/proc/{proc.pid}/fd"
    while proc.poll() is None:
        with contextlib.suppress(OSError):
            if any(os.readlink(os.path.join(fds, fd)) == str(path) for fd in os.listdir(fds)):
                return
        time.sleep(0.001)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_gen_changes_all_outputs_or_none(big_object, tmp_path, sig):
    outcomes = set()
    for step in range(80):  # later and later, until gen finishes before the signal
        work = tmp_path / f"run{step}"
        work.mkdir()
        obj, stubs, table = work / "k.o", work / "s.c", work / "t.S"
        shutil.copy(big_object, obj)
        stubs.write_bytes(OLD_STUBS)
        table.write_bytes(OLD_TABLE)
        proc = subprocess.Popen([SDTGEN, "gen", str(obj), "--stubs", str(stubs), "--table", str(table)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_until_open(proc, obj)
        time.sleep(0.012 * step)  # through the scan, into the writes and past them
        finished = proc.poll() is not None
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        errors = [ln for ln in err.splitlines() if b": warning: " not in ln]  # the fixture's undefined probe
        assert b"Traceback" not in err and len(errors) <= 1, err
        new = (stubs.read_bytes() != OLD_STUBS, table.read_bytes() != OLD_TABLE, anchored(obj))
        assert new in ((False, False, False), (True, True, True)), (step, new, err)
        if not any(new):
            assert obj.read_bytes() == big_object.read_bytes()
        assert sorted(p.name for p in work.iterdir()) == ["k.o", "s.c", "t.S"]  # no temporary file left
        shutil.rmtree(work)
        outcomes.add(new[0])
        if finished:
            break
    assert outcomes == {False, True}  # the signal landed both before and after the writes


@pytest.mark.parametrize("cmd", ["scan", "gen"])
def test_an_input_cut_short_while_it_is_read_gives_at_most_one_line(big_object, tmp_path, cmd):
    """A mapped file that shrinks kills a reader with SIGBUS; sdtgen reads instead, so it never dies of it."""
    for step in range(8):
        obj = tmp_path / f"k{step}.o"
        shutil.copy(big_object, obj)
        argv = [SDTGEN, cmd, str(obj)]
        if cmd == "gen":
            argv += ["--stubs", str(tmp_path / f"s{step}.c"), "--table", str(tmp_path / f"t{step}.S")]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_until_open(proc, obj)
        time.sleep(0.005 * step)
        os.truncate(obj, 4096)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 2), (step, proc.returncode, err)  # not -SIGBUS
        assert b"Traceback" not in err and len(err.splitlines()) <= 1, err
        if proc.returncode == 2:
            assert b": error: " in err
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_rename_that_fails_midway_puts_back_the_outputs_already_replaced(kernel, tmp_path, monkeypatch):
    from sdtgen.codegen import gen_files

    obj = tmp_path / "k.o"
    shutil.copy(kernel.partial, obj)
    stubs, table = tmp_path / "s.c", tmp_path / "t.S"
    stubs.write_bytes(OLD_STUBS)  # the table does not exist yet
    real, calls = os.replace, []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(OSError):
        gen_files(obj, stubs, table)
    monkeypatch.setattr(os, "replace", real)
    assert len(calls) >= 2 and str(calls[0]) == str(stubs)  # the stubs were replaced, then put back
    assert stubs.read_bytes() == OLD_STUBS and not table.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.o", "s.c"]  # no temporary file, no second name


def test_an_input_too_big_for_memory_is_one_line(tmp_path):
    """A 4 GiB sparse file under a 1 GiB address-space limit: refused in one line, not a MemoryError."""
    import resource

    big = tmp_path / "big.o"
    with open(big, "wb") as f:
        f.truncate(4 << 30)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run([SDTGEN, "scan", str(big)], capture_output=True, text=True, timeout=120, preexec_fn=limit)
    one_error_line(proc, "more than this machine can hold in memory")


PROBED = """#include <sdt.h>
SDT_PROBE_DEFINE1(t, m, f, n, "int");
int f(int x) { SDT_PROBE1(t, m, f, n, x); return x + 1; }
"""


def test_gen_on_an_ordinary_object_without_probe_calls_leaves_it_as_it_was(tmp_path):
    plain = compile_c(tmp_path, "plain", "int g(int x) { return x * 2; }\n")
    before = plain.read_bytes()
    proc = sdtgen("gen", plain, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S")
    assert proc.returncode == 0 and proc.stderr == ""
    assert plain.read_bytes() == before


def test_gen_on_an_input_of_the_partial_link_is_named_with_the_fix_that_works(tmp_path):
    """gen anchors the object it is given; when that was an input of ld -r, gen on the partial link
    must say so (rerunning ld -r alone brings the same anchors back)."""
    probed = compile_c(tmp_path, "probed", PROBED)
    plain = compile_c(tmp_path, "plain", "int g(int x) { return f(x) * 2; }\nint f(int);\n" + PROBED.replace(
        "f(int x)", "h(int x)").replace("SDT_PROBE_DEFINE1(t, m, f, n, \"int\");", ""))
    assert sdtgen("gen", probed, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S").returncode == 0
    kernel = partial_link(tmp_path, "kernel", probed, plain)
    before = kernel.read_bytes()
    proc = sdtgen("gen", kernel, "--stubs", tmp_path / "k.c", "--table", tmp_path / "k.S")
    line = one_error_line(proc)
    f = next(s for s in readelf.symbols(kernel).values() if s.name == "f")
    (call,) = [off - 1 for _, off, _, _ in readelf_probe_relocs(kernel) if f.value < off < f.value + f.size]
    assert line == (f"{kernel}: error: already carries 1 sdtgen site anchors (the first at .text:f+"
                    f"{call - f.value:#x}) but has 2 sites: an object linked into it went through `sdtgen gen`, "
                    "which adds anchors to the object it is given; rebuild the objects `sdtgen gen` was run on, "
                    "rerun the partial link (ld -r), and run gen only on its output")
    untouched(tmp_path, kernel, before, "k.c", "k.S")


def test_ctf_metadata_is_written_with_the_other_outputs(obj, tmp_path):
    """`--ctf-metadata` is one more output of the same all-or-nothing write: the TSDL of every probe of the
    object, with the clock asked for (babeltrace2 reads it with the process's streams: tests/runtime)."""
    meta = tmp_path / "metadata"
    proc = sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S",
                  "--ctf-metadata", meta, "--clock-hz", "19200000", "--clock-name", "cntvct")
    assert proc.returncode == 0, proc.stderr
    text = meta.read_text()
    assert text.startswith("/* CTF 1.8 */") and "\tname = cntvct;" in text and "\tfreq = 19200000;" in text
    assert 'name = "hk:vfs:lookup:entry";' in text


@pytest.mark.parametrize("argv, what", [
    (["--clock-hz", "0"], "is not a clock rate"),
    (["--clock-hz", str(1 << 64)], "is not a clock rate"),
    (["--clock-name", "two words"], "is not a C identifier"),
])
def test_a_bad_clock_writes_nothing(obj, tmp_path, argv, what):
    before = obj.read_bytes()
    proc = sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S",
                  "--ctf-metadata", tmp_path / "metadata", *argv)
    one_error_line(proc, what)
    untouched(tmp_path, obj, before, "s.c", "t.S", "metadata")


def test_a_clock_without_metadata_is_refused(obj, tmp_path):
    """--clock-hz alone would be silently ignored: nothing writes the metadata it describes."""
    before = obj.read_bytes()
    one_error_line(sdtgen("gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S", "--clock-hz", "100"),
                   "without --ctf-metadata")
    untouched(tmp_path, obj, before, "s.c", "t.S")
