"""Several CPUs on one guest memory: every CPU runs each call, firings are per CPU, the seed decides the rest."""

from __future__ import annotations

import json

import pytest
from booted import Booted
from helpers import build_c_kernel, sdtgen
from native_oracle import Call

SCHED = Call("sched_run", (6,))


@pytest.fixture(params=[("trap", "call"), ("branch", "call"), ("trap", "goto"), ("branch", "goto")],
                ids=lambda p: "-".join(p))
def four(kernel, arch_kernel, request):
    """Four CPUs, each arming mode, each probe form (asm gotos fire from their out-of-line code on every CPU)."""
    arm, form = request.param
    image = kernel.image if form == "call" else arch_kernel("x86_64", FORM="goto").image
    b = Booted(image, cpus=4, seed=3, arm=arm)
    b.events()
    yield b
    b.session.close()


def test_a_pure_function_returns_the_native_value_on_every_cpu(four, native):
    for call in (SCHED, Call("sched_switch", (1, 2, 3, 4, 5, 6)), Call("vfs_lookup_id", (3,))):
        want = [e["return"] for e in native([call]) if "return" in e]
        returns = [e for e in four.run([call]) if e["event"] == "return"]
        assert [e["cpu"] for e in returns] == [0, 1, 2, 3]
        assert [e["value"] for e in returns] == want * 4, call


def test_each_cpus_firings_are_that_cpus_calls_in_order(four, native):
    four.session.enable("hk:sched:run:tick")
    four.events()
    events = four.run([SCHED])
    want = [e["args"] for e in native([SCHED]) if e.get("probe") == "hk:sched:run:tick"]
    assert len(want) == 6
    fired = [e for e in events if e["event"] == "fire"]
    for cpu in range(4):
        assert [e["args"] for e in fired if e["cpu"] == cpu] == want


# Each CPU marks itself, then waits for the next CPU's mark: the call returns on every CPU only when all of
# them ran at once. CPUs run one after another hang on the first, whatever the host's timing.
MEETING = r"""
#include <sdt.h>
#include <sdt_runtime.h>
SDT_PROVIDER_DEFINE(rv);
SDT_PROBE_DEFINE2(rv, meet, , wait, "long", "long");
SDT_PROBE_DEFINE2(rv, meet, , met, "long", "long");

static volatile long mark[64];

long meet(long cpus)
{
	long me = (long)sdt_hooks.cpu_area()->cpu, next = (me + 1) % cpus;
	mark[me] = 1;
	SDT_PROBE2(rv, meet, , wait, me, next);
	while (!mark[next])
		;
	SDT_PROBE2(rv, meet, , met, me, next);
	return me;
}
"""


@pytest.fixture(scope="module")
def meeting(tmp_path_factory):
    return build_c_kernel(tmp_path_factory.mktemp("meet"), "x86_64", MEETING, "meet")


@pytest.mark.parametrize("schedule", ["parallel", "seeded"])
@pytest.mark.parametrize("arm", ["trap", "branch"])
def test_the_cpus_run_at_once_each_waits_for_the_next_one_and_all_return(meeting, schedule, arm):
    b = Booted(meeting, cpus=4, schedule=schedule, arm=arm, timeout=30)
    try:
        b.session.enable("rv:meet::")
        b.events()
        events = b.run([Call("meet", (4,))])
    finally:
        b.session.close()
    assert [(e["cpu"], e["value"]) for e in events if e["event"] == "return"] == [(k, k) for k in range(4)]
    for cpu in range(4):
        assert [(e["probe"], e["args"]) for e in events if e["event"] == "fire" and e["cpu"] == cpu] == [
            ("rv:meet::wait", [cpu, (cpu + 1) % 4]), ("rv:meet::met", [cpu, (cpu + 1) % 4])]


