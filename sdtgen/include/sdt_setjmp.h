/*
 * sdt_setjmp.h - a setjmp/longjmp for kernels that run with the FPU off (docs/runtime.md, "Guarded calls").
 *
 * The control core's `guarded` op runs a call so that a fault in it comes back to the caller: the fault
 * handler jumps to where the guard started. GCC's __builtin_setjmp is not that jump in every kernel: on
 * RISC-V with the F or D extension in -march (xv6: rv64gc) it saves fs0-fs11 with fsd, and a kernel that
 * runs with sstatus.FS off takes an illegal-instruction trap there; AArch64 and x86 builds may also keep
 * FP or vector state in it. sdt_setjmp saves the integer registers the ABI says a call keeps, and nothing
 * else:
 *
 *   x86-64   rbx rbp r12-r15, rsp, the return address
 *   i386     ebx esi edi ebp, esp, the return address (the arguments on the stack whatever -mregparm says)
 *   AArch64  x19-x28, x29 (fp), x30 (lr), sp (never d8-d15: a kernel built -mgeneral-regs-only has none)
 *   RISC-V   s0-s11, ra, sp (never fs0-fs11)
 *
 * So it is right for code that keeps no value in an FP or vector register across the call, which is what
 * kernel flags (-mgeneral-regs-only, -mno-sse, an -march without F and D, or a kernel that never turns the
 * FPU on) give. It takes no signal mask and no shadow stack. Compiled from the runtime's sdt_setjmp.c (one
 * file, the four architectures' assembly), which the Makefile fragment builds into the runtime's archive: an
 * image that never calls it links none of it.
 */
#ifndef SDTGEN_SDT_SETJMP_H
#define SDTGEN_SDT_SETJMP_H

#ifdef __cplusplus
extern "C" {
#endif

/* Room for the most registers any architecture saves (RISC-V: 14), in words. */
typedef unsigned long sdt_jmp_buf[14];

#if defined(__i386__)
#define _SDT_SETJMP_ABI __attribute__((regparm(0)))	/* arguments on the stack, as the assembly reads them */
#else
#define _SDT_SETJMP_ABI
#endif

/* Save this point: 0 now, and again the value a later sdt_longjmp gives (1 for 0) when it jumps back. The
 * function that called it must not have returned by then. */
int sdt_setjmp(sdt_jmp_buf env) __attribute__((returns_twice)) _SDT_SETJMP_ABI;
/* Jump back to env's sdt_setjmp, which returns ``value`` (1 if value is 0). */
void sdt_longjmp(sdt_jmp_buf env, int value) __attribute__((noreturn)) _SDT_SETJMP_ABI;

#ifdef __cplusplus
}
#endif

#endif
