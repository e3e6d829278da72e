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
from dataclasses import dataclass

from sdtgen.arch.base import Arch
from sdtgen.elf.reader import PT_LOAD, SHT_REL, SHT_RELA, ElfFile
from sdtgen.errors import SdtError

PAGE = 0x1000
MAX_SEGMENT = 256 << 20  # a larger one is a damaged header, not a kernel
PF_X = 1
STACK_SIZE = 0x40000
PHYS_BASE = 0x1000_0000
CALL_TIMEOUT_US = 20_000_000


@dataclass(frozen=True)
class Region:
    vaddr: int
    paddr: int
    size: int
    name: str
    executable: bool = False
    code_end: int = 0  # end of the executable bytes the file holds (no site lies past it)


class GuestFault(Exception):
    """The guest did something a CPU would fault on. ``str()`` says what."""

    def __init__(self, what: str, pc: int) -> None:
        super().__init__(what)
        self.what = what
        self.pc = pc


class Machine:
    """Unicorn with an image loaded. ``trap`` is called for every breakpoint but our own."""

    def __init__(self, image: ElfFile, arch: Arch) -> None:
        from unicorn import UC_HOOK_INTR, UC_HOOK_TLB_FILL, UC_TLB_VIRTUAL, Uc

        self.arch = arch
        self.uc = Uc(*arch.unicorn())
        self.uc.ctl_set_tlb_mode(UC_TLB_VIRTUAL)
        self._page = self.uc.ctl_get_page_size()
        self.regions: list[Region] = []
        self._starts: list[int] = []
        self._next_phys = PHYS_BASE
        self.trap: Callable[[int], int] | None = None  # site -> where to resume
        self.last_miss: tuple[int, int] | None = None
        self._returned = False
        self._trapped_at: int | None = None
        self._stopped_by: GuestFault | None = None
        self.load(image)
        top = 1 << arch.bits
        self.exit_addr = top - PAGE  # the last page: a breakpoint calls return to
        self.stack_top = top - 2 * PAGE
        self._map(self.exit_addr, PAGE, "exit")
        bp = arch.breakpoint(4)
        self.write(self.exit_addr, bp * (PAGE // len(bp)))
        self._map(self.stack_top - STACK_SIZE, STACK_SIZE, "stack")
        self.uc.hook_add(UC_HOOK_TLB_FILL, self._tlb_fill)
        if arch.trap_on_invalid:
            from unicorn import UC_HOOK_INSN_INVALID

            self.uc.hook_add(UC_HOOK_INSN_INVALID, self._invalid)
        else:
            self.uc.hook_add(UC_HOOK_INTR, self._interrupt)

    # -- memory ---------------------------------------------------------------------
    def load(self, image: ElfFile) -> None:
        """Map every PT_LOAD segment at its link address; the part past the file is zero (bss).

        Segments may share pages (lld packs them), so the pages they cover are
        mapped as contiguous runs first, then each segment's bytes written.
        """
        loads = [s for s in image.segments if s.type == PT_LOAD and s.memsz]
        if not loads:
            raise image.fail("has no loadable segments", "give a linked image")
        runs: list[list[int]] = []  # [start, end, executable, end of executable file bytes]
        for seg in sorted(loads, key=lambda s: s.vaddr):
            start = seg.vaddr & ~(PAGE - 1)
            end = (seg.vaddr + seg.memsz + PAGE - 1) & ~(PAGE - 1)
            if end > 1 << self.arch.bits or end - start > MAX_SEGMENT:
                raise image.fail(f"segment at {seg.vaddr:#x} of {seg.memsz:#x} bytes cannot be loaded",
                                 "link the image at a valid address")
            code_end = seg.vaddr + seg.filesz if seg.flags & PF_X else 0
            if runs and start <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], end)
                runs[-1][2] |= bool(seg.flags & PF_X)
                runs[-1][3] = max(runs[-1][3], code_end)
            else:
                runs.append([start, end, bool(seg.flags & PF_X), code_end])
        for start, end, executable, code_end in runs:
            self._map(start, end - start, f"segments at {start:#x}", executable=bool(executable), code_end=code_end)
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
            for r in image.relocations(sec):
                if r.type != self.arch.relative_reloc:
                    raise image.fail(f"dynamic relocation type {self.arch.reloc_name(r.type)} in {sec.name}",
                                     "link the kernel so that only RELATIVE relocations remain (-pie, -Bsymbolic)")
                addend = r.addend if sec.type == SHT_RELA else self.read_pointer(r.offset)
                self.write(r.offset, (addend & ((1 << self.arch.bits) - 1)).to_bytes(
                    size, "little" if self.arch.little else "big"))

    def _map(self, vaddr: int, size: int, name: str, executable: bool = False, code_end: int = 0) -> None:
        for r in self.regions:
            if vaddr < r.vaddr + r.size and r.vaddr < vaddr + size:
                raise SdtError("", f"{name} at {vaddr:#x} overlaps {r.name}", "relink the image")
        region = Region(vaddr, self._next_phys, size, name, executable, code_end)
        self.uc.mem_map(region.paddr, size)
        self._next_phys += size + PAGE
        i = bisect.bisect(self._starts, vaddr)
        self._starts.insert(i, vaddr)
        self.regions.insert(i, region)

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

    def write_code(self, vaddr: int, data: bytes) -> None:
        """Write instructions and drop their translations, as a kernel syncs the icache."""
        self.write(vaddr, data)
        self.invalidate(vaddr, vaddr + len(data))

    def invalidate(self, start: int, end: int) -> None:
        self.uc.ctl_remove_cache(start, end)

    def read_pointer(self, vaddr: int) -> int:
        return int.from_bytes(self.read(vaddr, self.arch.bits // 8), "little" if self.arch.little else "big")

    def _tlb_fill(self, uc, vaddr, access, entry, user) -> bool:
        from unicorn import UC_PROT_ALL

        r = self.region_at(vaddr)
        if r is None:
            self.last_miss = (vaddr, access)
            return False
        # Unicorn's page is the CPU's: 4 KiB on x86 and RISC-V, 1 KiB on Arm.
        entry.paddr = (r.paddr + vaddr - r.vaddr) & ~(self._page - 1)
        entry.perms = UC_PROT_ALL
        return True

    # -- running ---------------------------------------------------------------------
    # A breakpoint stops the emulator; Python handles it between two emu_start()s.
    # (On RISC-V, Unicorn reports ebreak as an invalid instruction whose hook
    # cannot resume in place, so stopping and restarting serves every CPU.)
    def _interrupt(self, uc, intno: int, user) -> None:
        pc = uc.reg_read(self.arch.regs.pc)
        if intno in self.arch.trap_interrupts:
            self._trapped(self.arch.trap_site(pc))
        else:
            self._stopped_by = GuestFault(f"CPU exception {intno}", pc)
        uc.emu_stop()

    def _invalid(self, uc, user) -> bool:
        pc = uc.reg_read(self.arch.regs.pc)
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
        sp = self.uc.reg_read(self.arch.regs.sp)
        try:
            return self.call(func, args, stack_top=sp - 512)
        finally:
            self.uc.context_restore(ctx)

    def call(self, func: int, args: list[int], timeout_us: int = CALL_TIMEOUT_US, stack_top: int | None = None) -> int:
        """Call ``func(*args)`` per the ABI; the return value, or GuestFault."""
        import time

        from unicorn import UcError

        self.arch.set_call(self, func, args, self.exit_addr, stack_top or self.stack_top)
        deadline = time.monotonic() + timeout_us / 1e6
        pc = func
        while True:
            self._returned, self._trapped_at, self._stopped_by, self.last_miss = False, None, None, None
            left = int((deadline - time.monotonic()) * 1e6)
            if left <= 0:
                raise GuestFault(f"did not return within {timeout_us / 1e6:g} s", pc)
            try:
                self.uc.emu_start(pc, 0, timeout=left)
            except UcError as e:
                if self._trapped_at is None and not self._returned and self._stopped_by is None:
                    raise GuestFault(self._describe(e), self.uc.reg_read(self.arch.regs.pc)) from None
            if self._stopped_by is not None:
                raise self._stopped_by
            if self._returned:
                return self.uc.reg_read(self.arch.regs.ret)
            if self._trapped_at is None:
                raise GuestFault(f"did not return within {timeout_us / 1e6:g} s", self.uc.reg_read(self.arch.regs.pc))
            if self.trap is None:
                raise GuestFault("breakpoint trap", self._trapped_at)
            pc = self.trap(self._trapped_at)

    def _describe(self, e: Exception) -> str:
        from unicorn import UC_MEM_FETCH, UC_MEM_WRITE

        if self.last_miss is not None:
            addr, access = self.last_miss
            kind = {UC_MEM_WRITE: "write to", UC_MEM_FETCH: "instruction fetch from"}.get(access, "read from")
            return f"page fault: {kind} unmapped address {addr:#x}"
        return str(e)
