"""`sdtgen cost`: what each disabled probe adds to its function's fall-through path, held against the truth
of running it: the functions called in Unicorn on the booted image (every site as sdt_init left it) and on
the build with probes compiled out, their executed instructions counted, and each one classified by objdump
decoding the bytes that ran (NOPs, calls, registers stored to the stack). Both probe forms, all four
architectures."""

from __future__ import annotations

import io
import json
import re

import pytest
from helpers import ARCHES, ROOT, SDTGEN, cross_tool, run, sdtgen

from sdtgen import arch as arches
from sdtgen.arch.base import Flow

PROBED = r"""
#include <sdt.h>

SDT_PROVIDER_DEFINE(ct);
SDT_PROBE_DEFINE2(ct, cost, loop, item, "int", "unsigned int");
SDT_PROBE_DEFINE1(ct, cost, straight, value, "unsigned int");
SDT_PROBE_DEFINE2(ct, cost, many, args, "long", "long");
SDT_PROBE_DEFINE1(ct, cost, guard, value, "unsigned int");
SDT_PROBE_DEFINE1(ct, cost, tail, done, "int");
SDT_PROBE_DEFINE2(ct, req, handle, done, "long", "unsigned int");

unsigned int expensive(unsigned int x);
long process(unsigned int a);
unsigned int data[4] = { 1, 2, 3, 4 };
int last;

struct req {
	long id;
	unsigned int a, b;
	long c;
};

struct req reqs[2] = { { 7, 1, 2, 3 }, { 8, 4, 5, 6 } };

/* A hot loop whose probe's argument is a call. */
__attribute__((noinline)) long loop(const unsigned int *p, int n)
{
	long sum = 0;

	for (int i = 0; i < n; i++) {
		sum += p[i];
		SDT_PROBE2(ct, cost, loop, item, i, expensive(p[i]));
	}
	return sum;
}

__attribute__((noinline)) unsigned int straight(const unsigned int *p)
{
	unsigned int v = p[0] * 3 + p[1];

	SDT_PROBE1(ct, cost, straight, value, expensive(v));
	return v ^ p[2];
}

/* Arguments already in registers. */
__attribute__((noinline)) long many(long a, long b, long c)
{
	long x = a * b + c;

	SDT_PROBE2(ct, cost, many, args, x, a - c);
	return x + 1;
}

__attribute__((noinline)) unsigned int guarded(unsigned int v)
{
	if (SDT_PROBE_ENABLED(ct, cost, guard, value))
		SDT_PROBE1(ct, cost, guard, value, expensive(v));
	return v + 7;
}

/* The probe last: a tail jump in the call form. */
__attribute__((noinline)) void tail(int x)
{
	last = x;
	SDT_PROBE1(ct, cost, tail, done, x);
}

/* A scan gcc enters by a jump to its loop's test (as the fixture's vfs_lookup): the path follows it. */
SDT_PROBE_DEFINE2(ct, cost, scan, component, "const char *", "int");
const char path[] = "ab/c";

__attribute__((noinline)) int components(const char *s)
{
	int depth = 0, len = 0;

	for (const char *p = s;; p++) {
		if (*p == '/' || *p == '\0') {
			if (len) {
				depth++;
				SDT_PROBE2(ct, cost, scan, component, p, len);
			}
			if (*p == '\0')
				break;
			len = 0;
		} else {
			len++;
		}
	}
	return depth;
}

/* Two probes on one path, each with a call of its own for its argument: each site pays for its own. */
SDT_PROBE_DEFINE1(ct, two, first, value, "unsigned int");
SDT_PROBE_DEFINE1(ct, two, second, value, "long");

__attribute__((noinline)) long two(unsigned int v)
{
	unsigned int h = v * 5;

	SDT_PROBE1(ct, two, first, value, expensive(h));
	SDT_PROBE1(ct, two, second, value, process(v + 1));
	return (long)h + 9;
}

/* A kernel function as most are: it calls another, and its probe's argument is a call of its own. */
__attribute__((noinline)) long handle(const struct req *r)
{
	long v = process(r->a);

	SDT_PROBE2(ct, req, handle, done, r->id, expensive(r->b));
	return v + r->c;
}
"""

OTHER = r"""
__attribute__((noinline)) unsigned int expensive(unsigned int x)
{
	unsigned int h = 2166136261u;

	for (int i = 0; i < 4; i++)
		h = (h ^ ((x >> (8 * i)) & 0xff)) * 16777619u;
	return h;
}

__attribute__((noinline)) long process(unsigned int a)
{
	return (long)a * 3 + 1;
}
"""

