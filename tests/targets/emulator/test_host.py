"""The host process under an address-space limit (the kernel's RLIMIT_AS, as `ulimit -v` sets it): 64 CPUs
fit in what one engine with Unicorn's default translation cache would take, and a boot that cannot fit is
one line and exit 2, never Unicorn's own exit from C."""

from __future__ import annotations

import re
import resource
import subprocess

from helpers import SDTGEN

MIB = 1 << 20


def boot_under(limit_mib: int, image, *args: str) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mib * MIB, limit_mib * MIB))

    return subprocess.run([SDTGEN, "boot", str(image), *args], capture_output=True, text=True, preexec_fn=limit,
                          timeout=300)


def test_sixty_four_cpus_boot_in_less_address_space_than_one_default_engine(kernel):
    """Unicorn reserves 1 GiB for an engine's translation cache unless told; 64 CPUs in 1.5 GiB."""
    proc = boot_under(1536, kernel.image, "--cpus", "64", "--enable", ":::", "--run", "kmain", "--arg", "1", "-q")
    assert proc.returncode == 0, proc.stderr
    returned = [ln for ln in proc.stdout.splitlines() if re.fullmatch(r"cpu\d+ kmain\(1\) = \d+", ln)]
    assert len(returned) == 64  # the fixture's kmain shares state, so the values race; every CPU returns


def test_a_boot_that_cannot_fit_is_refused_in_one_line(kernel):
    proc = boot_under(400, kernel.image, "--cpus", "64", "--run", "kmain", "--arg", "1")
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{kernel.image}: error: --cpus 64 needs about ") and "ulimit -v" in line
    assert line.endswith("; give fewer --cpus or a smaller --buffer-size, or raise the limit")
