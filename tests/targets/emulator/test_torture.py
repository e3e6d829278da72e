"""`sdtgen torture`: the image's own runtime arms and disarms probes from a control CPU while other CPUs run
the function; the safe protocol never tears, the naive one (the runtime built with -DSDT_NAIVE_PROTOCOL) does,
and a seeded run replays exactly. `--exhaustive` checks every interleaving of one store with another CPU."""

from __future__ import annotations

import io
import json
import os
import re

import pytest
from helpers import ARCHES, OTHER_ARCHES, build_c_kernel, on_terminal, sdtgen
from native_oracle import Call

from sdtgen.layout import VALUES
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session, torture
from sdtgen.targets.base import Summary
from sdtgen.targets.emulator.torture import Torture

KEYS = {"protocol", "cpus", "toggles", "asked", "calls", "firings", "faults", "torn", "wrong", "leaked", "windows",
        "transient", "timed_out", "idle", "checked", "passed"}
NAIVE = {"SDT_RUNTIME_CFLAGS": "-DSDT_NAIVE_PROTOCOL"}


def run_torture(image, *options: str, run: str = "sched_run"):
    """A replayable run: the seeded interleaving is the same on a busy machine, given the time to finish."""
    if "--timeout" not in options:
        options = (*options, "--timeout", "600")
    r = sdtgen("torture", str(image), "--run", run, "--arg", "20", "--json", *options)
    assert r.stderr == ""
    return r.returncode, json.loads(r.stdout)


# The random schedule's runs at length (300 and 150 toggles, 100 on the other architectures) with
# SDTGEN_TORTURE_FULL=1 (`make torture`); the exhaustive tests below try every landing of every store.
FULL = os.environ.get("SDTGEN_TORTURE_FULL") == "1"


