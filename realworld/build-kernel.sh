#!/usr/bin/env bash
# Build a small real Linux kernel (Debian's linux-source-6.1, tinyconfig plus ftrace and
# jump labels) into build/realworld, keeping vmlinux and vmlinux.o for the comparisons.
# Skips work already done: a second run only re-runs the comparisons.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build/realworld
TARBALL=${LINUX_SOURCE:-/usr/src/linux-source-6.1.tar.xz}
SRC=$OUT/linux-source-6.1
if [ ! -f "$TARBALL" ]; then
	echo "realworld: $TARBALL is missing; apt-get install linux-source-6.1 flex bison bc libelf-dev libssl-dev" >&2
	exit 2
fi
mkdir -p "$OUT"
if [ ! -f "$SRC/Makefile" ]; then
	echo "== Unpacking $TARBALL"
	tar -C "$OUT" -xf "$TARBALL"
fi
if [ ! -f "$SRC/.config" ]; then
	echo "== Configuring: tinyconfig + FUNCTION_TRACER, DYNAMIC_FTRACE, JUMP_LABEL"
	make -C "$SRC" -s ARCH=x86_64 tinyconfig
	"$SRC/scripts/config" --file "$SRC/.config" --enable FTRACE --enable FUNCTION_TRACER \
		--enable DYNAMIC_FTRACE --enable JUMP_LABEL
	make -C "$SRC" -s ARCH=x86_64 olddefconfig
	for opt in FUNCTION_TRACER DYNAMIC_FTRACE JUMP_LABEL; do
		grep -q "^CONFIG_$opt=y" "$SRC/.config" || { echo "realworld: CONFIG_$opt did not stay set" >&2; exit 2; }
	done
fi
if [ ! -f "$SRC/vmlinux" ]; then
	echo "== Building vmlinux (several minutes)"
	make -C "$SRC" -s ARCH=x86_64 -j"${JOBS:-2}" vmlinux
fi
ls -l "$SRC/vmlinux" "$SRC/vmlinux.o"
