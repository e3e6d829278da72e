"""The emulated machine: an image's PT_LOAD segments at their link addresses, a stack, a way back.

Kernels link in the upper half (0xffffffff80000000) where Unicorn 2.1 cannot
fetch code from plainly mapped memory, so the machine runs in Unicorn's
virtual-TLB mode: guest memory lives at low physical addresses and a TLB-fill
hook maps each virtual page to it. Only TLB misses reach Python. Two facts of
that mode shape the rest: ``emu_start(until=...)`` does not stop at the
address, so calls return to a page holding a breakpoint of our own; and a
write over code already translated is not seen until the translation cache
is dropped for those bytes (``invalidate``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from sdtgen.arch.base import Arch
from sdtgen.elf.reader import PF_X, PT_LOAD, SHT_REL, SHT_RELA, ElfFile
from sdtgen.errors import SdtError, printable
from sdtgen.image import CodeSpan, code_spans
from sdtgen.limits import DEFAULT_TIMEOUT, MAX_MAPPED, MAX_SEGMENT, MAX_SEGMENTS
from sdtgen.plaindata import record
from sdtgen.targets.emulator.cpus import model_of
from sdtgen.targets.emulator.fast_unicorn import hold_the_gil_in_short_calls, look_up_register_classes_once
from sdtgen.targets.emulator.watchdog import INTERRUPTED, TIMED_OUT, Watchdog

PAGE = 0x1000
STACK_SIZE = 0x40000
PHYS_BASE = 0x1000_0000
TCG_BUFFER = 32 << 20  # the most an engine's translation cache is given
MIN_TCG_BUFFER = 4 << 20


RETURNED = object()  # what _slice() says when the call came back to the return page


@record(frozen=True)
class Region:
    vaddr: int
    paddr: int
    size: int
    name: str
    protected: bool = False  # the guest may read and run it, not write it


class GuestFault(Exception):
    """The guest did something a CPU would fault on. ``str()`` says what."""

    def __init__(self, what: str, pc: int) -> None:
        super().__init__(what)
        self.what = what
        self.pc = pc


class Interrupted(GuestFault):
    """Ctrl-C stopped the guest."""


def tcg_buffer_for(image: ElfFile) -> int:
    """A translation cache sized to the work: 64 bytes of host code for each byte of the image's executable
    segments (translated code is several times the guest's, and a block is translated again after the
    cache is flushed), a power of two from 4 to 32 MiB. More would be address space reserved for nothing,
    times every CPU; a cache that fills is flushed and refilled, which costs time, never correctness."""
    code = sum(s.filesz for s in image.segments if s.type == PT_LOAD and s.flags & PF_X)
    size = MIN_TCG_BUFFER
    while size < TCG_BUFFER and size < code * 64:
        size <<= 1
    return size


def new_engine(arch: Arch, tcg_buffer: int = TCG_BUFFER):
    """A Unicorn engine for ``arch`` with a translation cache of ``tcg_buffer`` bytes.

    Unicorn reserves 1 GiB of address space an engine for it unless told; the kernels sdtgen boots
    translate a few megabytes (the cache is flushed and refilled when full). It is sized before anything
    else: any other control call sets the engine up with the default.
    """
    from unicorn import Uc

    hold_the_gil_in_short_calls()
    uc = Uc(*model_of(arch).unicorn)
    look_up_register_classes_once(uc)
    uc.ctl_set_tcg_buffer_size(tcg_buffer)
    return uc


class Machine:
    """Unicorn with an image loaded. ``trap`` is called for every breakpoint but our own.

    With ``cpus`` > 1 the guest's memory is host buffers that more engines map
    (``sibling``): one per CPU, each with its own registers, stack and
    translation cache.
    """

    def __init__(self, image: ElfFile, arch: Arch, cpus: int = 1) -> None:
        self.tcg_buffer = tcg_buffer_for(image)
        self._engine(arch, image.path)
        self.regions: list[Region] = []
        self._starts: list[int] = []
        self.code: list[CodeSpan] = []
        self._next_phys = PHYS_BASE
        self.buffers: list[tuple[int, int, object, int]] | None = [] if cpus > 1 else None  # paddr, size, mmap, ptr
        self.load(image)
        top = 1 << arch.bits
        self.exit_addr = top - PAGE  # the last page: a breakpoint calls return to
        self.stack_top = self.cpu_stack_top(0)
        # From CPU 0's stack top down to the end of the last CPU's stack: sdtgen's own areas go below.
        self.stack_size = self.stack_top - (self.cpu_stack_top(cpus - 1) - STACK_SIZE)
        self._map(self.exit_addr, PAGE, "the return page", protected=True)
        bp = arch.breakpoint(4)
        self.write(self.exit_addr, bp * (PAGE // len(bp)))
        for cpu in range(cpus):
            top_k = self.cpu_stack_top(cpu)
            self._map(top_k - STACK_SIZE, STACK_SIZE, "stack" if cpu == 0 else f"stack of CPU {cpu}")
        self._hooks()

    def _engine(self, arch: Arch, file: str) -> None:
        """This CPU's own parts: an engine in virtual-TLB mode, and its run state."""
        from unicorn import UC_TLB_VIRTUAL, UcError

        self._UcError = UcError  # caught on every stop: imported once, not per stop
        self.arch = arch
        self.model = model_of(arch)  # its CPU as Unicorn runs it: registers, calls, arguments
        self.file = file  # for diagnostics
        self.cpu = 0
        self.uc = new_engine(arch, self.tcg_buffer)
        self.uc.ctl_set_tlb_mode(UC_TLB_VIRTUAL)
        self._page = self.uc.ctl_get_page_size()
        self.own: tuple[int, int] | None = None  # (the per-CPU page's address, this CPU's page's physical address)
        self.trap: Callable[[int], int] | None = None  # site -> where to resume
        # A CPU stopped from outside with no reason of its own asks this whether to wait and go on
        # (sdtgen.targets.emulator.smp stops every other CPU to drop their translations).
        self.park: Callable[[Machine], bool] = lambda m: False
        self.last_miss: tuple[int, int] | None = None
        self._returned = False
        self._trapped_at: int | None = None
        self._stopped_by: GuestFault | None = None
        self._watchdog: Watchdog | None = None  # made by the first call
        self._detailed = None  # a Capstone handle with operand details, made on the first fault
        self._depth = 0  # calls in progress (an --action's call runs inside a probe's trap)
        self._pc = 0  # where step() goes on
        self._stepping = False  # a call begun by begin_call() has not returned yet
        self._counted = False  # the code translated so far counts instructions (see step)

    def cpu_stack_top(self, cpu: int) -> int:
        """CPU ``cpu``'s stack top: CPU 0's is the single-CPU machine's, the others' lie below it."""
        return (1 << self.arch.bits) - 2 * PAGE - cpu * (STACK_SIZE + PAGE)

    def sibling(self, cpu: int) -> Machine:
        """Another CPU of this machine: its own engine on the same host memory, with stack ``cpu``."""
        from unicorn import UC_PROT_ALL

        if self.buffers is None:
            raise ValueError("a machine of one CPU has no shared memory")
        m = Machine.__new__(Machine)
        m.tcg_buffer = self.tcg_buffer
        m._engine(self.arch, self.file)
        m.cpu = cpu
        m.regions, m._starts, m.code = self.regions, self._starts, self.code
        m.buffers, m._next_phys = self.buffers, self._next_phys
        for paddr, size, _, ptr in self.buffers:
            m.uc.mem_map_ptr(paddr, size, UC_PROT_ALL, ptr)
        m.exit_addr, m.stack_top, m.stack_size = self.exit_addr, self.cpu_stack_top(cpu), STACK_SIZE
        m._hooks()
        return m

    def _hooks(self) -> None:
        from unicorn import UC_HOOK_INTR, UC_HOOK_TLB_FILL

        self.uc.hook_add(UC_HOOK_TLB_FILL, self._tlb_fill)
        if self.model.trap_on_invalid:
            from unicorn import UC_HOOK_INSN_INVALID

            self.uc.hook_add(UC_HOOK_INSN_INVALID, self._invalid)
        else:
            self.uc.hook_add(UC_HOOK_INTR, self._interrupt)

    @property
    def depth(self) -> int:
        """Calls in progress on this CPU (a host call made inside a trap is nested in the one it stopped);
        a call run in quanta (``begin_call``, ``step``) counts until it returns."""
        return self._depth + self._stepping

    @property
    def watchdog(self) -> Watchdog:
        if self._watchdog is None:
            self._watchdog = Watchdog(self.uc)
        return self._watchdog

    def interrupt(self) -> None:
        """Stop this CPU's call as Ctrl-C does (from any thread)."""
        self.watchdog.interrupt()

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None

    # -- memory ---------------------------------------------------------------------
    def load(self, image: ElfFile) -> None:
        """Map every PT_LOAD segment at its link address; the part past the file is zero (bss).

        Segments may share pages (lld packs them), so the pages they cover are
        mapped as contiguous runs, then each segment's file bytes written: zero
        pages are never copied, and the host commits them only when the guest
        touches them. Which bytes may hold a site is decided per segment.
        """
        loads = sorted((s for s in image.segments if s.type == PT_LOAD and s.memsz), key=lambda s: s.vaddr)
        if not loads:
            raise image.fail("has no loadable segments", "give a linked image")
        if len(loads) > MAX_SEGMENTS:
            raise image.fail(f"has {len(loads)} loadable segments, more than the {MAX_SEGMENTS} a boot maps",
                             "link the kernel into a few segments")
        runs: list[list[int]] = []  # [start, end] of pages
        last_end = None
        for seg in loads:
            start = seg.vaddr & ~(PAGE - 1)
            end = (seg.vaddr + seg.memsz + PAGE - 1) & ~(PAGE - 1)
            if end > 1 << self.arch.bits or end - start > MAX_SEGMENT or seg.filesz > seg.memsz:
                raise image.fail(f"segment at {seg.vaddr:#x} of {seg.memsz:#x} bytes cannot be loaded",
                                 "link the image at a valid address")
            if last_end is not None and seg.vaddr < last_end:
                raise image.fail(f"segment at {seg.vaddr:#x} overlaps the segment before it",
                                 "relink the image: segments may share pages, not bytes")
            last_end = seg.vaddr + seg.memsz
            if runs and start <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], end)
            else:
                runs.append([start, end])
        total = sum(end - start for start, end in runs)
        if total > MAX_MAPPED:
            raise image.fail(f"segments need {total:#x} bytes of memory, more than the {MAX_MAPPED >> 20} MiB "
                             "a boot maps, so they cannot be loaded", "link a smaller image")
        self.code = code_spans(image)
        for start, end in runs:
            self._map(start, end - start, f"segments at {start:#x}")
        for seg in loads:
            self.write(seg.vaddr, bytes(image.data[seg.offset:seg.offset + seg.filesz]))
        # PIE kernels (and GNU ld's -pie output on RISC-V, which it marks EXEC) carry RELATIVE relocations.
        self._self_relocate(image)

    def _self_relocate(self, image: ElfFile) -> None:
        """Apply a PIE kernel's RELATIVE relocations at its link address, as it would itself."""
        size = self.arch.bits // 8
        for sec in image.sections:
            if sec.type not in (SHT_RELA, SHT_REL) or not sec.is_alloc:
                continue
            for i, r in enumerate(image.relocations(sec)):
                if r.type != self.arch.relative_reloc:
                    raise image.fail(f"dynamic relocation type {self.arch.reloc_name(r.type)} in {sec.name}",
                                     "link the kernel so that only RELATIVE relocations remain (-pie, -Bsymbolic)")
                try:
                    addend = r.addend if sec.type == SHT_RELA else self.read_pointer(r.offset)
                    self.write(r.offset, (addend & ((1 << self.arch.bits) - 1)).to_bytes(
                        size, "little" if self.arch.little else "big"))
                except GuestFault:
                    raise image.fail(f"relocation {i} in {printable(sec.name)} ({self.arch.reloc_name(r.type)}) "
                                     f"is at {r.offset:#x}, outside every loaded segment",
                                     "relink the image") from None

    def _map(self, vaddr: int, size: int, name: str, protected: bool = False) -> None:
        from unicorn import UcError

        for r in self.regions:
            if vaddr < r.vaddr + r.size and r.vaddr < vaddr + size:
                raise SdtError(self.file, f"{name} at {vaddr:#x} overlaps {r.name}", "relink the image")
        region = Region(vaddr, self._next_phys, size, name, protected)
        try:
            if self.buffers is None:
                self.uc.mem_map(region.paddr, size)
            else:  # host memory every CPU's engine maps; anonymous, so untouched pages cost nothing
                import ctypes
                import mmap

                from unicorn import UC_PROT_ALL

                buf = mmap.mmap(-1, size)
                ptr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
                self.uc.mem_map_ptr(region.paddr, size, UC_PROT_ALL, ptr)
                self.buffers.append((region.paddr, size, buf, ptr))
        except UcError as e:
            raise SdtError(self.file, f"cannot map {size:#x} bytes for {name}: {e}", "link a smaller image") from None
        self._next_phys += size + PAGE
        i = bisect.bisect(self._starts, vaddr)
        self._starts.insert(i, vaddr)
        self.regions.insert(i, region)

    def map_area(self, vaddr: int, size: int, name: str, protected: bool = False) -> None:
        """Map guest memory of the emulated platform's own (its hooks' code, the runtime's rings) at ``vaddr``."""
        self._map(vaddr, size, name, protected)

    def map_own_page(self, vaddr: int, real: int) -> None:
        """This CPU sees the page mapped at ``real`` at ``vaddr`` too: its own page, as per-CPU data is reached."""
        r = self.region_at(real)
        if r is None or real & (PAGE - 1):
            raise ValueError(f"no page at {real:#x}")
        self.own = (vaddr, r.paddr + real - r.vaddr)

    def region_at(self, vaddr: int) -> Region | None:
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i >= 0 and vaddr < self.regions[i].vaddr + self.regions[i].size:
            return self.regions[i]
        return None

    def _phys(self, vaddr: int, size: int) -> int:
        r = self.region_at(vaddr)
        if r is None or vaddr + size > r.vaddr + r.size:
            raise GuestFault(f"no memory at {vaddr:#x} (+{size})", vaddr)
        return r.paddr + vaddr - r.vaddr

    def read(self, vaddr: int, size: int) -> bytes:
        return bytes(self.uc.mem_read(self._phys(vaddr, size), size))

    def write(self, vaddr: int, data: bytes) -> None:
        self.uc.mem_write(self._phys(vaddr, len(data)), bytes(data))

    def invalidate(self, start: int, end: int) -> None:
        self.uc.ctl_remove_cache(start, end)

    def read_pointer(self, vaddr: int) -> int:
        return int.from_bytes(self.read(vaddr, self.arch.bits // 8), "little" if self.arch.little else "big")

    def _tlb_fill(self, uc, vaddr, access, entry, user) -> bool:
        from unicorn import UC_MEM_WRITE, UC_PROT_ALL, UC_PROT_EXEC, UC_PROT_READ

        if self.own is not None and vaddr & ~(PAGE - 1) == self.own[0]:
            entry.paddr = self.own[1] + (vaddr & (PAGE - 1) & ~(self._page - 1))
            entry.perms = UC_PROT_READ
            return True
        r = self.region_at(vaddr)
        if r is None:
            self.last_miss = (vaddr, access)
            return False
        # Unicorn's page is the CPU's: 4 KiB on x86 and RISC-V, 1 KiB on Arm.
        entry.paddr = (r.paddr + vaddr - r.vaddr) & ~(self._page - 1)
        if r.protected:
            entry.perms = UC_PROT_READ | UC_PROT_EXEC
            if access == UC_MEM_WRITE:
                self.last_miss = (vaddr, access)  # the write faults: say where
        else:
            entry.perms = UC_PROT_ALL
        return True

    # -- running ---------------------------------------------------------------------
    # A breakpoint stops the emulator; Python handles it between two emu_start()s.
    # (On RISC-V, Unicorn reports ebreak as an invalid instruction whose hook
    # cannot resume in place, so stopping and restarting serves every CPU.)
    def _interrupt(self, uc, intno: int, user) -> None:
        pc = uc.reg_read(self.model.regs.pc)
        if intno in self.model.traps:
            self._trapped(self.arch.trap_site(pc))
        else:
            self._stopped_by = GuestFault(f"CPU exception {intno}", pc)
        uc.emu_stop()

    def _invalid(self, uc, user) -> bool:
        pc = uc.reg_read(self.model.regs.pc)
        try:
            code = self.read(pc, 4)
        except GuestFault:
            code = b""
        if code[:2] == self.arch.breakpoint(2) or code == self.arch.breakpoint(4):
            self._trapped(pc)
        else:
            self._stopped_by = GuestFault("invalid instruction", pc)
        uc.emu_stop()
        return True

    def _trapped(self, site: int) -> None:
        if site == self.exit_addr:
            self._returned = True
        else:
            self._trapped_at = site

    def call_nested(self, func: int, args: list[int]) -> int:
        """Call a function while another call is stopped at a breakpoint, then restore its registers.

        The nested frame goes below the interrupted one's stack pointer (past any red zone).
        """
        ctx = self.uc.context_save()
        sp = self.uc.reg_read(self.model.regs.sp)
        try:
            return self.call(func, args, stack_top=sp - 512)
        finally:
            self.uc.context_restore(ctx)

    def call(self, func: int, args: list[int], timeout: float = DEFAULT_TIMEOUT, stack_top: int | None = None) -> int:
        """Call ``func(*args)`` per the ABI; the return value, or GuestFault (Interrupted on Ctrl-C).

        The outermost call's ``timeout`` (seconds) bounds every call nested in it.
        """
        self.model.set_call(self, func, args, self.exit_addr, stack_top or self.stack_top)
        if self._depth:
            return self._run(func)
        self._depth += 1
        try:
            with self.watchdog.watching(timeout):
                return self._run(func)
        finally:
            self._depth -= 1

    def _run(self, pc: int) -> int:
        self._counted = False
        while True:
            after = self._slice(pc, 0)
            if after is RETURNED:
                return self.uc.reg_read(self.model.regs.ret)
            if after is None:
                here = self.uc.reg_read(self.model.regs.pc)
                self._check_watchdog(here)
                if self.park(self):  # stopped while another CPU stopped the world: go on where it was
                    pc = here
                    continue
                raise GuestFault("the CPU halted (hlt, wfi or a stop Unicorn gives no reason for)", here)
            pc = after

    def _slice(self, pc: int, count: int) -> int | object | None:
        """Run from ``pc`` (at most ``count`` instructions, if not 0) to the next stop.

        RETURNED when the call returned; where to go on after a breakpoint; None when the CPU
        stopped for no reason of ours (a halt, or the ``count`` ran out).
        """
        self._returned, self._trapped_at, self._stopped_by, self.last_miss = False, None, None, None
        self._check_watchdog(pc)
        try:
            self.uc.emu_start(pc, 0, 0, count)
        except self._UcError as e:
            if self._trapped_at is None and not self._returned and self._stopped_by is None:
                raise GuestFault(self._describe(e), self.uc.reg_read(self.model.regs.pc)) from None
        if self._stopped_by is not None:
            raise self._stopped_by
        if self._returned:
            return RETURNED
        if self._trapped_at is None:
            return None
        if self.trap is None:
            raise GuestFault("breakpoint trap", self._trapped_at)
        return self.trap(self._trapped_at)

    # -- one CPU of several: calls run a quantum at a time (sdtgen.targets.emulator.smp schedules them) ----------------
    def begin_call(self, func: int, args: list[int]) -> None:
        """Set up ``func(*args)`` on this CPU's stack; ``step`` runs it."""
        self.model.set_call(self, func, args, self.exit_addr, self.stack_top)
        self._pc = func
        self._stepping = True

    def step(self, count: int) -> bool:
        """Run this CPU's call for at most ``count`` instructions; True once it has returned."""
        if not self._counted:
            # Unicorn counts instructions with a hook compiled into each translated block: code translated by
            # an uncounted run (call()) would run past the count, so it is translated again.
            self.uc.ctl_flush_tb()
            self._counted = True
        try:
            after = self._slice(self._pc, count)
        except GuestFault:
            self._stepping = False
            raise
        if after is RETURNED:
            self._stepping = False
            return True
        self._pc = self.uc.reg_read(self.model.regs.pc) if after is None else after
        return False

    def watch_code_stores(self, callback: Callable[[int, bytes], None],
                          more: tuple[tuple[int, int], ...] = ()) -> None:
        """``callback(address, bytes)`` before every store this CPU makes to an executable segment lands (or to
        ``more``: (start, end) of code mapped since, a module's).

        In virtual-TLB mode Unicorn hands memory hooks physical addresses: they are mapped back."""
        from unicorn import UC_HOOK_MEM_WRITE

        order = "little" if self.arch.little else "big"
        for start, end in [(span.start, span.end) for span in self.code] + list(more):
            r = self.region_at(start)
            base = r.paddr - r.vaddr

            def stored(uc, access, paddr: int, size: int, value: int, user, base=base) -> None:
                callback(paddr - base, (value & ((1 << (8 * size)) - 1)).to_bytes(size, order))

            self.uc.hook_add(UC_HOOK_MEM_WRITE, stored, None, start + base, end + base - 1)

    def step_one(self, pc: int) -> int | None:
        """Run the one instruction at ``pc`` (a breakpoint resolved as any other); where the CPU is after it,
        or None when it returned to the host."""
        self._counted = True
        after = self._slice(pc, 1)
        if after is RETURNED:
            return None
        return self.uc.reg_read(self.model.regs.pc) if after is None else after

    def _check_watchdog(self, pc: int) -> None:
        """Raise what the watchdog stopped the guest for, if it did."""
        if self._watchdog is None:
            return
        reason = self._watchdog.reason
        if reason == INTERRUPTED:
            raise Interrupted("interrupted (Ctrl-C)", pc)
        if reason == TIMED_OUT:
            raise GuestFault(f"did not return within {self.watchdog.timeout:g} s", pc)

    def _describe(self, e: Exception) -> str:
        from unicorn import UC_MEM_FETCH, UC_MEM_FETCH_UNMAPPED, UC_MEM_WRITE, UC_MEM_WRITE_UNMAPPED

        if self.last_miss is not None:
            addr, access = self.last_miss
            if access not in (UC_MEM_FETCH, UC_MEM_FETCH_UNMAPPED):
                addr = self._operand_address(addr)
            region = self.region_at(addr)
            if region is not None and region.protected:
                return f"write to {addr:#x} in {region.name}, which the guest may not write"
            kind = {UC_MEM_WRITE: "write to", UC_MEM_WRITE_UNMAPPED: "write to", UC_MEM_FETCH: "instruction fetch from",
                    UC_MEM_FETCH_UNMAPPED: "instruction fetch from"}.get(access, "read from")
            return f"page fault: {kind} unmapped address {addr:#x}"
        return str(e)

    def _operand_address(self, page: int) -> int:
        """The exact address the faulting instruction names, from its memory operand and the registers.

        The TLB fill hook sees only the page; the guest stopped before the
        instruction ran, so its registers still give the address.
        """
        pc = self.uc.reg_read(self.model.regs.pc)
        try:
            if self._detailed is None:
                self._detailed = self.arch.capstone()
                self._detailed.detail = True
            insn = next(self._detailed.disasm(self.read(pc, 16), pc, 1))
            def reg(number: int) -> int:
                if not number:
                    return 0
                name = insn.reg_name(number)
                if name in ("rip", "eip", "pc"):
                    return pc + insn.size
                return self.uc.reg_read(self.model.register(name))

            for op in insn.operands:
                mem = getattr(op, "mem", None)
                if op.type != 3 or mem is None:  # 3: a memory operand, in every Capstone architecture
                    continue
                scale = getattr(mem, "scale", 1) or 1
                addr = reg(mem.base) + reg(getattr(mem, "index", 0)) * scale + mem.disp
                addr &= (1 << self.arch.bits) - 1
                if addr & ~(PAGE - 1) <= page <= addr + 64:  # the operand that touched the missing page
                    return addr
        except Exception:  # no decoding, an unknown register: the page is still true
            pass
        return page
