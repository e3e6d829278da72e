"""The patch protocol (sdt_patch.c, built for the host with each 64-bit architecture's encoders) replayed
store by store from its hooks: every store lies inside its own site and is one the architecture lets
other CPUs fetch whole; after every store each site is its old instruction, its new one, or starts with
the breakpoint; the breakpoint is synced before the bytes behind it change, those are synced before it
goes, and a CPU trapping on it meanwhile finds its site; in the end every byte of every new instruction
is there, and nothing was written that the hooks did not see."""

from __future__ import annotations

import ctypes
import itertools

import pytest

from sdtgen.layout import FORMS, SITE, VALUES
from sdtgen.table import SITE_SIZE

OFF, TRAP, BRANCH = VALUES["SDT_SITE_OFF"], VALUES["SDT_SITE_TRAP"], VALUES["SDT_SITE_BRANCH"]
STATES = (OFF, TRAP, BRANCH)
BP = {"x86_64": b"\xcc", "aarch64": bytes.fromhex("e0ba20d4"), "riscv64": bytes.fromhex("0290")}  # GNU as's
WIDTHS = {"x86_64": (1,), "aarch64": (4,), "riscv64": (2, 4)}


class HostPoke(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("size", ctypes.c_uint32), ("state", ctypes.c_uint32),
                ("old", ctypes.c_uint8 * 16), ("new", ctypes.c_uint8 * 16)]


class HostEvent(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("kind", ctypes.c_uint32), ("width", ctypes.c_uint32),
                ("found", ctypes.c_uint32), ("state", ctypes.c_uint32), ("bytes", ctypes.c_uint8 * 8)]


STORE, SYNC, LOOKUP = 1, 2, 3


def site_shapes(arch: str) -> list[tuple[str, int, int]]:
    """(form, size, offset in a 32-byte slot) of every site shape the architecture has."""
    if arch == "x86_64":
        return [(f, s, off) for f in ("call", "tail", "isen") for s in (5, 6) for off in (0, 3)] + \
               [("cond", 6, off) for off in (0, 7)]
    if arch == "aarch64":
        return [(f, 4, 0) for f in ("call", "tail", "isen")]
    return [(f, s, off) for f in ("call", "tail", "isen") for s in (4, 8) for off in (0, 2)] + \
           [("tail", 2, off) for off in (0, 2)]


@pytest.fixture(scope="module", params=["x86_64", "aarch64", "riscv64"])
def protocol(request, host_runtime):
    lib = host_runtime(request.param)
    lib.host_batch.argtypes = [ctypes.POINTER(HostPoke), ctypes.c_uint]
    lib.host_encode.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint64,
                                ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
    text = ctypes.create_string_buffer(1 << 16)
    return request.param, lib, text


def encode(lib, form: str, size: int, state: int, site: int, keep: int) -> bytes | None:
    out = ctypes.create_string_buffer(16)
    n = lib.host_encode(out, FORMS[form], size, state, site, site + 0x300, site + 0x200, keep)
    return out.raw[:n] if n else None


def transitions(arch: str, lib, base: int) -> list[list[tuple[int, int, bytes, bytes]]]:
    """Batches of (site, target state, old bytes, new bytes): each change of state for every shape at once,
    then all shapes' changes mixed in one batch."""
    shapes = site_shapes(arch)
    batches = []
    for old_state, new_state in itertools.permutations(STATES, 2):
        batch = []
        for i, (form, size, off) in enumerate(shapes):
            site = base + 32 * i + off
            keep = 0x85 if form == "cond" else 0
            old, new = (encode(lib, form, size, s, site, keep) for s in (old_state, new_state))
            if old and new and old != new:
                batch.append((site, new_state, old, new))
        batches.append(batch)
    mixed = {}
    for i, b in enumerate(batches):
        for site, *change in b[i % len(b):] + b[:i % len(b)]:
            if site not in mixed:  # one change per site
                mixed[site] = change
                break
    # the protocol sorts what it needs: give it the sites backwards
    return [*batches, [(site, *mixed[site]) for site in sorted(mixed, reverse=True)]]


def run_batch(lib, text, batch):
    base = ctypes.addressof(text)
    for site, _, old, _ in batch:
        ctypes.memmove(site, old, len(old))
    before = text.raw
    pokes = (HostPoke * len(batch))()
    for p, (site, state, old, new) in zip(pokes, batch, strict=True):
        p.addr, p.size, p.state = site, len(old), state
        p.old[:len(old)] = list(old)
        p.new[:len(new)] = list(new)
    n = lib.host_batch(pokes, len(batch))
    log = (HostEvent * n).from_address(ctypes.addressof(HostEvent.in_dll(lib, "host_log")))
    return before, list(log), base


def test_the_protocol_store_by_store(protocol):
    arch, lib, text = protocol
    bp = BP[arch]
    base = (ctypes.addressof(text) + 0xFFF) & ~0xFFF
    batches = transitions(arch, lib, base)
    assert all(batches) and len(batches) == 7
    for batch in batches:
        before, log, origin = run_batch(lib, text, batch)
        mem = bytearray(before)
        sites = {site: (state, old, new) for site, state, old, new in batch}
        history: dict[int, list[tuple[int, str]]] = {site: [] for site in sites}  # (event index, what happened)
        for k, e in enumerate(log):
            if e.kind == SYNC:
                for h in history.values():
                    h.append((k, "sync"))
                continue
            if e.kind == LOOKUP:
                state, old, new = sites[e.addr]
                now = bytes(mem[e.addr - origin:e.addr - origin + len(old)])
                if now not in (old, new):  # a transient breakpoint: the trap must find it and its new state
                    assert e.found and e.state == state, (arch, hex(e.addr), now.hex())
                elif e.found:
                    assert e.state == state
                continue
            assert e.kind == STORE and e.width in WIDTHS[arch] and e.addr % e.width == 0, (arch, e.width)
            (site,) = [s for s in sites if s <= e.addr and e.addr + e.width <= s + len(sites[s][1])]
            mem[e.addr - origin:e.addr - origin + e.width] = bytes(e.bytes[:e.width])
            state, old, new = sites[site]
            now = bytes(mem[site - origin:site - origin + len(old)])
            assert now in (old, new) or now.startswith(bp), (arch, hex(site), old.hex(), new.hex(), now.hex())
            history[site].append((k, "new" if now == new else "old" if now == old else "bp"))
        assert bytes(mem) == text.raw  # every write went through a store the hooks saw
        states = (ctypes.c_uint8 * (SITE_SIZE * len(batch))).in_dll(lib, "host_sites")
        at = SITE.offset("state", 64)
        assert [states[SITE_SIZE * i + at] for i in range(len(batch))] == [state for _, state, _, _ in batch]
        for site, (_, old, new) in sites.items():
            assert bytes(mem[site - origin:site - origin + len(old)]) == new
            steps = [what for _, what in history[site]]
            stores = [i for i, what in enumerate(steps) if what != "sync"]
            assert stores and steps[stores[-1]] == "new" and "sync" in steps[stores[-1]:], (arch, steps)
            if len(stores) > 1:  # the breakpoint protocol: bp, sync, the bytes behind it, sync, the first bytes
                assert all(steps[i] == "bp" or new.startswith(bp) for i in stores[:-1]), (arch, steps)
                if not old.startswith(bp):  # every CPU sees the breakpoint before anything behind it changes
                    assert "sync" in steps[stores[0]:stores[1]], (arch, steps)
                assert "sync" in steps[stores[-2]:stores[-1]], (arch, steps)  # and all of it before it goes
