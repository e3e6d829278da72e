"""Any kernel that links the control core, booted on QEMU: the architecture's machine with N vCPUs (one
host thread each), the user's own QEMU arguments where the kernel needs them, and the control channel
on the serial port the image names (SDT_CONTROL_SERIAL, section sdt_control; the first by default),
wired to a pipe of sdtgen's. The serial ports before it write to files, shown when the kernel stops.

The packets take the shared transport by default: the machine's RAM is a file QEMU and the host both map
(-object memory-backend-file,share=on), the kernel says where each CPU's ring is (`shared on`, its
sdt_control_ops.phys), and the host reads closed packets there while the kernel runs, claiming each as
sdt_consume_done does. The line then carries commands and replies only. A kernel that cannot say where
its rings are, or a machine whose RAM sdtgen cannot name (a -m it cannot read), keeps the serial transport.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile

from sdtgen.elf.reader import PT_LOAD
from sdtgen.errors import SdtError, printable
from sdtgen.layout import CONTROL_INFO, CPU, MODULE_FILE, STRING, VALUES, WORD, parse_reply, reply_shapes
from sdtgen.limits import MAX_CPUS  # a kernel says in its hello how many of the vCPUs it took
from sdtgen.targets.base import SALVAGES, Halted, Host, OwnSession, Refused, Rings
from sdtgen.targets.child import Child, ChildChannel
from sdtgen.targets.control import ControlTarget
from sdtgen.targets.qemu_monitor import MonitorError, RamFile, pmemsave, qmp_option
from sdtgen.trace.streams import MIN_PACKET
from sdtgen.transport.consumer import Consumer, Ring
from sdtgen.transport.shared_ram import SharedRam

EXIT_WAIT = 5.0  # seconds QEMU has to power off after `exit`
# QEMU options sdtgen gives, and which of them a user's own replaces (the user's -m sizes the RAM too).
REPLACEABLE = {"-machine": "-machine", "-M": "-machine", "-cpu": "-cpu", "-bios": "-bios", "-m": "-m",
               "-smp": "-smp", "-accel": "-accel"}
MEMORY_BASE = 128 << 20  # bytes of guest RAM besides the rings: the image, stacks, QEMU's firmware tables
OURS = ("-kernel", "-nographic", "-monitor", "-display", "-chardev", "-daemonize")  # sdtgen wires these
# A user's own -serial is a port after sdtgen's (a second line, for another host: docs/control.md), never the
# standard input and output sdtgen's control line is.
STDIO_SERIAL = ("stdio", "mon:stdio")
MAX_SERIAL = 4
RAM_ID = "sdtgen-ram"  # the memory backend's id
TRANSPORTS = ("shared", "serial")


def memory_for(cpus: int, ring_bytes: int) -> int:
    """RAM for the image and every CPU's ring, rounded up to a MiB."""
    return (MEMORY_BASE + cpus * ring_bytes + (1 << 20) - 1) & ~((1 << 20) - 1)


def find_qemu(arch) -> str:
    if arch.qemu is None:
        raise SdtError("", f"sdtgen qemu does not boot {arch.name} images",
                       "architectures with a QEMU platform: see docs/qemu.md")
    path = shutil.which(arch.qemu.binary)
    if path is None:
        raise SdtError("", f"{arch.qemu.binary} not found", f"install it: apt-get install {arch.qemu.package}")
    return path


def control_serial(image) -> int:
    """The serial port the image's control core listens on: its SDT_CONTROL_SERIAL, or 0."""
    sec = image.elf.section("sdt_control")
    if sec is None or not sec.is_alloc:
        return 0
    st = CONTROL_INFO.struct(image.arch.bits, image.arch.little)
    if sec.size < st.size:
        raise image.elf.fail("its sdt_control section is too small for struct sdt_control_info",
                             "define it with SDT_CONTROL_SERIAL(port)")
    magic, serial, _ = st.unpack(image.read(sec.addr, st.size))
    if magic != VALUES["SDT_CONTROL_MAGIC"] or serial >= MAX_SERIAL:
        raise image.elf.fail(f"its sdt_control section says serial port {serial} (magic {magic:#x}), which is not "
                             f"one of the first {MAX_SERIAL}", "define it with SDT_CONTROL_SERIAL(port)")
    return serial