@pytest.mark.parametrize(("cpus", "toggles"), [(2, 300), (4, 150)] if FULL else [(2, 120), (4, 60)])
def test_the_safe_protocol_never_tears_nor_faults_on_x86_64(kernel, cpus, toggles):
    s = torture("emulator", str(kernel.image), "sched_run", [20], cpus=cpus, toggles=toggles, seed=cpus, timeout=300)
    assert (s.faults, s.torn, s.timed_out, s.done) == (0, 0, False, toggles)
    assert s.passed and s.protocol == "safe"
    # The test exercised what it claims: CPUs ran into the transient breakpoint, armed sites fired.
    assert s.transient > 0 and s.firings > 0
    assert s.idle == 0 and s.calls >= cpus  # every calling CPU finished calls
    # Every disable disarmed: no CPU ran an armed site from the disable's return to the next enable.
    assert (s.leaked, s.windows) == (0, toggles // 2)


def test_the_naive_protocol_tears_and_the_same_seed_gives_the_same_summary(arch_kernel):
    image = arch_kernel("x86_64", **NAIVE).image
    code, summary = run_torture(image, "--cpus", "3", "--toggles", "60", "--seed", "7")
    assert code == 1
    assert set(summary) == KEYS and summary["protocol"] == "naive"
    assert summary["torn"] > 0 and summary["faults"] > 0
    again = run_torture(image, "--cpus", "3", "--toggles", "60", "--seed", "7")
    assert again == (code, summary)  # firings included: a seeded run replays exactly


def test_the_safe_protocol_passes_with_exit_0_and_replays(kernel):
    first = run_torture(kernel.image, "--cpus", "2", "--toggles", "50", "--seed", "9")
    assert first[0] == 0
    assert first[1]["protocol"] == "safe" and first[1]["cpus"] == 2 and first[1]["toggles"] == 50
    assert first[1]["faults"] == first[1]["torn"] == 0 and first[1]["calls"] > 0
    assert run_torture(kernel.image, "--cpus", "2", "--toggles", "50", "--seed", "9") == first


@pytest.mark.parametrize("failure", [{"torn": 1}, {"faults": 1}, {"wrong": 1}, {"timed_out": True},
                                     {"firings": 0}])
def test_a_single_torn_execution_or_fault_fails_the_verdict(failure):
    """The verdict, `sdtgen torture`'s exit status on every target: one torn execution fails it alone (no fault
    beside it), as does one fault, one wrong result, a timeout, or a run in which no site fired."""
    good = Summary("safe", 2, 10, done=10, calls=100, firings=50)
    assert good.passed and good.text().startswith("ok:") and good.as_dict()["passed"]
    bad = Summary("safe", 2, 10, done=10, calls=100, **{"firings": 50, **failure})
    assert not bad.passed and bad.text().startswith("FAILED:") and not bad.as_dict()["passed"]


def test_with_a_keeping_session_its_count_shows_the_sites_fired():
    """Under --keep, arming a kept site only sets the torture's session's bit, so its armed windows may record
    nothing on a busy machine: the keeping session's whole count then shows the sites fired. Nothing fired at all
    (the keeping session counted nothing either) still fails."""
    kept = {"keep": "p:m:f:n", "kept": 60, "kept_calls": 12, "kept_each": 5, "windows": 10}
    assert Summary("safe", 2, 10, done=10, calls=10, firings=0, **kept).passed
    none = Summary("safe", 2, 10, done=10, calls=10, firings=0, **{**kept, "kept": 0, "kept_each": 0})
    assert not none.passed and "no site fired" in none.text()


def test_a_torture_that_watched_no_disarmed_window_says_the_disable_was_not_checked():
    """A kernel whose control core cannot watch its callers (no sdt_control_ops.area) reports no window: the
    summary says that a disable disarms was not checked, instead of saying nothing of it."""
    unwatched = Summary("safe", 2, 10, done=10, calls=100, firings=50)
    assert unwatched.text().endswith(", no disarmed window watched (that a disable disarms was not checked)")
    watched = Summary("safe", 2, 10, done=10, calls=100, firings=50, windows=10)
    assert watched.text().endswith(", 0 of 10 disarmed windows fired")


def test_wrong_values_count_as_wrong(kernel, native):
    """The reference a torture call must return is the native value: a CPU returning anything else is wrong."""
    want = [e["return"] for e in native([Call("sched_run", (20,))]) if "return" in e]
    session = open_session("emulator", str(kernel.image), Reporter(as_json=True, out=io.StringIO()), cpus=3,
                           arm="branch", schedule="seeded")
    try:
        t = Torture(session.target, session.image.symbols["sched_run"].value, [20], (1 << 64) - 1, toggles=0,
                    timeout=20, spec="hk:sched:run:")
        assert [t.reference()] == want
        t.reference = lambda: want[0] + 1  # a wrong expectation stands for a wrong result
        t.prepare("sched_run")
        s = t.run()
        assert s.wrong == s.calls == 2 and s.faults == 0 and not s.passed
    finally:
        session.close()


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_other_architectures_run_the_torture_test(arch_kernel, arch):
    image = arch_kernel(arch).image
    s = torture("emulator", str(image), "sched_run", [20], cpus=2, toggles=100 if FULL else 40, seed=2, timeout=300)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0 and s.passed
    if arch == "aarch64":
        assert s.transient == 0  # every write is one aligned store: no breakpoint is ever transient
    naive = torture("emulator", str(arch_kernel(arch, **NAIVE).image), "sched_run", [20], cpus=2,
                    toggles=100 if FULL else 30, seed=2, timeout=300)
    assert naive.protocol == "naive" and naive.torn > 0


def test_a_function_without_probes_is_one_line(kernel):
    r = sdtgen("torture", str(kernel.image), "--run", "kstrlen", "--arg", "0")
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1 and "no probe site" in r.stderr


def test_a_return_type_is_read_as_given(kernel):
    """--run SYMBOL:TYPE as boot takes it: vfs_lookup_id returns an int (its upper half is not compared)."""
    code, summary = run_torture(kernel.image, "--cpus", "2", "--toggles", "20", run="proc_exec:int")
    assert code == 0 and summary["faults"] == 0 and summary["firings"] > 0


NEVER = r"""
#include <sdt.h>
SDT_PROBE_DEFINE1(nv, , , never, "long");
long never(long x)
{
	if (x == 12345)
		SDT_PROBE1(nv, , , never, x);
	return x;
}
"""


def test_a_run_whose_sites_never_fire_is_not_a_pass(tmp_path):
    """never(1) does not reach its site however often it is armed: with no firing the run is FAILED and says
    why."""
    image = build_c_kernel(tmp_path, "x86_64", NEVER, "nv")
    r = sdtgen("torture", str(image), "--run", "never", "--arg", "1", "--toggles", "20")
    assert r.returncode == 1
    assert "no site fired" in r.stdout


def test_a_terminal_sees_the_toggles_go_by_and_a_pipe_sees_nothing(kernel):
    """Long work shows progress on a terminal and stays quiet otherwise: on a terminal, standard error shows the
    toggles made so far on one line rewritten in place, erased at the end; piped, it stays empty (run_torture)."""
    r, seen = on_terminal("torture", kernel.image, "--run", "sched_run", "--arg", "20", "--cpus", "2",
                          "--toggles", "40", "--timeout", "600", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["toggles"] == 40
    shown = [int(n) for n in re.findall(r"torture: toggle (\d+) of 40 on 2 CPU\(s\), \d+ s of at most 10 min 00 s",
                                        seen)]
    assert shown and shown == sorted(shown) and shown[-1] <= 40
    assert "\n" not in seen and seen.endswith("\r\x1b[K")  # one line, rewritten, then erased
    assert run_torture(kernel.image, "--cpus", "2", "--toggles", "4")[0] == 0  # piped: stderr "" (run_torture)


def test_an_arg_belongs_to_the_run_before_it_as_in_a_session(kernel):
    """torture's --arg as boot's: each after the --run it belongs to, in order; one before any --run, or a second
    --run, is one line and exit 2 before anything boots."""
    early = sdtgen("torture", str(kernel.image), "--arg", "20", "--run", "sched_run", "--toggles", "2")
    assert early.returncode == 2 and early.stdout == "" and len(early.stderr.splitlines()) == 1
    assert "--arg must follow a --run" in early.stderr
    two = sdtgen("torture", str(kernel.image), "--run", "sched_run", "--arg", "20", "--run", "kmain", "--toggles", "2")
    assert two.returncode == 2 and "a torture calls one function" in two.stderr and len(two.stderr.splitlines()) == 1
    code, summary = run_torture(kernel.image, "--cpus", "1", "--toggles", "2")  # --run sched_run --arg 20
    assert code == 0 and summary["toggles"] == 2 and summary["calls"] > 0


def test_a_timeout_says_how_many_toggles_were_made(kernel):
    r = sdtgen("torture", str(kernel.image), "--run", "sched_run", "--arg", "20", "--toggles", "100000",
               "--timeout", "1", "--json")
    summary = json.loads(r.stdout)
    assert r.returncode == 1 and summary["timed_out"] and summary["faults"] == 0
    assert 0 < summary["toggles"] < summary["asked"] == 100000
    text = sdtgen("torture", str(kernel.image), "--run", "sched_run", "--arg", "20", "--toggles", "100000",
                  "--timeout", "1").stdout
    assert "timed out after" in text and "of 100000 toggles" in text


def test_is_enabled_sites_toggle_under_the_protocol_too(freebsd_kernel):
    """hot_loop asks SDT_PROBE_ENABLED() each iteration: its check is rewritten between result 0 and 1."""
    image = str(freebsd_kernel("x86_64").image)
    s = torture("emulator", image, "hot_loop", [20], cpus=2, toggles=100 if FULL else 40, seed=3, timeout=300)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0 and s.transient > 0


def test_a_function_that_faults_by_itself_is_one_line(kernel):
    r = sdtgen("torture", str(kernel.image), "--run", "vfs_lookup", "--arg", "0")
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1 and "faults on one CPU with nothing armed" in r.stderr


@pytest.mark.parametrize("toggles", ["0", "-3"])
def test_fewer_than_one_toggle_is_a_usage_error(kernel, toggles):
    """Refused before anything boots, as the arguments' fault (not a torture that fails for lack of firings)."""
    r = sdtgen("torture", str(kernel.image), "--run", "sched_run", "--arg", "20", "--toggles", toggles)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"sdtgen: error: --toggles {toggles} is not a number of toggles"), line


GOT_LOOP = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(gt);
SDT_PROBE_DEFINE1(gt, got, loop, tick, "long");
long spin(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++) {
		SDT_PROBE1(gt, got, loop, tick, i);
		s += i;
	}
	return s;
}
"""


@pytest.fixture(scope="module")
def got_image(tmp_path_factory):
    """gcc -fPIC -fno-plt calls through the GOT; GNU ld relaxes it to a 6-byte `addr32 call`."""
    from helpers import compile_c, final_link, partial_link, run

    tmp = tmp_path_factory.mktemp("got")
    obj = compile_c(tmp, "got", GOT_LOOP, "-mcmodel=small", "-fPIC", "-fno-plt")
    image = final_link(tmp, partial_link(tmp, "kernel", obj))
    assert "addr32 call" in run(["objdump", "-d", str(image)]).stdout  # the linker-relaxed 6-byte form
    return image


def test_six_byte_x86_sites_are_one_instruction_in_both_states_so_the_safe_protocol_holds(got_image):
    """Armed, the 6-byte site is a `cs call`, so no CPU is ever between two instructions of it."""
    s = torture("emulator", str(got_image), "spin", [20], cpus=2, toggles=100, seed=4, timeout=300)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0 and s.transient > 0


def test_eight_byte_riscv_sites_change_one_word_so_the_safe_protocol_holds(arch_kernel):
    """Built without relaxation every RISC-V site is auipc+jalr, 8 bytes; armed, only its first word changes."""
    image = arch_kernel("riscv64", RELAX="0").image
    session = open_session("emulator", str(image), Reporter(out=io.StringIO()), arm="branch")
    try:
        nops = {x.addr: session.target.machine.read(x.addr + 4, 4) for x in session.target.runtime.sites}
        session.enable(":::")
        assert {x.size for x in session.target.runtime.sites} == {8}
        for x in session.target.runtime.sites:  # a CPU paused after the first word runs a NOP either way
            assert session.target.machine.read(x.addr + 4, 4) == nops[x.addr] == bytes.fromhex("13000000"), hex(x.addr)
    finally:
        session.close()
    s = torture("emulator", str(image), "sched_run", [20], cpus=2, toggles=100, seed=5, timeout=300)
    assert (s.faults, s.torn) == (0, 0) and s.firings > 0


# -- exhaustive: every site form of every architecture -----------------------------------------------
def forms(image: str, symbol: str) -> set[tuple[str, int]]:
    """(form, length) of the sites in ``symbol``, per the image's table."""
    session = open_session("emulator", image, Reporter(out=io.StringIO()))
    try:
        sym = session.image.symbols[symbol]
        return {(s.form, s.size) for s in session.target.runtime.sites if sym.value <= s.addr < sym.value + sym.size}
    finally:
        session.close()


