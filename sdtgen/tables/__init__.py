"""Readers of the probe tables binaries already carry: USDT notes, ftrace, patchable entries, jump labels."""

KINDS = ("stapsdt", "mcount", "patchable", "jump")  # beside sdtgen's own "sdt"; this module stays import-free
