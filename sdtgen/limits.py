"""What a boot accepts, in one place. Past each limit the input is refused with one line and exit 2.

Real kernels sit far inside every limit: a handful of PT_LOAD segments, tens
of megabytes, commands and probe specs of a few dozen characters. The limits
keep a crafted image or script from costing minutes or gigabytes.
"""

MAX_SEGMENTS = 256  # PT_LOAD segments of one image (Unicorn maps each run of pages once)
MAX_SEGMENT = 256 << 20  # bytes of memory one segment may ask for
MAX_MAPPED = 512 << 20  # bytes of guest memory all segments together may ask for (bss included)
MAX_LINE = 4096  # characters of one console or script line
MAX_SPEC = 1024  # characters of one probe spec (--enable, --disable, --action, enable, list...)
MAX_SCRIPT = 1 << 20  # bytes of one --script file (or of standard input with --script -)
DEFAULT_TIMEOUT = 20.0  # seconds one --run, script or console `run` may take (--timeout)
MAX_TIMEOUT = 7 * 24 * 3600.0  # a week: what the watchdog's deadline can hold
MIN_BUFFER = 2048  # bytes of one CPU's trace buffer (--buffer-size): two packets of 1 KiB
MAX_BUFFER = 64 << 20
DEFAULT_BUFFER = 1 << 20  # sixteen 64 KiB packets per CPU
SESSION_TABLES = 64 << 10  # bytes of each CPU's aggregation tables in a --session that aggregates
MAX_RINGS = 1 << 30  # bytes of every CPU's trace buffer together (--cpus x --buffer-size)


def __getattr__(name: str) -> int:
    """MAX_CPUS, the CPUs a kernel may have (its hello, a recording's CPU numbers, what a host asks a target for): the
    C side's SDT_MAX_CPUS (sdtgen/layout.py), read when first asked for so that start-up does not import layout."""
    if name == "MAX_CPUS":
        from sdtgen.layout import VALUES

        return VALUES["SDT_MAX_CPUS"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
