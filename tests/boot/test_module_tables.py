"""A damaged module table, made from fixtures/module's hkm.ko by rewriting one relocation of its table (the
place readelf gives): `sdtgen check OBJ MOD.ko` refuses it in one line with exit 1 exactly when the runtime's
own loader, sdt_module_load in the emulated boot, refuses the same file; the undamaged module passes both."""

from __future__ import annotations

import io
import struct
import subprocess
from pathlib import Path

import pytest
from helpers import SDTGEN, run
from module_native import MODULE
from tables import readelf

from sdtgen.layout import VALUES
from sdtgen.session.reporter import Reporter
from sdtgen.session.session import Session
from sdtgen.targets.emulator import EmulatorTarget

RELA = 24  # bytes of an Elf64_Rela: r_offset, r_info, r_addend


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("module")
    run(["make", "-C", str(MODULE), "ARCH=x86_64", f"O={out}", f"SDTGEN={SDTGEN}"])
    return out


def rela_row(ko: Path, section: str, offset: int) -> tuple[int, tuple]:
    """The file offset of the relocation readelf lists at ``offset`` of ``section``, and readelf's row."""
    (rows,) = [r.rows for r in readelf.relocations(ko) if r.name in (f".rela{section}", f".rela.{section}")]
    i = next(i for i, r in enumerate(rows) if r[0] == offset)
    rela = next(s for s in readelf.sections(ko) if s.name in (f".rela{section}", f".rela.{section}"))
    return rela.offset + RELA * i, rows[i]


def damaged(built: Path, out: Path, edit) -> Path:
    ko = built / "hkm.ko"
    data = bytearray(ko.read_bytes())
    edit(ko, data)
    out.write_bytes(data)
    return out


def move_field(field: int, by: int):
    """The table's field at ``field`` (4 sites, 8 sites_end, 12 probes, 16 probes_end) resolved ``by`` bytes on."""
    def edit(ko: Path, data: bytearray) -> None:
        at, row = rela_row(ko, "sdt_module_table", field)
        struct.pack_into("<q", data, at + 16, row[3] + by)
    return edit


def flip_magic(ko: Path, data: bytearray) -> None:
    data[readelf.section(ko, "sdt_module_table").offset] ^= 0xFF


def to_field(field: int, other: int):
    """The table's field at ``field`` made to name what the field at ``other`` names (its symbol and addend)."""
    def edit(ko: Path, data: bytearray) -> None:
        at, _ = rela_row(ko, "sdt_module_table", field)
        src, _ = rela_row(ko, "sdt_module_table", other)
        data[at + 8:at + RELA] = data[src + 8:src + RELA]
    return edit


DAMAGE = {
    "magic flipped": (flip_magic, "magic is"),
    "sites_end 64 KiB past the sites": (move_field(8, 0x10000), "sites_end is 0x10000 bytes past"),
    "sites_end before the sites": (move_field(8, -0x40), "sites_end is 0x40 bytes before"),
    "sites with no probes": (to_field(16, 12), "probes_end is 0x108 bytes before"),
}


def loader_says(kernel_image: str, ko: Path) -> int:
    """What sdt_module_load returns for ``ko`` in the emulated boot, placed as the boot's loader places it."""
    from sdtgen.boot.module import link_module

    s = Session(kernel_image, Reporter(as_json=True, out=io.StringIO()),
                lambda s: EmulatorTarget(s, buffer_size=s.buffer_size, overflow="drop", modules=True))
    try:
        t = s.target
        linked = link_module(t.image, str(ko), t.module_base)
        for addr, data, _ in linked.segments:
            t.machine.write(addr, data)
        return t.runtime.call(t.machine, "sdt_module_load", [t.module_struct(), linked.table, *linked.text])
    finally:
        s.close()


def check(built: Path, ko: Path) -> subprocess.CompletedProcess:
    return run([SDTGEN, "check", str(built / "mod.o"), str(ko)], check=False)


def test_the_undamaged_module_passes_check_and_loads(built, kernel):
    assert check(built, built / "hkm.ko").returncode == 0
    assert loader_says(str(kernel.image), built / "hkm.ko") == 3


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_check_refuses_in_one_line_what_the_loader_refuses(built, kernel, tmp_path, damage):
    edit, said = DAMAGE[damage]
    ko = damaged(built, tmp_path / "bad.ko", edit)
    assert loader_says(str(kernel.image), ko) == VALUES["SDT_ERR_MODULE_TABLE"]  # the truth: the runtime's loader
    proc = check(built, ko)
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln and "in short:" not in ln]
    assert len(errors) == 1 and errors[0].startswith(f"{ko}: error: its module table's ") and said in errors[0], \
        proc.stderr
    assert "stable" not in proc.stdout