def test_the_same_seed_gives_the_same_interleaving_and_another_seed_another(kernel):
    def interleaving(seed: int) -> list[int]:
        b = Booted(kernel.image, cpus=3, seed=seed, schedule="seeded")
        try:
            b.session.enable("hk:sched:run:tick")
            return [e["cpu"] for e in b.run([SCHED]) if e["event"] == "fire"]
        finally:
            b.session.close()

    first = interleaving(5)
    assert interleaving(5) == first
    assert any(interleaving(seed) != first for seed in (6, 7, 8))


def test_one_cpu_reports_as_the_boot_always_did(kernel):
    out = sdtgen("boot", str(kernel.image), "--enable", "hk:sched:run:tick", "--run", "sched_run", "--arg", "2",
                 "--json", check=True).stdout
    same = sdtgen("boot", str(kernel.image), "--enable", "hk:sched:run:tick", "--run", "sched_run", "--arg", "2",
                  "--json", "--cpus", "1", check=True).stdout
    def events(text: str) -> list[dict]:  # the clock's timestamps differ from run to run
        return [{k: v for k, v in json.loads(line).items() if k != "ts"} for line in text.splitlines()]

    assert events(out) == events(same)
    assert all("cpu" not in e for e in events(out) if e["event"] == "return")


def test_the_cli_reports_one_return_per_cpu(kernel):
    r = sdtgen("boot", str(kernel.image), "--run", "sched_run", "--arg", "3", "--cpus", "2")
    assert r.returncode == 0
    assert r.stdout.splitlines()[1:] == ["cpu0 sched_run(3) = 8", "cpu1 sched_run(3) = 8"]


@pytest.mark.parametrize("cpus", ["0", "65", "-1"])
def test_a_number_of_cpus_out_of_range_is_one_line(kernel, cpus):
    r = sdtgen("boot", str(kernel.image), f"--cpus={cpus}")
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1 and "--cpus" in r.stderr


def test_a_cpu_does_not_see_another_cpus_code_write_until_its_cache_is_flushed(tricks):
    """The model: the translation cache is the instruction cache (docs/emulator.md)."""
    b = Booted(tricks, cpus=2)
    try:
        image, cpus = b.session.image, b.session.target.smp.cpus
        probed, rewrite = image.symbols["probed"].value, image.symbols["rewrite"].value
        assert [m.call(probed, [0]) for m in cpus] == [42, 42]  # both have translated probed()
        cpus[0].call(rewrite, [])  # CPU 0 stores replacement()'s code over probed()
        assert cpus[0].call(probed, [0]) == 1234  # a CPU sees its own store
        assert cpus[1].call(probed, [0]) == 42  # the other runs what it translated
        cpus[1].invalidate(probed, probed + 16)
        assert cpus[1].call(probed, [0]) == 1234
    finally:
        b.session.close()


def test_a_quantum_is_exactly_its_count_of_instructions_even_after_a_plain_call(tricks):
    """Unicorn counts with a hook compiled into translated code: code a plain call translated must not escape it."""
    from unicorn import UC_HOOK_CODE

    b = Booted(tricks, cpus=2)
    try:
        m = b.session.target.smp.cpus[0]
        spin = b.session.image.symbols["spin"].value
        executed = [0]
        m.uc.hook_add(UC_HOOK_CODE, lambda uc, addr, size, user: executed.__setitem__(0, executed[0] + 1))
        m.uc.ctl_flush_tb()
        assert m.call(spin, [1000]) == 1000  # translates spin() without counting
        m.begin_call(spin, [100_000])
        executed[0] = 0
        for quantum in (10, 1, 25):
            executed[0] = 0
            assert not m.step(quantum)
            assert executed[0] == quantum
    finally:
        b.session.close()


def test_a_script_runs_on_every_cpu_too(kernel, tmp_path):
    script = tmp_path / "s.txt"
    script.write_text("enable hk:sched:run:tick\nrun sched_run 2\n")
    r = sdtgen("boot", str(kernel.image), "--cpus", "2", "--seed", "4", "--script", str(script), "--json")
    assert r.returncode == 0
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted((e["cpu"], e["value"]) for e in events if e["event"] == "return") == [(0, 3), (1, 3)]  # 1 + 2
    assert sorted(e["cpu"] for e in events if e["event"] == "fire") == [0, 0, 1, 1]


