"""The control core (sdtgen/runtime/sdt_control.c), built for this machine: whatever bytes arrive on its
channel, every line gets one reply that ends with `ok` or `error CODE` (a code of the one description),
never a fault; its words are the ones sdtgen/layout.py describes, and it runs only what the kernel allows."""

from __future__ import annotations

import ctypes
import json

import pytest
from helpers import need_tool, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_support import HERE, include_dir, runtime_dir

from sdtgen.layout import ERRORS, REPLIES, REPLY_KINDS, VALUES, WORD, WORDS, parse_reply

KNOWN_CODES = set(ERRORS)  # every SDT_ERR_* of the one description
COMMANDS = [text for name, text, _ in WORDS if name[len("SDT_CTL_"):].lower() in (
    "hello", "ring", "enable", "disable", "mode", "run", "read", "drain", "stats", "list", "torture", "exit",
    "tables", "program", "pbytes", "penable", "pdisable", "switch", "take", "shared", "module", "flush", "session",
    "sessions", "snapshot", "clock")]


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    lib = built_core(tmp_path_factory.mktemp("control") / "control.so")
    assert lib.harness_start() == 0
    return lib


@pytest.fixture(scope="module")
def two_cpus(tmp_path_factory):
    """The harness as a kernel of two CPUs (control_harness.c, HARNESS_CPUS): CPU 1 a thread."""
    lib = built_core(tmp_path_factory.mktemp("control2") / "control2.so", "-DHARNESS_CPUS", "-pthread")
    assert lib.harness_start_cpus() == 0
    yield lib
    lib.harness_join()


def built_core(out, *flags: str):
    """The control core and its harness built for this machine at ``out`` and loaded, not started: a copy of its
    own for each path."""
    rt = runtime_dir()
    run([need_tool("gcc", "gcc"), "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", *flags,
         f"-I{include_dir()}", f"-I{rt}", "-o", str(out), str(HERE / "control_harness.c"), str(rt / "sdt_control.c"),
         str(rt / "arch" / "sdt_x86_64.c")])
    lib = ctypes.CDLL(str(out))
    lib.harness_replies.restype = ctypes.c_void_p
    lib.harness_sum.restype = ctypes.c_long
    return lib


def replies(lib) -> list[str]:
    n = ctypes.c_ulong()
    p = lib.harness_replies(ctypes.byref(n))
    return ctypes.string_at(p, n.value).decode("utf-8", "replace").splitlines()


def feed(lib, data: bytes) -> list[str]:
    lib.harness_input(data, len(data))
    return replies(lib)


def ends(line: str) -> str | None:
    """What a reply line is: the last line of a command's reply (ok, error) or one before it."""
    word = line.split(" ", 1)[0]
    return word if word in (WORD["ok"], WORD["error"]) else None


def test_hello_says_what_the_host_reads(core):
    lines = feed(core, b"hello\n")
    assert lines[-1] == "ok hello 0"
    w = lines[0].split()
    assert w[0] == WORD["hello"] and w[1] == "x86_64" and w[2:5] == ["1", "clock", "3e8"] and w[8] == "safe"
    entries = ctypes.c_void_p.in_dll(core, "sdt_runtime_entries")  # where the runtime's entry points are
    assert int(w[9], 16) == ctypes.addressof(entries)


def test_a_call_in_the_kernels_text_runs_and_any_other_address_is_refused(core):
    addr = ctypes.cast(core.harness_sum, ctypes.c_void_p).value
    assert feed(core, f"run 0 {addr:x} 3 1 2 3\n".encode()) == ["return 0 6", "ok run 1"]
    assert feed(core, f"run all {addr:x} 6 1 2 3 4 5 ffffffffffffffff\n".encode()) == ["return 0 e", "ok run 1"]
    (line,) = feed(core, f"run 0 {addr + 64:x} 0\n".encode())
    assert line.startswith(f"error {VALUES['SDT_ERR_ARG']} ")  # not the kernel's text
    (line,) = feed(core, f"run 1 {addr:x} 0\n".encode())
    assert line.startswith(f"error {VALUES['SDT_ERR_CPU']} ")


def test_what_the_kernel_does_not_give_is_refused_as_unsupported(core):
    addr = ctypes.cast(core.harness_sum, ctypes.c_void_p).value
    unsupported, cpu = VALUES["SDT_ERR_UNSUPPORTED"], VALUES["SDT_ERR_CPU"]
    for command, code in (("drain", unsupported), ("read 0 10", unsupported), ("ring 1000 400 0 0", unsupported),
                          ("exit 0", unsupported), (f"torture {addr:x} 0 1 trap :::", cpu)):
        (line,) = feed(core, command.encode() + b"\n")
        assert line.startswith(f"error {code} "), (command, line)