# Arguments each function runs with (every conditional branch of its own is made to fall through).
CALLS = {"loop": lambda s: [s["data"], 1], "straight": lambda s: [s["data"]], "many": lambda s: [3, 4, 5],
         "guarded": lambda s: [5], "tail": lambda s: [9], "handle": lambda s: [s["reqs"]],
         "components": lambda s: [s["path"]], "two": lambda s: [5]}
OBJDUMP_MACHINE = {"x86_64": "i386:x86-64", "i386": "i386", "aarch64": "aarch64", "riscv64": "riscv:rv64"}
# objdump's conditional branches, and a NOP of each length that replaces one (what GNU as assembles).
CONDITIONAL = {"x86_64": r"j(?!mp)\w+|loop\w*", "i386": r"j(?!mp)\w+|loop\w*", "aarch64": r"b\.\w+|cbn?z|tbn?z",
               "riscv64": r"b(eq|ne|lt|ge|ltu|geu|eqz|nez|lez|gez|ltz|gtz|gt|le|gtu|leu)|c\.bn?eqz"}
NOPS = {"x86_64": {2: "6690", 6: "660f1f440000"}, "i386": {2: "6690", 6: "660f1f440000"},
        "aarch64": {4: "1f2003d5"}, "riscv64": {2: "0100", 4: "13000000"}}


@pytest.fixture(scope="module")
def cost_kernel(tmp_path_factory):
    """(arch, form) -> the image of PROBED and OTHER built as fixtures/fixture.mk builds a kernel, once each;
    form out: every probe compiled out."""
    src = tmp_path_factory.mktemp("cost-src")
    (src / "probed.c").write_text(PROBED)
    (src / "other.c").write_text(OTHER)
    (src / "Makefile").write_text(f"SRCS := probed.c other.c\nHDRS :=\ninclude {ROOT}/fixtures/fixture.mk\n")
    built = {}

    def build(arch: str, form: str):
        if (arch, form) not in built:
            out = tmp_path_factory.mktemp(f"cost-{arch}-{form}")
            cross_tool(arch, "gcc")
            run(["make", "-s", "-C", str(src), f"O={out}", f"ARCH={arch}", f"FORM={form}", f"SDTGEN={SDTGEN}"])
            built[(arch, form)] = out / "kernel.elf"
        return built[(arch, form)]

    return build


def executed(image, arch: str, booted: bool) -> dict[str, list[tuple[int, str, str]]]:
    """function -> (address, mnemonic, operands) of each instruction it ran itself (not its callees') when called
    with CALLS' arguments along its fall-through path: every conditional branch objdump finds in it replaced by
    a NOP of its length, and the run stopped where it would run an instruction a second time. Classified as
    objdump decodes the bytes as they were (booted: after sdt_init wrote the sites)."""
    from unicorn import UC_HOOK_CODE

    from sdtgen.image import Image
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session
    from sdtgen.targets.emulator.machine import Machine

    if booted:
        s = open_session("emulator", str(image), Reporter(out=io.StringIO()))
        m, symbols, close = s.target.machine, s.image.symbols, s.close
    else:  # nothing to boot: every probe is compiled out
        img = Image(str(image))
        m, symbols = Machine(img.elf, img.arch), img.symbols
        close = lambda: (m.close(), img.close())  # noqa: E731
    out = {}
    try:
        values = {name: sym.value for name, sym in symbols.items()}
        for name, args in CALLS.items():
            f = symbols[name]
            code = m.read(f.value, f.size)
            decoded = objdump_bytes(code, f.value, arch)
            for addr, (mnemonic, _, size) in decoded.items():
                if re.fullmatch(CONDITIONAL[arch], mnemonic):
                    m.write(addr, bytes.fromhex(NOPS[arch][size]))
            pcs: list[int] = []

            def hook(uc, a, n, u, f=f, pcs=pcs):
                if f.value <= a < f.value + f.size:
                    if a in pcs:  # the path ends where it would repeat
                        uc.reg_write(m.model.regs.pc, a)
                        uc.emu_stop()
                        return
                    pcs.append(a)

            h = m.uc.hook_add(UC_HOOK_CODE, hook, begin=f.value, end=f.value + f.size - 1)
            m.uc.ctl_flush_tb()
            try:
                m.call(f.value, args(values))
            except Exception:
                if not pcs or pcs.count(pcs[-1]) != 1:
                    raise
            finally:
                m.uc.hook_del(h)
                m.write(f.value, code)
                m.uc.ctl_flush_tb()
            out[name] = [(pc, *decoded[pc][:2]) for pc in pcs]
    finally:
        close()
    return out


def objdump_bytes(code: bytes, addr: int, arch: str) -> dict[int, tuple[str, str]]:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        text = run([cross_tool(arch, "objdump"), "-D", "-b", "binary", "-m", OBJDUMP_MACHINE[arch],
                    f"--adjust-vma={addr:#x}", f.name]).stdout
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+((?:[0-9a-f]{2,8} )+)\s*(\S+)\s*(.*)$", line)
        if m:
            size = len(m[2].replace(" ", "")) // 2
            out[int(m[1], 16)] = (m[3], m[4].split("#")[0].split("<")[0].strip(), size)
    return out


