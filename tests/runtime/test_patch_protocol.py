"""The patch protocol replayed store by store: the runtime built for the host with each 64-bit architecture's
encoders (tests/runtime/host_harness.c) boots a table of sites GNU as assembled into host memory, and its own
sdt_enable, sdt_disable and sdt_set_mode change them, every store, sync and opened text span logged, and after
each store and sync how every site behaves for a CPU that runs it then (its bytes, or when they start with the
breakpoint, what sdt_trap makes the CPU do).

What a user reading the trace expects of one call: every site of it behaves as it was until the call commits,
and as it is now from the sync after the commit on; no site is ever anything else (neither state, or a
breakpoint sdt_trap does not resolve). One call is one run whatever the number of sites (96 here, more than the
64 the runtime once wrote per run). Every store lies inside its own site and is one the architecture lets other
CPUs fetch whole, through a text span the kernel opened over the changed sites only; the breakpoint is synced
before the bytes behind it change, and those before it goes; in the end every site is its new instruction and
its new state, and nothing was written that the hooks did not see."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import pytest
from helpers import cross_tool, readelf_symbols, run
from site_forms import X86_CC

from sdtgen.layout import FORMS, SITE, VALUES
from sdtgen.table import SITE_SIZE

OFF, TRAP, BRANCH = VALUES["SDT_SITE_OFF"], VALUES["SDT_SITE_TRAP"], VALUES["SDT_SITE_BRANCH"]
REFUSED = VALUES["SDT_SITE_REFUSED"]
MODES = {"trap": VALUES["SDT_TRAP"], "branch": VALUES["SDT_BRANCH"]}
BP = {"x86_64": b"\xcc", "aarch64": bytes.fromhex("e0ba20d4"), "riscv64": bytes.fromhex("0290")}  # GNU as's
WIDTHS = {"x86_64": (1,), "aarch64": (4,), "riscv64": (2, 4)}
STORE, SYNC, OPEN, CLOSE = 1, 2, 4, 5
NPROBES, NSITES = 24, 96  # probe k is provider hp, module m{k % 3}; site i fires probe i % NPROBES
RECORDER = 0  # every probe's recorder: a host `ret` at the start of the text (a trap calls it)


class HostSite(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint32), ("probe", ctypes.c_uint32), ("form", ctypes.c_uint32),
                ("length", ctypes.c_uint32)]


class HostProbe(ctypes.Structure):
    _fields_ = [("stub", ctypes.c_uint32), ("isenabled", ctypes.c_uint32), ("recorder", ctypes.c_uint32),
                ("names", (ctypes.c_char * 32) * 4)]


class HostEvent(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("kind", ctypes.c_uint32), ("width", ctypes.c_uint32),
                ("bytes", ctypes.c_uint8 * 8)]


@dataclass(frozen=True)
class Site:
    offset: int
    probe: int
    form: str
    length: int


def shapes(arch: str) -> list[tuple[str, str, int]]:
    """(form, GNU as source with {s} the stub and {e} the is-enabled stub, length) of every site shape."""
    if arch == "x86_64":
        return [("call", "call {s}", 5), ("call", "cs\ncall {s}", 6), ("tail", "{{disp32}} jmp {s}", 5),
                ("tail", "cs\n{{disp32}} jmp {s}", 6), ("isen", "call {e}", 5),
                *[("cond", f"{{{{disp32}}}} j{cc} {{s}}", 6) for cc in X86_CC[::3]]]
    if arch == "aarch64":
        return [("call", "bl {s}", 4), ("tail", "b {s}", 4), ("isen", "bl {e}", 4)]
    return [("call", "call {s}", 8), ("tail", "tail {s}", 8), ("call", "jal ra, {s}", 4),
            ("tail", "jal zero, {s}", 4), ("tail", "c.j {s}", 2), ("isen", "call {e}", 8), ("isen", "jal ra, {e}", 4)]


def assemble(arch: str, tmp) -> tuple[bytes, list[Site]]:
    """The text: the recorder (a host `ret`), each probe's stub and is-enabled stub, then NSITES sites of every
    shape at every alignment the architecture allows, assembled by GNU as and linked at 0 by GNU ld."""
    pad = {"x86_64": "nop", "aarch64": "", "riscv64": "c.nop"}[arch]
    head = {"x86_64": "", "aarch64": "", "riscv64": ".option norelax\n.option rvc\n"}[arch]
    lines = [head + ".text", "rec: .byte 0xc3", ".balign 16"]
    lines += [f"s{k}: ret\ne{k}: ret" for k in range(NPROBES)]
    lines.append(".org 0x200")
    sites = []
    forms = shapes(arch)
    for i in range(NSITES):
        form, source, length = forms[i % len(forms)]
        k = i % NPROBES
        if pad and i % 3 == 1:
            lines.append(pad)
        lines.append(f"t{i}:\n" + source.format(s=f"s{k}", e=f"e{k}"))
        sites.append((f"t{i}", k, form, length))
    src, obj, elf, blob = (tmp / f"text.{x}" for x in ("s", "o", "elf", "bin"))
    src.write_text("\n".join(lines) + "\n")
    run([cross_tool(arch, "as"), *(["-march=rv64imac"] if arch == "riscv64" else []), "-o", str(obj), str(src)])
    run([cross_tool(arch, "ld"), "-Ttext=0", "-e", "0", "-o", str(elf), str(obj)])
    run([cross_tool(arch, "objcopy"), "-O", "binary", "-j", ".text", str(elf), str(blob)])
    symbols = {name.strip(): value for value, _, _, _, _, name in readelf_symbols(elf)}
    return blob.read_bytes(), [Site(symbols[label], k, form, length) for label, k, form, length in sites], symbols


class Range(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("size", ctypes.c_uint64)]


GAP = range(40, 43)  # with two text ranges, these sites lie between them: not text


class Replay:
    """One architecture's runtime booted over the sites, each call replayed and checked. ``ranges``: the kernel
    gives no text range, one over all the text, or two with sites between them (refused, and never under a
    span)."""

    def __init__(self, arch: str, lib, tmp, ranges: str) -> None:
        self.arch, self.lib = arch, lib
        blob, self.sites, symbols = assemble(arch, tmp)
        self.text = ctypes.addressof(ctypes.c_uint8.in_dll(lib, "host_text"))
        ctypes.memset(self.text, 0, 1 << 16)
        ctypes.memmove(self.text, blob, len(blob))
        lib.host_encode.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint64,
                                    ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
        lib.host_change.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        sites = (HostSite * NSITES)(*[HostSite(s.offset, s.probe, FORMS[s.form], s.length) for s in self.sites])
        probes = (HostProbe * NPROBES)()
        for k, p in enumerate(probes):
            p.stub, p.isenabled, p.recorder = symbols[f"s{k}"], symbols[f"e{k}"], RECORDER
            for field, name in zip(p.names, ("hp", f"m{k % 3}", f"f{k}", "p"), strict=True):
                field.value = name.encode()
        gap = (self.sites[GAP[0]].offset, self.sites[GAP[-1] + 1].offset)
        self.ranges = {"none": [], "one": [(0, 1 << 16)], "two": [(0, gap[0]), (gap[1], (1 << 16) - gap[1])]}[ranges]
        self.outside = set(GAP) if ranges == "two" else set()
        given = (Range * 2)(*[Range(a, n) for a, n in self.ranges])
        assert lib.host_boot(sites, NSITES, probes, NPROBES, given, len(self.ranges)) == NSITES - len(self.outside)
        self.check_spans(self.log()[0], [i for i in range(NSITES) if i not in self.outside], booting=True)
        self.stubs = {s.offset: symbols[f"{'e' if s.form == 'isen' else 's'}{s.probe}"] for s in self.sites}
        table = ctypes.addressof(ctypes.c_uint8.in_dll(lib, "host_table"))
        entries = [(table + SITE_SIZE * k, ctypes.string_at(table + SITE_SIZE * k, SITE_SIZE)) for k in range(256)]
        # what sdt_init kept of each site (a jcc's condition), by the site's offset in the text
        self.keep = {at + int.from_bytes(e[:4], "little", signed=True) - self.text: e[SITE.offset("keep", 64)]
                     for at, e in entries}
        for i, site in enumerate(self.sites):  # booted: each site its disabled form, for its own form and length
            if i not in self.outside:  # (sdt_init encodes it once for a run of sites of one form and length)
                assert ctypes.string_at(self.text + site.offset, site.length) == self.encode(site, OFF), site

    def log(self) -> tuple[list, list[list[int]]]:
        """The events the last boot or call logged, and after each how every site behaved."""
        n = ctypes.c_uint.in_dll(self.lib, "host_nlog").value
        log = list((HostEvent * n).from_address(ctypes.addressof(HostEvent.in_dll(self.lib, "host_log"))))
        rows = ((ctypes.c_uint8 * 256) * n).from_address(ctypes.addressof(ctypes.c_uint8.in_dll(self.lib,
                                                                                               "host_behaves")))
        return log, [list(rows[k])[:NSITES] for k in range(n)]

    def check_spans(self, log, written: list[int], booting: bool = False) -> None:
        """Every text span opened starts at the first byte of a site written, and lies inside one text range (with
        none given: inside the sites written); the patch protocol's end at the end of a site written, and every
        store it makes lies in the span open then. (sdt_init's stores are plain ones, flushed after the span.)"""
        starts = {self.text + self.sites[i].offset for i in written}
        ends = {self.text + self.sites[i].offset + self.sites[i].length for i in written}
        ranges = [(self.text + a, self.text + a + n) for a, n in self.ranges] or [(min(starts), max(ends))]
        spans = []
        for e in log:
            if e.kind == OPEN:
                lo, hi = e.addr, e.addr + e.width
                assert lo in starts and (booting or hi in ends), (self.arch, hex(lo), e.width)
                assert any(a <= lo and hi <= b for a, b in ranges), (self.arch, hex(lo), e.width)
                spans.append((lo, hi))
            elif e.kind == CLOSE:
                assert spans.pop() == (e.addr, e.addr + e.width)
            elif e.kind == STORE and not booting:
                assert spans and spans[-1][0] <= e.addr and e.addr + e.width <= spans[-1][1]  # through the alias
        assert not spans
        if booting:  # every site is written at boot: one span for each text range (one when none is given)
            assert [e.kind for e in log].count(OPEN) == max(1, len(self.ranges))

    def state(self, s: Site) -> int:
        return self.lib.host_state(s.offset)

    def encode(self, s: Site, state: int) -> bytes:
        out = ctypes.create_string_buffer(16)
        keep = self.keep[s.offset] if s.form == "cond" else 0
        n = self.lib.host_encode(out, FORMS[s.form], s.length, state, self.text + s.offset,
                                 self.text + self.stubs[s.offset], self.text + RECORDER, keep)
        assert n == s.length
        return out.raw[:n]

    def expected(self, what: str, module: str | None, mode: str | None) -> list[int]:
        """Each site's state after the call, as the call means it (module None: every probe)."""
        arm = TRAP if mode == "trap" else BRANCH
        out = []
        for s in self.sites:
            now, hit = self.state(s), module is None or f"m{s.probe % 3}" == module
            if now not in (OFF, TRAP, BRANCH):  # refused: never written
                pass
            elif what == "enable" and hit:
                now = BRANCH if s.form == "isen" else arm
            elif what == "disable" and hit:
                now = OFF
            elif what == "mode" and now in (TRAP, BRANCH) and s.form != "isen":
                now = arm
            out.append(now)
        return out

    def change(self, what: str, module: str | None = None, mode: str | None = None) -> None:
        old = [self.state(s) for s in self.sites]
        new = self.expected(what, module, mode)
        before = ctypes.string_at(self.text, 1 << 16)
        spec = (f"hp:{module}::" if module else ":::").encode()
        r = self.lib.host_change({"enable": 0, "disable": 1, "mode": 2}[what], spec, MODES.get(mode, 0))
        if what == "mode":  # the sites matched: every armed one but is-enabled checks
            matched = [o in (TRAP, BRANCH) and s.form != "isen" for s, o in zip(self.sites, old, strict=True)]
        else:
            matched = [o in (OFF, TRAP, BRANCH) and (module is None or f"m{s.probe % 3}" == module)
                       for s, o in zip(self.sites, old, strict=True)]
        assert r == sum(matched), (what, module, r)
        log, behaves = self.log()
        self.check(log, behaves, old, new, before)
        assert [self.state(s) for s in self.sites] == new

    def check(self, log, behaves, old, new, before: bytes) -> None:
        arch, bp = self.arch, BP[self.arch]
        changed = [i for i in range(NSITES) if old[i] != new[i]]
        assert changed
        where = {self.text + self.sites[i].offset: i for i in changed}
        self.check_spans(log, changed)  # a span over the changed sites only
        mem, history = bytearray(before), {i: [] for i in changed}
        for k, e in enumerate(log):
            if e.kind in (OPEN, CLOSE):
                continue
            if e.kind == STORE:
                (site,) = [a for a in where if a <= e.addr and e.addr + e.width <= a + self.sites[where[a]].length]
                assert e.width in WIDTHS[arch] and e.addr % e.width == 0, (arch, e.width)
                mem[e.addr - self.text:e.addr - self.text + e.width] = bytes(e.bytes[:e.width])
                i = where[site]
                now = bytes(mem[site - self.text:site - self.text + self.sites[i].length])
                new_bytes = self.encode(self.sites[i], new[i])
                history[i].append((k, "new" if now == new_bytes else "bp" if now.startswith(bp) else "other",
                                   (e.addr, e.width)))
            else:
                for h in history.values():
                    h.append((k, "sync", None))
            for i in range(NSITES):  # every site behaves as its old state or its new one, nothing else
                assert behaves[k][i] in (old[i], new[i]), (arch, k, i, self.sites[i], behaves[k][i], old[i], new[i])
        assert bytes(mem) == ctypes.string_at(self.text, 1 << 16)  # every write went through a store the hooks saw
        # One commit: every site behaves as it was before the first one behaves as it is after, and no sync lies
        # between the first site that switched and the last that had not; after the last sync all are new.
        syncs = [k for k, e in enumerate(log) if e.kind == SYNC]
        seen = [k for k, e in enumerate(log) if e.kind in (STORE, SYNC)]
        first_new = min(k for k in seen for i in changed if behaves[k][i] == new[i])
        last_old = max((k for k in seen for i in changed if behaves[k][i] == old[i]), default=-1)
        assert not [k for k in syncs if first_new <= k <= last_old], (arch, first_new, last_old, syncs)
        assert syncs and syncs[-1] == seen[-1] and all(behaves[syncs[-1]][i] == new[i] for i in changed)
        for i in changed:
            switched = [behaves[k][i] == new[i] for k in seen]
            assert switched == sorted(switched), (arch, self.sites[i])  # old, then new, never back
            s, steps = self.sites[i], [what for _, what, _ in history[i]]
            assert bytes(mem[s.offset:s.offset + s.length]) == self.encode(s, new[i])
            stores = [j for j, what in enumerate(steps) if what != "sync"]
            assert stores and steps[stores[-1]] == "new" and "sync" in steps[stores[-1]:], (arch, steps)
            # The last store is the one before it again, the same bytes after a sync (QEMU drops a translation
            # it linked after the first only on a store to its bytes: docs/runtime.md).
            assert len(stores) >= 2 and steps[stores[-2]] == "new" and "sync" in steps[stores[-2]:stores[-1]], \
                (arch, steps)
            assert history[i][stores[-2]][2] == history[i][stores[-1]][2], (arch, history[i])
            stores = stores[:-1]
            if len(stores) > 1:  # the breakpoint protocol: bp, sync, the bytes behind it, sync, the first bytes
                new_bytes = self.encode(s, new[i])
                assert all(steps[j] == "bp" or new_bytes.startswith(bp) for j in stores[:-1]), (arch, steps)
                if not self.encode(s, old[i]).startswith(bp):  # every CPU sees the breakpoint first
                    assert "sync" in steps[stores[0]:stores[1]], (arch, steps)
                assert "sync" in steps[stores[-2]:stores[-1]], (arch, steps)  # and all of it before it goes


CALLS = [  # every change of state, of every shape, each by one call; then calls that mix them
    ("enable", None, "trap"), ("mode", None, "branch"), ("mode", None, "trap"), ("disable", None, None),
    ("enable", None, "branch"), ("disable", None, None),
    ("enable", "m1", "trap"), ("enable", "m2", "branch"), ("enable", None, "branch"), ("mode", None, "trap"),
    ("disable", "m0", None), ("enable", "m0", "branch"), ("disable", None, None),
]


@pytest.mark.parametrize("ranges", ["none", "one", "two"])
@pytest.mark.parametrize("arch", ["x86_64", "aarch64", "riscv64"])
def test_every_site_of_a_call_switches_together_at_its_commit(host_runtime, tmp_path, arch, ranges):
    r = Replay(arch, host_runtime(arch), tmp_path, ranges)
    assert [r.state(s) for s in r.sites] == [REFUSED if i in r.outside else OFF for i in range(NSITES)]
    for what, module, mode in CALLS:
        r.change(what, module, mode)