def _ram_path(logs: str) -> str:
    """Where the machine's RAM file goes: memory (/dev/shm) when the host has it, else beside the logs."""
    shm = "/dev/shm"
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else logs
    return os.path.join(where, f"sdtgen-ram-{os.getpid()}-{os.path.basename(logs)}")


def check_qemu_args(args: list[str]) -> list[str]:
    """The user's own QEMU arguments, refused where they would take the serial ports sdtgen wires."""
    for k, a in enumerate(args):
        ours = a in OURS or a.split("=", 1)[0] in OURS
        if a == "-serial" and (k + 1 == len(args) or args[k + 1].split(",", 1)[0] in STDIO_SERIAL):
            ours = True  # a port of its own after sdtgen's is the user's; standard input and output are sdtgen's
        if ours:
            raise SdtError("", f"--qemu-arg {printable(a)}: sdtgen wires QEMU's serial ports, console and kernel "
                           "itself", "leave it out (the image names its control port with SDT_CONTROL_SERIAL)")
        if not a.isprintable():
            raise SdtError("", f"--qemu-arg {printable(a)!r} has control characters")
    return args


def user_memory(args: list[str]) -> int | None:
    """The RAM the user's -m gives, in bytes (None: no -m, or one sdtgen cannot read)."""
    for flag, value in itertools.pairwise(args):
        if flag == "-m":
            m = re.fullmatch(r"(?:size=)?(\d+)([MGmg]?)(?:,.*)?", value)
            if m:
                return int(m[1]) << (30 if m[2] in "Gg" and m[2] else 20)
    return None


def qemu_command(binary: str, arch, image: str, cpus: int, memory: int, serial: int, logs: str,
                 user: list[str], ram_file: str | None = None, qmp: str | None = None) -> list[str]:
    """QEMU's command line: sdtgen's defaults for the architecture, less what the user's own replace, then the
    user's; serial port ``serial`` on standard input and output, the ones before it in files under ``logs``;
    the RAM in ``ram_file``, shared with the host (QEMU merges a second -machine into the first); QEMU's machine
    protocol on the socket ``qmp`` (a post-mortem saves the RAM through it when it is not shared)."""
    given = {REPLACEABLE[a] for a in user if a in REPLACEABLE}
    ours = [("-machine", arch.qemu.machine), ("-smp", str(cpus)), ("-m", f"{memory >> 20}M")]
    ours += list(zip(arch.qemu.accel[::2], arch.qemu.accel[1::2], strict=True))
    ours += list(zip(arch.qemu.args[::2], arch.qemu.args[1::2], strict=True))
    argv = [binary]
    for flag, value in ours:
        if flag not in given:
            argv += [flag, value]
    argv += ["-nodefaults", "-no-reboot", "-display", "none", "-monitor", "none"]
    if qmp is not None:
        argv += qmp_option(qmp)
    if ram_file is not None:
        argv += ["-object", f"memory-backend-file,id={RAM_ID},size={memory},mem-path={ram_file},share=on",
                 "-machine", f"memory-backend={RAM_ID}"]
    for k in range(serial):
        argv += ["-serial", f"file:{os.path.join(logs, f'serial{k}.log')}"]
    return [*argv, "-serial", "stdio", "-kernel", image, *user]


def shared_rings(ram: SharedRam, lines: list[str], cpus: int, bits: int, buffer_size: int,
                 packet_size: int | None) -> list[Ring]:
    """Each CPU's area and ring from the `area K AREA RING` lines of `shared on`, believed only as they check: every
    one inside the shared RAM and 8-byte aligned, no CPU's struct sdt_cpu inside a ring or another's, no two rings
    overlapping. ValueError naming the CPU otherwise."""
    rings = [_ring(ram, line, k, bits, buffer_size, packet_size) for k, line in enumerate(lines)]
    if len(rings) != cpus:
        raise ValueError(f"{len(rings)} rings for {cpus} CPUs")
    area = CPU.size(bits)
    for k, r in enumerate(rings):
        for j, other in enumerate(rings):
            if _overlap(r.area, area, other.ring, other.packets * other.packet_size):
                whose = "its own ring" if j == k else f"CPU {j}'s ring"
                raise ValueError(f"CPU {k}'s struct sdt_cpu at {r.area:#x} lies inside {whose} at {other.ring:#x}")
            if j < k and _overlap(r.ring, r.packets * r.packet_size, other.ring, other.packets * other.packet_size):
                raise ValueError(f"CPU {k}'s ring at {r.ring:#x} is CPU {j}'s ring at {other.ring:#x} too")
            if j < k and _overlap(r.area, area, other.area, area):  # one set of counters claimed for two rings
                raise ValueError(f"CPU {k}'s struct sdt_cpu at {r.area:#x} is CPU {j}'s at {other.area:#x} too")
    return rings


