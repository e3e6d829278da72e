"""Random program headers added to a real image: the boot maps them or refuses them in one line."""

from __future__ import annotations

import random

from crafted_images import PF_R, PF_W, PF_X, Load, with_loads

from sdtgen.cli import main


def random_loads(rng: random.Random, file_size: int) -> list[Load]:
    loads = []
    for _ in range(rng.choice([1, 2, 5, 40, 300])):
        vaddr = rng.choice([rng.randrange(0, 1 << 40), 0xFFFF_FFFF_8000_0000 + rng.randrange(-0x10000, 0x10000),
                            0xFFFF_FFFF_FFFF_F000 - rng.randrange(0, 0x10000), rng.randrange(0, 1 << 64)])
        memsz = rng.choice([0, 1, 0x1000, rng.randrange(1, 1 << 30), rng.randrange(1, 1 << 64)])
        filesz = rng.choice([0, min(memsz, 16), min(memsz, rng.randrange(0, file_size))])
        offset = rng.randrange(0, max(1, file_size - filesz))
        loads.append(Load(vaddr, memsz, rng.choice([PF_R, PF_R | PF_W, PF_R | PF_X, PF_R | PF_W | PF_X]),
                          offset=offset, filesz=filesz, align=rng.choice([0, 1, 0x1000])))
    return loads


def test_random_segments_boot_or_give_one_line(tricks, tmp_path, capsys):
    rng = random.Random(7)
    size = tricks.stat().st_size
    outcomes = set()
    for i in range(30):
        image = with_loads(tricks, tmp_path / f"fuzz{i}.elf", random_loads(rng, size), keep=rng.random() < 0.8)
        code = main(["boot", str(image), "--run", "probed:int", "--arg", "1"])
        out, err = capsys.readouterr()
        outcomes.add(code)
        assert code in (0, 1, 2), (i, code)
        if code == 2:
            assert len(err.splitlines()) == 1 and "Traceback" not in err, (i, err)
            assert err.startswith(f"{image}: error: "), (i, err)
        if code == 0:
            assert out.splitlines()[-1] == "probed(1) = 42"
    assert {0, 2} <= outcomes  # the generator makes both bootable and refused images