def test_program_memory_is_written_only_where_reserved_and_never_once_a_program_was_given_it(core):
    arg, usage, form = VALUES["SDT_ERR_ARG"], VALUES["SDT_ERR_USAGE"], VALUES["SDT_ERR_PROG_FORM"]
    [ok] = feed(core, b"program 10\n")
    at = int(ok.split()[-1], 16)
    assert at % 8 == 0
    assert feed(core, f"pbytes {at:x} 0102\n".encode()) == ["ok pbytes 2"]
    for command, code in ((f"pbytes {at + 16:x} 00", arg), (f"pbytes {at - 1:x} 00", arg), (f"pbytes {at:x} 0", usage),
                          (f"pbytes {at:x} zz", usage), ("program 0", usage), ("program 10001", usage),
                          (f"penable trap {at + 8:x} 10 :::", arg), (f"penable trap {at:x} 10 :::", form),
                          (f"pbytes {at:x} 00", arg), ("program 1000", arg)):  # sealed; 512 bytes given in all
        (line,) = feed(core, command.encode() + b"\n")
        assert line.startswith(f"error {code} "), (command, line)


def test_program_memory_is_used_again_once_every_program_was_given_and_none_is_attached(core):
    def reserve() -> int:
        [ok] = feed(core, b"program 8\n")
        return int(ok.split()[-1], 16)

    a = reserve()
    assert reserve() == a + 8, "a program reserved and not given to penable yet keeps its memory"
    for at in (a, a + 8):
        (line,) = feed(core, f"penable trap {at:x} 8 :::\n".encode())
        assert line.startswith(f"error {VALUES['SDT_ERR_PROG_FORM']} ")  # no program: no probe holds it
    assert reserve() == a, "every program given, none attached: the memory is used again"


def test_tables_need_every_cpu_s_area_and_switch_and_take_need_tables(core):
    unsupported, state, cpu = VALUES["SDT_ERR_UNSUPPORTED"], VALUES["SDT_ERR_STATE"], VALUES["SDT_ERR_CPU"]
    for command, code in (("tables", unsupported), ("switch", state), ("take 0", state), ("take 1", cpu)):
        (line,) = feed(core, command.encode() + b"\n")
        assert line.startswith(f"error {code} "), (command, line)


def test_a_line_longer_than_the_core_takes_is_one_error_and_the_next_line_is_heard(core):
    lines = feed(core, b"enable trap " + b"x" * (VALUES["SDT_CONTROL_LINE"] + 10) + b"\nhello\n")
    assert lines[0].startswith(f"error {VALUES['SDT_ERR_LONG']} ") and lines[-1] == "ok hello 0"


def test_an_empty_line_is_no_command_and_cr_lf_ends_one(core):
    assert feed(core, b"\r\n\n\r") == []
    assert feed(core, b"stats\r\n") == ["ok stats 1"] or feed(core, b"") == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.binary(max_size=200),
    st.builds(lambda w, rest: w.encode() + b" " + rest, st.sampled_from(COMMANDS), st.binary(max_size=80)),
    st.builds(lambda w, ns: " ".join([w, *ns]).encode(), st.sampled_from(COMMANDS),
              st.lists(st.sampled_from(["0", "1", "all", "trap", "branch", "s:41", "s:4", "ffffffffffffffffff", ":::",
                                        "-1", "zz", "6", "7"]), max_size=9))), max_size=8))
def test_whatever_bytes_arrive_every_line_gets_one_final_reply_and_nothing_faults(core, pieces):
    data = b"".join(p + b"\n" for p in pieces)
    lines = feed(core, data)
    escape = bytes([VALUES["SDT_CONTROL_ESCAPE"]])  # a command starts there: the line is what follows the last
    heard = [p for p in (ln.rsplit(escape, 1)[-1] for ln in data.replace(b"\r", b"\n").split(b"\n")) if p]
    finals = [line for line in lines if ends(line)]
    assert len(finals) == len(heard)
    for line in lines:
        if ends(line) == WORD["error"]:
            assert int(line.split()[1]) in KNOWN_CODES, line
    assert not lines or ends(lines[-1])


def test_flush_closes_each_cpus_open_packet_and_names_none_it_could_not(core):
    """The harness has one CPU and no area: its packet (none) is closed on it, and no CPU is left open."""
    assert feed(core, b"flush\n") == ["ok flush 1"]


def test_clock_answers_the_runtimes_clock_in_its_ok_line_and_takes_no_words(core):
    """The harness gave sdt_init no clock: the runtime's stand-in reads 0 (a kernel's real clock is checked against
    its program's own real time on the process target, tests/session/test_machine_clock.py)."""
    assert feed(core, b"clock\n") == ["ok clock 0"]
    assert feed(core, b"clock now\n") == [f"error {VALUES['SDT_ERR_USAGE']} clock: usage: clock"]