def _overlap(a: int, n: int, b: int, m: int) -> bool:
    return a < b + m and b < a + n


def _ring(ram: SharedRam, line: str, k: int, bits: int, buffer_size: int, packet_size: int | None) -> Ring:
    """One `area K AREA RING` line: CPU k's area and ring, both inside the shared RAM and 8-byte aligned. Their sizes
    are the host's when it attached the rings, else the area's (a power of two, the whole ring inside the RAM)."""
    said = parse_reply("shared", line)
    if said is None or said[1]["cpu"] != k:
        raise ValueError(f"{printable(line)!r} is not {reply_shapes('shared')} of CPU {k:x}")
    area, ring = said[1]["area"], said[1]["ring"]
    offsets = CPU.offsets(bits)
    if not ram.contains(area, CPU.size(bits)):
        raise ValueError(f"CPU {k}'s area {area:#x} is outside it")
    if area & 7:
        raise ValueError(f"CPU {k}'s struct sdt_cpu at {area:#x} is not 8-byte aligned")
    if packet_size is None:
        packet_size = ram.load(area + offsets["packet_size"], 8)
        packets = ram.load(area + offsets["packets"], 8)
        buffer_size = packets * packet_size
        if packet_size < MIN_PACKET or packet_size & (packet_size - 1) or packets < 2 or packets & (packets - 1):
            raise ValueError(f"CPU {k}'s ring says {packets} packets of {packet_size} bytes")
    if not ram.contains(ring, buffer_size):
        raise ValueError(f"CPU {k}'s ring {ring:#x} (+{buffer_size:#x}) is outside it")
    if ring & 7:
        raise ValueError(f"CPU {k}'s ring at {ring:#x} is not 8-byte aligned")
    return Ring(area, ring, buffer_size // packet_size, packet_size)


PF_W = 2  # a writable ELF segment
MAX_SOCKET = 100  # bytes of a UNIX socket's path QEMU takes (sun_path holds 108, with its NUL)
REGISTRY_SYMBOL = "sdt_session_table"  # the runtime's registry of sessions (docs/post-mortem.md)
MODULE_AREA_SYMBOL = "sdt_module_area"  # where the fixture's loader copies a module (fixtures/qemu/platform.c)
MODULE_HEADER = VALUES["SDT_MODULE_FILE_HEADER"]  # the module file's struct sdt_module_file, then zeros


class QemuTarget(ControlTarget):
    """The host's image booted on QEMU; the rings attached as the host asks when the kernel lets it."""

    # What close() stops and removes, declared here since a boot that fails part way closes what it has made.
    qemu: Child | None = None
    ram: SharedRam | None = None
    logs = ""
    saved: RamFile | None = None  # the RAM as QEMU saved it for a post-mortem (not shared)
    consumer: Consumer | None = None  # the rings read in shared RAM, once `shared on` gave their areas

    capabilities = ControlTarget.capabilities | {SALVAGES}

    def __init__(self, host: Host, *, cpus: int, buffer_size: int, overflow: str, qemu_args: list[str],
                 timeout: float, transport: str, module: str | None, own: OwnSession | None) -> None:
        from sdtgen.transport.geometry import packet_size_for

        image = host.image
        arch = image.arch
        if not 1 <= cpus <= MAX_CPUS:
            raise SdtError("", f"--cpus {cpus} is not a number of CPUs from 1 to {MAX_CPUS}")
        binary = find_qemu(arch)
        user = check_qemu_args(list(qemu_args))
        serial = control_serial(image)
        memory = user_memory(user) or memory_for(cpus, buffer_size)
        if transport not in TRANSPORTS:
            raise ValueError(transport)
        if transport == "shared" and "-m" in user and user_memory(user) is None:
            host.warning("sdtgen cannot read the -m given, so it cannot share the machine's RAM: packets go on the "
                         "serial line")
            transport = "serial"
        self.logs = tempfile.mkdtemp(prefix="sdtgen-qemu-")
        self.serial = serial
        self.ram: SharedRam | None = None
        self.memory, self.qmp = None, None
        self.expects_modules = module is not None
        try:
            extra = self._module_file(image, module) if module is not None else []
            if transport == "shared":
                self.ram = SharedRam(_ram_path(self.logs), memory, arch.qemu.ram_base)
            self.memory = None if "-m" in user and user_memory(user) is None else memory  # what pmemsave saves
            qmp = os.path.join(self.logs, "qmp")
            self.qmp = qmp if len(qmp.encode()) < MAX_SOCKET else None  # a longer path QEMU refuses, and exits
            self.qemu = Child(qemu_command(binary, arch, image.path, cpus, memory, serial, self.logs, user + extra,
                                           self.ram.path if self.ram else None, self.qmp))
            super().__init__(host, ChildChannel(self.qemu, "QEMU"), timeout=timeout, announced=True)
        except Halted as h:
            self._show_console()
            self.close()
            raise Halted(str(h), fix=h.fix or self._what_to_do(user)) from None
        except BaseException:
            self.close()
            raise
        if self.booted.cpus != cpus and "-smp" not in user:
            host.warning(f"the kernel says it has {self.booted.cpus} CPUs, QEMU was given {cpus}")
        try:
            ours = self.attach_rings(buffer_size, packet_size_for(buffer_size), overflow, memory)
            if self.ram is not None:
                self.ram.unlink()  # QEMU has it open by now
                if own is None:
                    self._share_rings(buffer_size, packet_size_for(buffer_size) if ours else None)
                else:  # the default session's rings are the kernel's to read; the host's session's come on the line
                    self.ram.close()
                    self.ram = None
            if own is not None:
                self.open_own(own)
        except BaseException:
            self.close()
            raise

    def _share_rings(self, buffer_size: int, packet_size: int | None) -> None:
        """`shared on`: the host reads each CPU's ring in the shared RAM from now on. A kernel that cannot say
        where they are keeps sending packets on the line; rings outside the RAM the host mapped are refused."""
        try:
            lines = self.command(f"{WORD['shared']} {WORD['on']}", "shared")
        except Refused as e:
            if e.code != VALUES["SDT_ERR_UNSUPPORTED"]:  # a kernel that has phys and still cannot: said, not fatal
                self.host.warning(f"the kernel refused `shared on` ({printable(e.text)}): packets go on "
                                  "the serial line")
            self.ram.close()
            self.ram = None
            return
        try:
            rings = shared_rings(self.ram, lines[:-1], self.booted.cpus, self.host.image.arch.bits, buffer_size,
                                 packet_size)
        except ValueError as e:
            self.command(f"{WORD['shared']} {WORD['off']}", "shared")
            self.host.warning(f"the kernel's rings cannot be read in the machine's memory ({e}): packets "
                              "go on the serial line")
            self.ram.close()
            self.ram = None
            return
        arch = self.host.image.arch
        self.consumer = Consumer(self.ram, arch.bits, rings, self.host.packet, self.streams)
        self.poll = self.consume_shared

    def rings(self) -> Rings | None:
        """For a post-mortem: the shared RAM (its mapping outlives QEMU) and each CPU's area as `shared on` said them;
        else the RAM saved through QEMU's monitor (pmemsave) into a file, when the image has the runtime's registry
        to find the areas by. None when neither can be read (said why)."""
        image = self.host.image
        table = image.symbols.get(REGISTRY_SYMBOL)
        registry = None
        if table is not None:
            try:
                registry = self._phys((table.value + self.bias) & self._mask)
            except ValueError:
                registry = None
        if self.ram is not None and self.consumer is not None:
            return Rings(self.ram.read, tuple(r.area for r in self.consumer.rings),
                         tuple(r.ring for r in self.consumer.rings), None, registry, self._phys)
        if registry is None or self.memory is None or self.qmp is None:
            return None
        if self.saved is None:
            out = os.path.join(self.logs, "ram")
            try:
                pmemsave(self.qmp, image.arch.qemu.ram_base, self.memory, out)
            except MonitorError as e:
                self.host.warning(f"post-mortem: QEMU could not save the machine's RAM: {e}")
                return None
            self.saved = RamFile(out, image.arch.qemu.ram_base)
        return Rings(self.saved.read, (), (), None, registry, self._phys)

    @property
    def _mask(self) -> int:
        return (1 << self.host.image.arch.bits) - 1

    def _phys(self, addr: int) -> int:
        """A kernel address as the machine's physical one: by the image's loadable segment that holds it (less how
        far the running kernel moved), else as its writable data is mapped (a kernel's memory mapped at one offset,
        as its linker script and the platform's phys say). ValueError for an image that says nothing of it."""
        at = (addr - self.bias) & self._mask
        loads = [s for s in self.host.image.elf.segments if s.type == PT_LOAD and s.memsz]
        for s in loads:
            if s.vaddr <= at < s.vaddr + s.memsz:
                return s.paddr + (at - s.vaddr)
        data = [s for s in loads if s.flags & PF_W]
        if not data:
            raise ValueError(f"{addr:#x} is in no loadable segment of the image")
        return (at - data[-1].vaddr + data[-1].paddr) & self._mask

    def consume_shared(self) -> None:
        """Every CPU's closed packets, read where the kernel wrote them."""
        for cpu in range(len(self.consumer.rings)):
            self.consumer.consume(cpu)
    def _module_file(self, image, path: str) -> list[str]:
        """The module relocated where the kernel's loader copies it (its sdt_module_area, after a header saying
        where its table and code are), as a fw_cfg file: QEMU's arguments that give it."""
        from sdtgen.modlink import flat, link_module

        area = image.symbols.get(MODULE_AREA_SYMBOL)
        if area is None or area.size < 2 * MODULE_HEADER:
            raise SdtError(image.path, f"has no {MODULE_AREA_SYMBOL}: its platform loads no modules",
                           "give it a loader as fixtures/qemu/platform.c's (module, ops.module)")
        self.module = link_module(image, path, area.value + MODULE_HEADER, area.size - MODULE_HEADER + 4096)
        header = MODULE_FILE.struct(64, image.elf.little).pack(VALUES["SDT_MODULE_FILE_MAGIC"], self.module.table,
                                                              *self.module.text, self.module.size)
        out = os.path.join(self.logs, "module")
        with open(out, "wb") as f:
            f.write(header.ljust(MODULE_HEADER, b"\0") + flat(self.module))
        if image.arch.qemu.module_in_ram:  # a fw_cfg file would not arrive (see QemuMachine.module_in_ram)
            align = VALUES["SDT_MODULE_FILE_ALIGN"]  # the kernel takes it from there (bare: a physical address)
            at = (image.symbols["_end"].value + align - 1) & -align
            return ["-device", f"loader,file={out},addr={at:#x},force-raw=on"]
        return ["-fw_cfg", f"name={STRING['SDT_MODULE_FILE_NAME']},file={out}"]

    def _what_to_do(self, user: list[str]) -> str:
        if user:
            return "check the QEMU arguments given after the image (--qemu-arg), and the kernel's console above"
        return ("give QEMU what the kernel needs with --qemu-arg (memory, -bios, disks), and see the kernel's "
                "console above")

    def _show_console(self) -> None:
        """What the kernel wrote on the serial ports before its control port: its own log."""
        for k in range(self.serial):
            path = os.path.join(self.logs, f"serial{k}.log")
            try:
                with open(path, "rb") as f:
                    text = f.read()[-4000:].decode("utf-8", "replace")
            except OSError:
                continue
            if text.strip():
                self.host.console(text)

    def close(self) -> None:
        """Power the machine off (or stop QEMU if it does not answer); nothing is left running."""
        qemu = self.qemu
        halted = self.halted
        if hasattr(self, "packets"):
            self.packets.close()
        if qemu is not None:
            status = None
            if qemu.proc.poll() is None and hasattr(self, "booted") and not halted:
                self.close_own()  # the host's session closed first: the kernel's own sessions stay whole
                status = self._power_off(qemu)
            qemu.stop()
            self.qemu = None
            arch = self.host.image.arch
            if status is not None and status not in (arch.qemu.exit_ok, 0):
                self.host.warning(f"QEMU exited with status {status} after `exit 0`, not "
                                  f"{arch.qemu.exit_ok}: the kernel did not power off cleanly")
        if halted:
            self._show_console()
        if self.ram is not None:
            self.ram.close()
            self.ram = None
        if self.saved is not None:
            self.saved.close()
            self.saved = None
        if self.logs:
            shutil.rmtree(self.logs, ignore_errors=True)

    def _power_off(self, qemu: Child) -> int | None:
        """`exit 0`, and QEMU's status once it ended; None when the kernel cannot power off."""
        try:
            self.command("exit 0", "exit", timeout=EXIT_WAIT)
        except Refused:
            return None
        except (Halted, KeyboardInterrupt):  # the machine went away as it powered off
            pass
        return qemu.wait(EXIT_WAIT)

