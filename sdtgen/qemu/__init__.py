"""The kernel on QEMU: the serial transport's host side, QEMU as a boot (`sdtgen qemu`), and `sdtgen record`."""