@pytest.mark.parametrize("arch", ARCHES)
def test_exhaustive_every_store_every_boundary_of_call_and_tail_sites(arch_kernel, arch):
    image = str(arch_kernel(arch).image)
    for symbol in ("sched_run", "proc_exit"):
        s = torture("emulator", image, symbol, [2], cpus=1, toggles=0, seed=0, timeout=300, exhaustive=True)
        assert s.passed and s.checked > 0 and (s.torn, s.faults) == (0, 0), (symbol, s)
    assert {f for f, _ in forms(image, "sched_run")} == {"call"}
    assert {f for f, _ in forms(image, "proc_exit")} == {"tail"}
    naive = torture("emulator", str(arch_kernel(arch, **NAIVE).image), "sched_run", [2], cpus=1, toggles=0, seed=0,
                    timeout=300, exhaustive=True)
    assert naive.torn > 0 and not naive.passed  # the same check sees bytes in place tear


@pytest.mark.parametrize("arch", ARCHES)
def test_exhaustive_is_enabled_sites(freebsd_kernel, arch):
    image = str(freebsd_kernel(arch).image)
    assert "isen" in {f for f, _ in forms(image, "hot_loop")}
    s = torture("emulator", image, "hot_loop", [2], cpus=1, toggles=0, seed=0, timeout=300, exhaustive=True)
    assert s.passed and s.checked > 0


