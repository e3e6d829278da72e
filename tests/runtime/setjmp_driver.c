/*
 * What a guarded call asks of sdt_setjmp/sdt_longjmp, as one function check(seed): a jump back from deep
 * inside calls, the value it carries (1 for 0), the caller's callee-saved values and stack pointer as they
 * were. Built freestanding for the emulator (every architecture), and -DNATIVE_LIBC with the C library's
 * setjmp/longjmp for the answer it must give.
 */
#ifdef NATIVE_LIBC
#include <setjmp.h>
#define sdt_jmp_buf jmp_buf
#define sdt_setjmp setjmp
#define sdt_longjmp longjmp
#elif defined(GCC_BUILTIN)
/* What a port used before: GCC's own (its longjmp carries no value: only whether it faults matters). */
typedef void *sdt_jmp_buf[5];
#define sdt_setjmp(b) __builtin_setjmp(b)
#define sdt_longjmp(b, v) ((void)(v), __builtin_longjmp(b, 1))
#else
#include <sdt_setjmp.h>
#endif

static sdt_jmp_buf env;
static volatile long unwound;	/* a frame returned through: a jump back must return through none */
volatile long sink;

/* n frames deep, each keeping a dozen values in callee-saved registers across its call (so every one of them
 * holds deep's values, not its caller's, when the jump leaves), then the jump. */
__attribute__((noipa)) static long deep(long n, long a, long b, int value)	/* noipa: all of it stays */
{
	long x = a * 7 + n, y = b ^ (n << 3), z = a + b + n, u = a - b, v = a * b, w = x ^ 0x3c3c;
	long p = y * 5 + 1, q = z - 9, s = u ^ v, t = (w << 2) + n;
	long r;

	if (n == 0)
		sdt_longjmp(env, value);
	r = deep(n - 1, y, x, value);
	unwound++;
	return r + x + y + z + u + v + w + p + q + s + t + a + b;
}

__attribute__((noinline)) static long here(void)
{
	volatile char mark;

	return (long)&mark;
}

long check(long seed)
{
	/* Live across every jump below without being changed: the compiler keeps them in callee-saved
	 * registers, which the jump must give back. */
	long a = seed * 3 + 1, b = seed ^ 0x5a5a, c = seed * seed + 11, d = (seed << 4) - 7, e = seed + 1234567;
	volatile long sum = 0;	/* changed between a setjmp and its longjmp: volatile, as C asks */
	volatile int i;
	volatile long sp_before, sp_after;
	int r;

	sp_before = here();
	for (i = 0; i < 4; i++) {
		r = sdt_setjmp(env);
		if (r == 0)
			sink = deep(20 + i, a + i, b - i, i == 2 ? 0 : 40 + i);	/* value 0 comes back as 1 */
		sum = sum * 131 + r;
	}
	sp_after = here();
	return sum * 1000003 + (a ^ b) + (c * d) - e + (unwound != 0) * 77 + (sp_before != sp_after) * 99;
}

#ifdef NATIVE_LIBC
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	printf("%ld\n", check(argc > 1 ? strtol(argv[1], 0, 0) : 0));
	return 0;
}
#endif

#ifdef NATIVE_SDT
/* The x86-64 runtime's setjmp run natively, and a guarded call as a kernel makes one: the fault handler
 * (here SIGSEGV's) jumps back to where the guard started. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static sdt_jmp_buf guard;

static void on_fault(int sig)
{
	sdt_longjmp(guard, sig);
}

__attribute__((noinline)) static int read_at(volatile int *p)
{
	return *p;
}

int main(int argc, char **argv)
{
	struct sigaction sa = {0};
	volatile int faults = 0;
	int r;

	printf("%ld\n", check(argc > 1 ? strtol(argv[1], 0, 0) : 0));
	sa.sa_handler = on_fault;
	sa.sa_flags = SA_NODEFER;	/* no sigsetjmp: the handler's signal stays unblocked for the next fault */
	sigaction(SIGSEGV, &sa, 0);
	for (int i = 0; i < 3; i++) {
		r = sdt_setjmp(guard);
		if (r == 0)
			read_at((volatile int *)16);
		else
			faults++;
	}
	printf("faults %d signal %d\n", faults, r);
	return 0;
}
#endif

#ifdef BARE_RISCV
/* A RISC-V machine as it resets (QEMU virt, -bios none): M-mode, mstatus.FS off, so an FP instruction is an
 * illegal-instruction exception, as in xv6. It prints check(SEED), or the exception that ended it. */
#define UART ((volatile unsigned char *)0x10000000ul)
#define FINISHER ((volatile unsigned int *)0x100000ul)	/* virt's test device: 0x5555 powers off */

static void put(const char *s)
{
	while (*s)
		*UART = *s++;
}

static void put_dec(long v)
{
	char buf[24];
	int n = 0;
	unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;

	do
		buf[n++] = '0' + u % 10;
	while ((u /= 10));
	if (v < 0)
		put("-");
	while (n)
		*UART = buf[--n];
}

__attribute__((noreturn)) static void off(void)
{
	*FINISHER = 0x5555;
	for (;;)
		;
}

void bare_trap(void)
{
	unsigned long cause, pc;

	__asm__ volatile("csrr %0, mcause" : "=r"(cause));
	__asm__ volatile("csrr %0, mepc" : "=r"(pc));
	put("trap ");
	put_dec((long)cause);
	put("\n");
	off();
}

void bare_main(void)
{
	long v = check(SEED);

	put("check ");
	put_dec(v);
	put("\n");
	off();
}

__asm__(
	"	.text\n"
	"	.globl _start\n"
	"_start:\n"
	"	la sp, bare_stack_top\n"
	"	la t0, bare_trap_entry\n"
	"	csrw mtvec, t0\n"
	"	call bare_main\n"
	"	.p2align 2\n"
	"bare_trap_entry:\n"
	"	la sp, bare_stack_top\n"
	"	call bare_trap\n"
	"	.bss\n"
	"	.p2align 4\n"
	"	.space 16384\n"
	"bare_stack_top:\n"
	"	.text\n");
#endif
