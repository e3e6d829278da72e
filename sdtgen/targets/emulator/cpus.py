"""An architecture as Unicorn runs it: the facts its module declares (``Arch.emulator``), made Unicorn's ids once,
and the code that works the registers: a call set up, a site's arguments read, the clock read, the platform's
hook code put together.

The architecture modules (sdtgen/arch/NAME.py) hold data only and never import Unicorn; every architecture
goes through the one code here. Where a call's arguments and return address go follows from the registers
the facts name: a link register (AArch64, RISC-V), or none, the return address pushed (x86-64), and no argument
registers either, the arguments pushed too (i386's cdecl).
"""

from __future__ import annotations

from importlib import import_module

from sdtgen.arch.base import RETURNS, Arch
from sdtgen.plaindata import record


@record(frozen=True)
class Regs:
    """Unicorn's ids of the registers a call, a trap frame and a return value go through."""

    pc: int
    sp: int
    ret: int
    args: tuple[int, ...]
    link: int | None = None  # the register a call leaves its return address in, if any
    flags: int | None = None  # the condition flags (x86 EFLAGS: a conditional tail site tests them)


class CpuModel:
    """One architecture's CPU in Unicorn (``model_of``: one per architecture)."""

    def __init__(self, arch: Arch) -> None:
        import unicorn

        facts = arch.emulator
        self.arch = arch
        self.traps = facts.traps
        self.trap_on_invalid = facts.trap_on_invalid
        self.word = arch.bits // 8
        self.mask = (1 << arch.bits) - 1
        self.order = "little" if arch.little else "big"
        self.unicorn = (getattr(unicorn, facts.unicorn[0]), getattr(unicorn, facts.unicorn[1]))
        self._consts = import_module(f"unicorn.{facts.registers[0]}")
        self._prefix = facts.registers[1]
        self.regs = Regs(self.register(facts.pc), self.register(facts.sp), self.register(facts.ret[0]),
                         tuple(map(self.register, facts.args)), self.register(facts.link) if facts.link else None,
                         self.register(facts.flags) if facts.flags else None)
        self._value = tuple(map(self.register, facts.ret))
        self.clock, self.clock_hz = facts.clock, facts.clock_hz  # the clock, its frequency (b"": the CPU says none)
        self._facts = facts

    def register(self, name: str) -> int:
        """Unicorn's id of the register Capstone calls ``name`` (an AttributeError for one it lacks)."""
        return getattr(self._consts, self._prefix + name.upper())

    def _pack(self, value: int) -> bytes:
        return (value & self.mask).to_bytes(self.word, self.order)

    # -- calls ---------------------------------------------------------------------------------
    def set_call(self, m, func: int, args: list[int], return_to: int, stack_top: int) -> None:
        """Prepare ``m``'s registers and stack (``m.uc``, ``m.write``) to call ``func(args)`` returning to
        ``return_to``."""
        regs, uc = self.regs, m.uc
        for reg, value in zip(regs.args, args, strict=False):
            uc.reg_write(reg, value & self.mask)
        if regs.link is not None:
            uc.reg_write(regs.link, return_to)
            sp = stack_top & ~0xF
        elif regs.args:
            sp = (stack_top & ~0xF) - self.word  # at entry, (sp + a word) is 16-byte aligned
            m.write(sp, self._pack(return_to))
        else:  # every argument pushed, right to left, then the return address
            if len(args) > self.arch.max_args:
                raise ValueError(f"at most {self.arch.max_args} arguments")
            sp = (stack_top & ~0xF) - self.word * len(args)
            sp -= (sp - self.word) % 16  # 16-byte aligned at the call, as gcc's i386 ABI expects
            sp -= self.word
            m.write(sp, b"".join(map(self._pack, [return_to, *args])))
        uc.reg_write(regs.sp, sp)
        uc.reg_write(regs.pc, func)

    def args_at_site(self, m, count: int, form: str) -> list[int]:
        """The first ``count`` probe arguments, as the calling convention has them at a site of ``form``: in
        registers, or on the stack from its top (at a tail jump, after the return address it returns with)."""
        if self.regs.args:
            return [m.uc.reg_read(r) for r in self.regs.args[:count]]
        sp = m.uc.reg_read(self.regs.sp) + (self.word if form in RETURNS else 0)
        raw = m.read(sp, self.word * count) if count else b""
        return [int.from_bytes(raw[k:k + self.word], self.order) for k in range(0, len(raw), self.word)]

    def returned(self, uc) -> int:
        """The value of a returned 64-bit result (the clock): its registers, low word first."""
        return sum(uc.reg_read(r) << (k * 8 * self.word) for k, r in enumerate(self._value))

    # -- the emulated platform's hook code (sdtgen/targets/emulator/platform.py) -------------------------
    def firmware_load(self, va: int) -> bytes:
        """A function returning the word at address ``va`` (the per-CPU page: each CPU its own)."""
        before, after = self._facts.load_word
        return before + self._pack(va) + after

    def firmware_clock(self) -> bytes:
        """A function returning the clock (as a 64-bit value)."""
        return self._facts.clock + self._facts.return_insn

    def firmware_trap(self) -> bytes:
        """A function whose first instruction traps to the host, which does the hook's work; then it returns.
        The host resumes it at ``len(arch.breakpoint(4))``."""
        return self.arch.breakpoint(4) + self._facts.return_insn


_models: dict[str, CpuModel] = {}


def model_of(arch: Arch) -> CpuModel:
    """``arch``'s CPU as Unicorn runs it (made once)."""
    model = _models.get(arch.name)
    if model is None:
        model = _models[arch.name] = CpuModel(arch)
    return model