def nop(arch: str, mnemonic: str, ops: str) -> bool:
    """objdump's NOPs, and 66 90, Intel's 2-byte NOP, which objdump spells xchg %ax,%ax."""
    return mnemonic in ("nop", "nopl", "nopw", "c.nop") or (mnemonic, ops) == ("xchg", "%ax,%ax")


def call(arch: str, mnemonic: str, ops: str) -> bool:
    return mnemonic in {"x86_64": ("call",), "i386": ("call",), "aarch64": ("bl", "blr"),
                        "riscv64": ("jal", "jalr", "c.jalr")}[arch]


def spills(arch: str, mnemonic: str, ops: str) -> int:
    """Registers an instruction stores to the stack, read from objdump's text (AT&T on x86: source first)."""
    if arch in ("x86_64", "i386"):
        if mnemonic.startswith("push"):
            return 1
        return int(mnemonic.startswith("mov") and re.fullmatch(r"%\w+,-?(0x[0-9a-f]+)?\(%[re](sp|bp)(,.*)?\)", ops)
                   is not None)
    if arch == "aarch64":
        m = re.fullmatch(r"st\w*", mnemonic) and re.match(r"(.*?)\[(sp|x29)\b", ops)
        return len([r for r in m[1].split(",") if r.strip() and r.strip() not in ("xzr", "wzr")]) if m else 0
    return int(mnemonic in ("sd", "sw", "sh", "sb", "c.sdsp", "c.swsp") and re.search(r"\((sp|s0)\)$", ops)
               is not None)


def counts(arch: str, ran: list[tuple[int, str, str]]) -> dict[str, int]:
    return {"instructions": len(ran), "nops": sum(nop(arch, m, o) for _, m, o in ran),
            "calls": sum(call(arch, m, o) for _, m, o in ran), "spills": sum(spills(arch, m, o) for _, m, o in ran)}


@pytest.mark.parametrize("form", ["call", "goto"])
@pytest.mark.parametrize("arch", ARCHES)
def test_each_functions_path_and_costs_are_what_the_cpu_runs(cost_kernel, arch, form):
    probed, baseline = cost_kernel(arch, form), cost_kernel(arch, "out")
    report = json.loads(sdtgen("cost", "--json", probed, baseline, check=True).stdout)
    functions = {f["function"]: f for f in report["functions"]}
    assert set(functions) == set(CALLS) and report["missing"] == [] and report["arch"] == arch
    ran, ran_base = executed(probed, arch, True), executed(baseline, arch, False)
    for name in CALLS:
        f, mine, theirs = functions[name], counts(arch, ran[name]), counts(arch, ran_base[name])
        assert f["addresses"] == [a for a, _, _ in ran[name]], name  # the same instructions, in the same order
        assert f["baseline_addresses"] == [a for a, _, _ in ran_base[name]], name
        for what in ("instructions", "nops", "calls", "spills"):
            assert f[what] == mine[what] - theirs[what], (name, what, f, mine, theirs)
            assert sum(s[what] for s in f["sites"]) == f[what], (name, what)  # every difference charged to a site
    totals = report["total"]
    assert totals == {k: sum(f[k] for f in functions.values()) for k in totals}


@pytest.mark.parametrize("arch", ARCHES)
def test_the_call_form_pays_for_its_expensive_argument_and_the_goto_form_does_not(cost_kernel, arch):
    """Why a probe is not zero-cost, site by site: a disabled call site still computes expensive(v) (a call on
    the path); an asm goto's arguments are computed out of line, and its site is one NOP."""
    base = cost_kernel(arch, "out")
    sites = {}
    for form in ("call", "goto"):
        report = json.loads(sdtgen("cost", "--json", cost_kernel(arch, form), base, check=True).stdout)
        sites[form] = {s["probe"]: s for f in report["functions"] for s in f["sites"] if s["form"] != "isen"}
    for probe in ("ct:cost:straight:value", "ct:cost:loop:item", "ct:req:handle:done"):
        assert sites["call"][probe]["calls"] == 1 and sites["goto"][probe]["calls"] == 0, probe
        assert any(t.endswith("expensive") for t in sites["call"][probe]["added"])
        goto = sites["goto"][probe]
        assert goto["form"] == "goto" and not any("expensive" in t for t in goto["added"])
    assert not any(s["calls"] > 0 for s in sites["goto"].values())