def test_exhaustive_six_byte_x86_sites(got_image):
    assert forms(str(got_image), "spin") == {("call", 6)}
    s = torture("emulator", str(got_image), "spin", [2], cpus=1, toggles=0, seed=0, timeout=300, exhaustive=True)
    assert s.passed and s.checked > 0 and s.transient > 0


def test_exhaustive_eight_byte_and_misaligned_riscv_sites(arch_kernel):
    relaxed, unrelaxed = str(arch_kernel("riscv64").image), str(arch_kernel("riscv64", RELAX="0").image)
    assert {n for _, n in forms(unrelaxed, "sched_run")} == {8}
    for image in (relaxed, unrelaxed):
        s = torture("emulator", image, "sched_run", [2], cpus=1, toggles=0, seed=0, timeout=300, exhaustive=True)
        assert s.passed and s.checked > 0


# A tail site two bytes into a word: `j` at an address 2 mod 4 (its instruction straddles two words).
ODD_SOURCE = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(rv);
SDT_PROBE_DEFINE(rv, odd, half, tail);
__asm__(".text\n.globl odd\n.type odd, @function\n.balign 4\nodd:\n\tc.nop\n"
        "\tj __dtrace_sdt_rv_odd_half_tail\n.size odd, .-odd\n");
"""


def test_exhaustive_a_riscv_site_straddling_two_words_is_written_with_its_own_halfwords(tmp_path):
    """No aligned word lies inside it: the protocol's c.ebreak and halfword stores, each inside the site."""
    from helpers import build_c_kernel

    image = str(build_c_kernel(tmp_path, "riscv64", ODD_SOURCE))
    session = open_session("emulator", image, Reporter(out=io.StringIO()))
    try:
        (site,) = session.target.runtime.sites
        assert site.addr % 4 == 2 and site.form == "tail"
    finally:
        session.close()
    s = torture("emulator", image, "odd", [], cpus=1, toggles=0, seed=0, timeout=300, exhaustive=True)
    assert s.passed and s.checked > 0 and s.transient > 0


