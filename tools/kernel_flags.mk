# The kernel flags every build of sdtgen's own kernels starts from, besides each
# architecture's (`sdtgen arch NAME --get cflags`): the fixture Makefiles
# include this file, and tools/toolchain.py (the matrix, the benchmarks and the
# tests) reads the line below.
KERNEL_CFLAGS := -ffreestanding -fno-pic -O2 -fno-asynchronous-unwind-tables -fno-stack-protector -fno-common