def test_an_unknown_command_is_refused_with_every_word_the_core_takes_and_each_of_them_is_taken(core):
    """The error lists the command table's words; each of them is a command the core runs (its reply is anything but
    unknown), and they are every command word of sdtgen/layout.py."""
    (line,) = feed(core, b"nosuch 1 2\n")
    assert line.startswith(f"error {VALUES['SDT_ERR_UNKNOWN']} nosuch: unknown command ("), line
    words = line[line.index("(") + 1:line.rindex(")")].split(" ")
    assert sorted(words) == sorted(COMMANDS) and len(words) == len(set(words)), words
    for word in words:
        final = [x for x in feed(core, word.encode() + b"\n") if ends(x)]
        assert len(final) == 1 and not final[0].startswith(f"error {VALUES['SDT_ERR_UNKNOWN']} "), (word, final)


def test_every_line_the_core_answers_with_is_one_the_reply_table_shapes(core):
    """What the C core writes (by SDT_REPLY_*) is what the host reads (parse_reply, sdtgen/layout.py's REPLIES): each
    line of a reply is one of its command's shapes, its last one `ok COMMAND COUNT` of that command."""
    addr = ctypes.cast(core.harness_sum, ctypes.c_void_p).value
    seen = set()
    for command, line in (("hello", "hello"), ("run", f"run 0 {addr:x} 3 1 2 3"), ("run", f"run all {addr:x} 0"),
                          ("list", "list"), ("list", "list :::harness*"), ("flush", "flush"),
                          ("enable", "enable trap :::"), ("disable", "disable :::")):
        lines = feed(core, line.encode() + b"\n")
        last = parse_reply("", lines[-1])
        assert last is not None and last[0] == "ok" and last[1]["command"] == WORD[command], (line, lines)
        for said in lines[:-1]:
            parsed = parse_reply(command, said)
            assert parsed is not None, (line, said)
            seen.add(parsed[0])
    assert {"hello", "return", "probe"} <= seen, seen
    hello = parse_reply("hello", feed(core, b"hello\n")[0])[1]
    assert hello["arch"] == "x86_64" and hello["clock_hz"] == 1000 and hello["version"] == VALUES["SDT_CONTROL_VERSION"]
    assert hello["entries"] == ctypes.addressof(ctypes.c_void_p.in_dll(core, "sdt_runtime_entries"))


@pytest.mark.parametrize(("command", "line"), [("run", "return 0"), ("run", "return 0 1 2"), ("run", "return 0 1g"),
                                              ("run", "probe 0 1"), ("read", "bytes"), ("list", "probe 1 2 3"),
                                              ("hello", "hello x86_64 1 clock 3e8 0 0 0 safe 0"), ("", "ok run")])
def test_a_line_the_table_does_not_shape_is_read_as_none(command, line):
    assert parse_reply(command, line) is None


def test_the_reply_table_names_each_command_and_word_once():
    assert len({(command, word) for command, word, _ in REPLIES}) == len(REPLIES)
    assert all(command in ("", *WORD) and word in WORD for command, word, _ in REPLIES)
    kinds = [f.split(":") for _, _, fields in REPLIES for f in fields]
    assert all(len(k) == 2 and k[1] in REPLY_KINDS for k in kinds), kinds
    assert all(f[-1].endswith(":r") for _, _, f in REPLIES if any(x.endswith(":r") for x in f))  # the rest: last


def test_a_call_on_another_cpu_is_answered_once_that_cpu_returned_from_it(two_cpus):
    """CPU 1 takes the call up only once CPU 0 waits for it: the reply must carry what the call returned (the
    native call's value), not what the CPU held before."""
    addr = ctypes.cast(two_cpus.harness_sum, ctypes.c_void_p).value
    for args in ([1, 2, 3], [40, 2, 0x100], [7]):
        value = two_cpus.harness_sum(*args, *[0] * (6 - len(args)))
        words = " ".join(f"{a:x}" for a in args)
        assert feed(two_cpus, f"run 1 {addr:x} {len(args)} {words}\n".encode()) == [f"return 1 {value:x}", "ok run 1"]
    assert feed(two_cpus, f"run all {addr:x} 2 5 6\n".encode()) == ["return 0 b", "return 1 b", "ok run 2"]


