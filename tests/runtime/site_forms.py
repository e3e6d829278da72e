"""The probe sites each architecture's toolchain makes, for the verify tests (filled in by test_verify)."""


def site_sources(arch: str):
    return [], []
