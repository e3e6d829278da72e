"""Readers of the probe tables binaries already carry: USDT notes, ftrace, patchable entries, jump labels."""