@pytest.mark.parametrize("arch", ["x86_64", "i386"])
def test_exhaustive_conditional_tail_sites(tmp_path, arch):
    """clang -Os's jcc to the stub: every landing of every store, on x86-64 and i386."""
    from test_conditional import build

    _, image = build(tmp_path, arch)
    assert forms(str(image), "check_big") == {("cond", 6)}
    s = torture("emulator", str(image), "check_big", [9], cpus=1, toggles=0, seed=0, timeout=300, exhaustive=True)
    assert s.passed and s.checked > 0 and (s.torn, s.faults) == (0, 0) and s.transient > 0


@pytest.mark.parametrize("arch", ARCHES)
def test_exhaustive_asm_goto_sites(arch_kernel, arch):
    """The NOP and the jump to its out-of-line target (x86: all five bytes change, so the breakpoint protocol;
    RISC-V: one word, or halfwords when the NOP sits 2 mod 4): every landing of every store; the naive
    protocol's bytes in place tear the same sites."""
    image = str(arch_kernel(arch, FORM="goto").image)
    assert {f for f, _ in forms(image, "sched_run")} == {"goto"}
    if arch == "riscv64":  # a NOP at 2 mod 4 (its jal then straddles two words) and one at 0 mod 4
        session = open_session("emulator", image, Reporter(out=io.StringIO()))
        try:
            sym = session.image.symbols["sched_run"]
            sites = session.target.sites()
            assert {s.addr % 4 for s in sites if sym.value <= s.addr < sym.value + sym.size} == {0, 2}
        finally:
            session.close()
    s = torture("emulator", image, "sched_run", [2], cpus=1, toggles=0, seed=0, timeout=300, exhaustive=True)
    assert s.passed and s.checked > 0 and (s.torn, s.faults) == (0, 0)
    naive = torture("emulator", str(arch_kernel(arch, FORM="goto", **NAIVE).image), "sched_run", [2], cpus=1, toggles=0,
                    seed=0, timeout=300, exhaustive=True)
    assert naive.torn > 0 and not naive.passed


# -- the exhaustive checker's own checks: each one alone fails the execution it is there for ------------------
def checker(image: str, symbol: str = "sched_run"):
    """A booted session as `torture --exhaustive` makes one, its checker over ``symbol``, and the first site of it
    with its disabled and branch bytes (the runtime's own, read from memory)."""
    from sdtgen.targets.emulator.exhaustive import Exhaustive

    session = open_session("emulator", image, Reporter(as_json=True, out=io.StringIO(), quiet=True), arm="branch",
                           cpus=2, schedule="seeded")
    ex = Exhaustive(session.target, symbol)
    ex.rt.on_trap_result = ex.trapped.append
    site = ex.sites[0]
    old = ex.control.read(site.addr, site.size)
    session.enable(site.probe.spec)
    new = ex.control.read(site.addr, site.size)
    session.disable(site.probe.spec)
    return session, ex, site, old, new


def test_exhaustive_counts_a_cpu_left_inside_a_site_between_instructions_as_torn(kernel):
    """A legitimate instruction that leaves the CPU inside the site where no instruction of either state starts
    (here: NOPs of one byte, of which only the first is a site's instruction) is torn."""
    session, ex, site, _, new = checker(str(kernel.image))
    try:
        nops = b"\x90" * site.size
        ex.control.write(site.addr, nops)
        ex._run_one(site, site.addr, frozenset({(site.addr, b"\x90")}), {site.addr}, new)
        assert (ex.summary.checked, ex.summary.torn, ex.summary.faults) == (1, 1, 0)
        every = set(range(site.addr, site.addr + site.size))  # where each NOP is an instruction: not torn
        ex._run_one(site, site.addr, frozenset((a, b"\x90") for a in every), every, new)
        assert (ex.summary.checked, ex.summary.torn) == (2, 1)
    finally:
        session.close()