def test_once_the_host_reads_the_rings_in_memory_nothing_is_sent_on_the_line(two_cpus):
    """`shared on`: the host copies packets out of the kernel's memory, so no command asks the kernel to drain
    them onto the line (each drain the kernel's hook counts); `shared off` gives the line back its packets."""
    addr = ctypes.cast(two_cpus.harness_sum, ctypes.c_void_p).value
    shared = feed(two_cpus, b"shared on\n")
    assert shared[-1] == "ok shared 2" and [w.split()[:2] for w in shared[:-1]] == [["area", "0"], ["area", "1"]]
    before = two_cpus.harness_drains()
    for command in (f"run 0 {addr:x} 1 1", f"run all {addr:x} 1 1", "flush", "drain"):
        assert ends(feed(two_cpus, command.encode() + b"\n")[-1]) == WORD["ok"], command
    assert two_cpus.harness_drains() == before, "a packet sent on the line while the host reads the rings in memory"
    assert feed(two_cpus, b"shared off\n") == ["ok shared 0"]
    for n, command in enumerate((f"run 0 {addr:x} 1 1", "flush", "drain"), 1):
        feed(two_cpus, command.encode() + b"\n")
        assert two_cpus.harness_drains() == before + n, command


def site_entries(library) -> int:
    """The site table entries readelf sizes in a shared object's set_sdt_sites_set (struct sdt_site: 20 bytes)."""
    out = run([need_tool("readelf", "binutils"), "-SW", str(library)]).stdout
    (size,) = [int(line.split("]", 1)[1].split()[4], 16) for line in out.splitlines() if " set_sdt_sites_set " in line]
    return size // 20



@pytest.mark.parametrize("toggles", [1, 2, 3])
def test_module_torture_leaves_the_module_loaded_whatever_the_number_of_toggles(process, library, tmp_path, toggles):
    """The control core in a Linux process (fixtures/process, its CPUs threads) tortures fixtures/module's shared
    object in mode `module`: each toggle is an unload or a load the process's loader is asked for, and an odd
    number ends on an unload, after which the core loads it again. The spec enabled after it arms every site
    readelf counts in the object, as it did before."""
    (tmp_path / "trace").mkdir()
    proc = run([str(process), "--trace", str(tmp_path / "trace"), "--cpus", "2", "--arm", "module", "--consumer",
                "none", "dlopen", str(library), "enable", "hkm:::", "trap", "torture", "hkm_work,3",
                "hkm:::", str(toggles), "enable", "hkm:::", "trap"], timeout=300)
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    (t,) = [x for x in out if x["event"] == "torture"]
    assert (t["toggles"], t["torn"], t["faults"]) == (toggles, 0, 0)
    # the loader (the process's, which counts what it is asked) unloaded it at each even toggle and loaded it at
    # each odd one, and once more at the end after an odd number
    assert (t["unloads"], t["loads"]) == ((toggles + 1) // 2, (toggles + 1) // 2)
    enabled = [x["sites"] for x in out if x["event"] == "enabled"]
    assert enabled == [site_entries(library)] * 2, "the module is not loaded after the torture"


def test_module_torture_checks_a_window_after_each_unload_and_nothing_fires_in_one(process, library, tmp_path):
    """Mode `module` disarms at each unload (the even toggles): the window until the next load is checked on each
    calling CPU that made its calls meanwhile, and the module's sites record nothing in it. Two hundred toggles,
    one calling CPU: up to a hundred windows, and more than one (a CPU descheduled for a whole window, or not yet
    calling, is not checked in it; a core that took only one toggle for an unload would check at most one per CPU)."""
    (tmp_path / "trace").mkdir()
    proc = run([str(process), "--trace", str(tmp_path / "trace"), "--cpus", "2", "--arm", "module", "--consumer",
                "none", "dlopen", str(library), "enable", "hkm:::", "trap", "torture", "hkm_work,3",
                "hkm:::", "200"], timeout=300)
    (t,) = [x for x in map(json.loads, proc.stdout.splitlines()) if x["event"] == "torture"]
    assert (t["toggles"], t["unloads"], t["loads"], t["torn"], t["faults"]) == (200, 100, 100, 0, 0)
    assert t["leaked"] == 0 and 1 < t["windows"] <= 100, t


def test_hello_counts_each_site_readelf_finds_once_and_a_refused_one_not_as_patched(core):
    """The harness's site table, as readelf dumps it from the built object: every entry zero, its instruction
    the entry itself (data, not the kernel's text), so sdt_init refuses it. hello counts them all refused and
    none patched or folded."""
    readelf = need_tool("readelf", "binutils")
    dump = run([readelf, "-x", "set_sdt_sites_set", core._name]).stdout
    # each line: the address, then up to 16 bytes in four groups (35 columns), then the bytes as text
    data = bytes.fromhex("".join(line.split(None, 1)[1][:35].replace(" ", "") for line in dump.splitlines()
                                 if line.strip().startswith("0x")))
    assert len(data) % 20 == 0 and data and not any(data)
    w = feed(core, b"hello\n")[0].split()
    assert [int(x, 16) for x in w[5:8]] == [0, len(data) // 20, 0]  # patched, refused, folded
