"""sdtgen: zero-cost statically defined tracing probes for kernel-style C builds."""

__version__ = "0.1.0"