def test_exhaustive_refuses_a_breakpoint_sdt_trap_did_not_resolve(kernel):
    """The protocol's breakpoint is legitimate only when sdt_trap resolves it (fired or emulated): a breakpoint it
    answers any other way (here: as though it were gone, SDT_TRAP_RETRY) is torn."""
    from sdtgen.targets.emulator.legit import legit_instructions

    session, ex, site, old, new = checker(str(kernel.image))
    try:
        legit = legit_instructions(ex.arch, site.addr, old, new)
        ex.control.write(site.addr, ex.arch.breakpoint(1) + old[1:])
        ex._run_one(site, site.addr, legit, {a for a, _ in legit}, new)  # sdt_trap's own answer: emulated
        assert (ex.summary.torn, ex.summary.transient) == (0, 1) and ex.trapped == [VALUES["SDT_TRAP_EMULATED"]]
        ex.rt.on_trap_result = lambda result: ex.trapped.append(VALUES["SDT_TRAP_RETRY"])
        ex._run_one(site, site.addr, legit, {a for a, _ in legit}, new)
        assert (ex.summary.torn, ex.summary.checked) == (1, 2)
    finally:
        session.close()


def test_exhaustive_checks_every_site_ends_as_the_change_makes_it(kernel):
    """After the watched change every site must hold the new instruction whole: a change that left them
    otherwise (here: the watched call arms with the breakpoint, not the branch the change was) is torn."""
    from sdtgen.targets.emulator.runtime import MODES

    session, ex, site, _, _ = checker(str(kernel.image))
    try:
        mine = [s for s in ex.sites if s.probe.spec == site.probe.spec]
        calls, real = [], ex._call

        def call(entry: str, args: list[int]) -> None:
            calls.append(entry)
            real(entry, args if len(calls) < 3 else [args[0], MODES["trap"]])

        ex._call = call
        ex._change(mine, site.probe.spec, "sdt_enable", "branch", ("sdt_disable", None))
        assert calls == ["sdt_enable", "sdt_disable", "sdt_enable"] and ex.summary.torn == len(mine)
    finally:
        session.close()


@pytest.mark.parametrize("arch", ["aarch64", "riscv64"])
def test_exhaustive_runs_the_site_as_it_is_before_a_store_lands(arch_kernel, arch):
    """AArch64 and RISC-V stores reach another CPU's fetch whole or not at all: both are run. Here the site holds
    an instruction of neither state before the store that writes the new one: the CPU that fetches before it
    lands runs it, torn (with only the landed store run, it would pass)."""
    session, ex, site, old, new = checker(str(arch_kernel(arch).image))
    try:
        other = bytes.fromhex("e00300aa" if arch == "aarch64" else "13055000")  # mov x0, x0 / li a0, 5
        ex.control.write(site.addr, other + old[len(other):])
        ex._observe(site, old, new, site.addr, new[:4])
        assert ex.summary.torn >= 1 and ex.control.read(site.addr, site.size) == other + old[len(other):]
    finally:
        session.close()


@pytest.mark.parametrize(("target", "most"), [("emulator", 63), ("process", 63)])
def test_cpus_are_bounded_by_the_targets_own_limit_less_the_cpu_that_controls(kernel, target, most):
    """The emulator's engines and the hosted platform's threads each bound --cpus (one more CPU controls); on QEMU
    the protocol's bound (SDT_MAX_CPUS) is the limit, not the emulator's."""
    r = sdtgen("torture", kernel.image, "--target", target, "--run", "sched_run", "--arg", "1", "--cpus", most + 1)
    assert r.returncode == 2
    assert r.stderr.strip() == f"sdtgen: error: --cpus {most + 1} is not a number of CPUs from 1 to {most} (one more " \
                               "controls)", r.stderr
    from sdtgen.targets import max_cpus

    assert max_cpus("qemu") == VALUES["SDT_MAX_CPUS"] > max_cpus("emulator")


def test_qemu_arguments_are_refused_for_a_target_that_is_not_qemu(kernel):
    r = sdtgen("torture", kernel.image, "--target", "emulator", "--run", "sched_run", "--arg", "1", "--", "-m", "1G")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["sdtgen: error: QEMU arguments (--qemu-arg, or after --) are for --target qemu "
                                     "only; leave them out, or give --target qemu"], r.stderr