def test_human_output_is_a_row_a_function_and_a_line_a_site(cost_kernel):
    proc = sdtgen("cost", cost_kernel("x86_64", "goto"), cost_kernel("x86_64", "out"))
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["FUNCTION", "SITES", "INSNS", "NOPS", "CALLS", "SPILLS", "PATH"]
    assert re.match(r"tail\s+1\s+\+1\s+\+1\s+\+0\s+\+0\s+3 -> 2$", next(ln for ln in lines if ln.startswith("tail")))
    assert "  ct:cost:tail:done (goto at tail+0x" in proc.stdout
    assert "off the fall-through path" in proc.stdout  # guarded()'s probe, behind its is-enabled check
    assert re.match(r"total: 8 functions, 10 sites: \+\d+ instructions", lines[-1])  # PROBED: 8 functions, 10 sites
    verbose = sdtgen("cost", "-v", cost_kernel("x86_64", "goto"), cost_kernel("x86_64", "out")).stdout
    assert "      + nop dword ptr [rax + rax]" in verbose


def test_bad_inputs_are_one_line(cost_kernel, tmp_path, kernel):
    goto, out = cost_kernel("x86_64", "goto"), cost_kernel("x86_64", "out")
    cases = [((out, goto), "has no probe sites, so no probe costs anything there"),
             ((goto, cost_kernel("aarch64", "out")), "is aarch64 but"),
             ((goto, tmp_path / "missing.elf"), "missing.elf"),
             ((kernel.partial, out), "is a relocatable object, not a linked image")]
    for args, what in cases:
        proc = sdtgen("cost", *args)
        assert proc.returncode == 2 and what in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_two_probed_builds_compare_the_forms(cost_kernel):
    """The baseline may be another form: its sites are read disabled too (the call form's NOPs are no calls)."""
    report = json.loads(sdtgen("cost", "--json", cost_kernel("x86_64", "goto"), cost_kernel("x86_64", "call"),
                               check=True).stdout)
    handle = next(f for f in report["functions"] if f["function"] == "handle")
    assert handle["calls"] == -1  # the call form's expensive(r->b), which the goto form does not make


def test_the_riscv_decoder_does_not_take_c_addiw_for_a_call(tmp_path):
    """c.addiw has the encoding RV32 gives c.jal: on RV64 it is arithmetic (GNU as and objdump agree)."""
    from helpers import assemble_text

    a = arches.by_name("riscv64")
    code = assemble_text("riscv64", ["-march=rv64gc"], "stub:\nc.addiw a0, 7\nc.j stub\nc.jr ra\n", tmp_path, "c")
    cs = a.capstone()
    cs.detail = True
    kinds = [a.flow(i)[0] for i in cs.disasm(code, a.kernel_base)]
    assert kinds == [Flow.NEXT, Flow.JUMPS, Flow.RETURNS]


@pytest.mark.parametrize("arch", ARCHES)
def test_two_sites_on_one_path_are_each_charged_their_own_instructions(cost_kernel, arch):
    """`two` runs expensive() for its first probe's argument and process() for its second's: on the path the CPU
    runs (Unicorn, objdump), the call to expensive comes before the first site and the one to process between
    the two; cost charges each site the one call made for it, and every instruction between the sites to the
    second."""
    probed, base = cost_kernel(arch, "call"), cost_kernel(arch, "out")
    report = json.loads(sdtgen("cost", "--json", probed, base, check=True).stdout)
    (f,) = [f for f in report["functions"] if f["function"] == "two"]
    first, second = sorted(f["sites"], key=lambda s: int(s["site"].split("+")[1], 16))
    assert (first["probe"], second["probe"]) == ("ct:two:first:value", "ct:two:second:value")
    assert first["on_path"] and second["on_path"]
    image = run([cross_tool(arch, "nm"), str(probed)]).stdout
    callee = {int(a, 16): n for a, _, n in (ln.split() for ln in image.splitlines() if len(ln.split()) == 3)}
    ran = executed(probed, arch, True)["two"]
    start = next(a for a, _, _ in ran)
    at = {s["probe"]: start + int(s["site"].split("+")[1], 16) for s in (first, second)}
    order = [a for a, _, _ in ran]
    calls = [(a, callee.get(int(re.match(r"(0x)?([0-9a-f]+)", o.split(",")[-1].strip())[2], 16)))
             for a, m, o in ran if call(arch, m, o) and a not in at.values()]
    one, two = order.index(at[first["probe"]]), order.index(at[second["probe"]])
    before_first = [n for a, n in calls if order.index(a) < one]
    between = [n for a, n in calls if one < order.index(a) < two]
    assert before_first == ["expensive"] and between == ["process"], (calls, at)
    assert first["calls"] == 1 and any("expensive" in i for i in first["added"]), first
    assert second["calls"] == 1 and any("process" in i for i in second["added"]), second