def test_a_run_past_its_timeout_is_a_fault_on_every_cpu_still_in_it_and_the_boot_goes_on(tricks):
    r = sdtgen("boot", str(tricks), "--cpus", "2", "--timeout", "0.3", "--run", "spin", "--arg", "0",
               "--run", "probed", "--arg", "1")
    assert r.returncode == 1
    faults = r.stderr.splitlines()
    assert len(faults) == 2
    for cpu, line in enumerate(faults):
        assert f": cpu{cpu} fault in spin: did not return within 0.3 s" in line
    assert r.stdout.splitlines()[-2:] == ["cpu0 probed(1) = 42", "cpu1 probed(1) = 42"]


@pytest.mark.parametrize("seed", range(6))
def test_an_action_drains_only_its_own_cpu_so_no_record_is_read_half_written(kernel, native, seed):
    """An action's firing is reported at once; another CPU may then be paused inside its recorder with
    a record half written, which only its own later drain may read. Strings are what the C passed."""
    from test_runtime import native_firings

    call = Call("vfs_lookup_id", (2,))
    want = [(p, a) for p, a in native_firings(native([call]), "hk:vfs::")]
    b = Booted(kernel.image, cpus=2, seed=seed, arm="branch")
    try:
        b.session.enable("hk:vfs::")
        b.session.add_action("hk:lib:ref:acquire", "kstrlen")
        b.events()
        fired = [e for e in b.run([call]) if e["event"] == "fire" and e["probe"].startswith("hk:vfs:")]
    finally:
        b.session.close()
    for cpu in range(2):
        assert [(e["probe"], e["args"]) for e in fired if e["cpu"] == cpu] == want, cpu


def test_a_long_run_on_several_cpus_is_shown_in_time_order_as_it_streams(kernel, native):
    """Many packets' worth of firings: shown while the run goes (as far as every CPU has been read), all of
    them, in timestamp order, each CPU's in its own order."""
    n = 5000  # sched_run(n) ticks n times on each CPU
    proc = sdtgen("boot", kernel.image, "--json", "--cpus", "2", "--arm", "branch", "--buffer-size", "65536",
                  "--enable", "hk:sched:run:tick", "--run", "sched_run", "--arg", str(n))
    assert proc.returncode == 0, proc.stderr
    fires = [json.loads(x) for x in proc.stdout.splitlines() if '"fire"' in x]
    assert [e["ts"] for e in fires] == sorted(e["ts"] for e in fires)
    want = [e["args"] for e in native([Call("sched_run", (n,))]) if "probe" in e]
    for cpu in (0, 1):
        assert [e["args"] for e in fires if e["cpu"] == cpu] == want


def test_past_the_bound_of_waiting_firings_every_one_is_still_shown_in_each_cpus_order(kernel, monkeypatch):
    import io

    from sdtgen.session import session as sessions
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session

    monkeypatch.setattr(sessions, "MAX_PENDING", 100)
    out = io.StringIO()
    s = open_session("emulator", str(kernel.image), Reporter(as_json=True, out=out, err=out), cpus=2, arm="branch",
                     buffer_size=4096)
    try:
        s.enable("hk:sched:run:tick")
        s.run("sched_run", [200])
        s.stats()
    finally:
        s.close()
    events = [json.loads(x) for x in out.getvalue().splitlines()]
    fires = [e for e in events if e["event"] == "fire"]
    assert not [e for e in events if e["event"] == "warning"]
    for cpu in (0, 1):
        ts = [e["ts"] for e in fires if e["cpu"] == cpu]
        assert len(ts) == 200 and ts == sorted(ts)
    assert [e["hits"] for e in events if e["event"] == "stats"] == [{"hk:sched:run:tick": 400}]
