"""How bytes and commands reach a kernel: the emulator, a control core over a channel, a process."""
