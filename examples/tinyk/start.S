/*
 * tinyk's entry, under OpenSBI on QEMU's RISC-V virt machine: S-mode, at 0x80200000, a0 the hart id.
 * OpenSBI may start every hart here at once, or only one (the others are then started through SBI's
 * HSM extension, and arrive here too): the first to take the lottery boots the kernel, the others
 * wait until it lets them go. One trap vector: the registers go on the interrupted stack as r[32]
 * (r[0] holds sepc, r[2] the interrupted sp), tinyk_trap() may change them, they come back from there.
 * sstatus is kept beside them: a breakpoint taken inside the clock's interrupt handler (a probe there)
 * overwrites SPIE and SPP, and the handler's own sret must return with the interrupted code's.
 */
#define STACK 16384
#define MAX_HARTS 8

	.section .text.entry, "ax"
	.globl _start
_start:
	csrw	sie, zero
	la	t0, trap_entry
	csrw	stvec, t0
	li	t1, MAX_HARTS
	bgeu	a0, t1, park
	la	sp, stacks
	li	t1, STACK
	addi	t2, a0, 1
	mul	t1, t1, t2
	add	sp, sp, t1
	la	t0, lottery
	li	t1, 1
	amoswap.w.aq t1, t1, (t0)
	bnez	t1, wait
	la	t0, __bss_start
	la	t1, __bss_end
1:	bgeu	t0, t1, 2f
	sd	zero, 0(t0)
	addi	t0, t0, 8
	j	1b
2:	call	tinyk_main
park:	wfi
	j	park

wait:
	la	t0, released
1:	lw	t1, 0(t0)
	beqz	t1, 1b
	fence	r, rw
	call	tinyk_secondary
	j	park

	.align 4
trap_entry:
	addi	sp, sp, -272
	sd	x1, 8(sp)
	sd	x3, 24(sp)
	sd	x4, 32(sp)
	sd	x5, 40(sp)
	sd	x6, 48(sp)
	sd	x7, 56(sp)
	sd	x8, 64(sp)
	sd	x9, 72(sp)
	sd	x10, 80(sp)
	sd	x11, 88(sp)
	sd	x12, 96(sp)
	sd	x13, 104(sp)
	sd	x14, 112(sp)
	sd	x15, 120(sp)
	sd	x16, 128(sp)
	sd	x17, 136(sp)
	sd	x18, 144(sp)
	sd	x19, 152(sp)
	sd	x20, 160(sp)
	sd	x21, 168(sp)
	sd	x22, 176(sp)
	sd	x23, 184(sp)
	sd	x24, 192(sp)
	sd	x25, 200(sp)
	sd	x26, 208(sp)
	sd	x27, 216(sp)
	sd	x28, 224(sp)
	sd	x29, 232(sp)
	sd	x30, 240(sp)
	sd	x31, 248(sp)
	addi	t0, sp, 272
	sd	t0, 16(sp)
	csrr	t0, sepc
	sd	t0, 0(sp)
	csrr	t0, sstatus
	sd	t0, 256(sp)
	csrr	a0, scause
	csrr	a1, stval
	mv	a2, sp
	call	tinyk_trap
	ld	t0, 256(sp)
	csrw	sstatus, t0
	ld	t0, 0(sp)
	csrw	sepc, t0
	ld	x1, 8(sp)
	ld	x3, 24(sp)
	ld	x4, 32(sp)
	ld	x5, 40(sp)
	ld	x6, 48(sp)
	ld	x7, 56(sp)
	ld	x8, 64(sp)
	ld	x9, 72(sp)
	ld	x10, 80(sp)
	ld	x11, 88(sp)
	ld	x12, 96(sp)
	ld	x13, 104(sp)
	ld	x14, 112(sp)
	ld	x15, 120(sp)
	ld	x16, 128(sp)
	ld	x17, 136(sp)
	ld	x18, 144(sp)
	ld	x19, 152(sp)
	ld	x20, 160(sp)
	ld	x21, 168(sp)
	ld	x22, 176(sp)
	ld	x23, 184(sp)
	ld	x24, 192(sp)
	ld	x25, 200(sp)
	ld	x26, 208(sp)
	ld	x27, 216(sp)
	ld	x28, 224(sp)
	ld	x29, 232(sp)
	ld	x30, 240(sp)
	ld	x31, 248(sp)
	ld	sp, 16(sp)
	sret

	.data
	.align 2
lottery:
	.word	0
	.globl released
released:
	.word	0

	.bss
	.align 4
stacks:
	.space	STACK * MAX_HARTS

	.section .note.GNU-stack, "", %progbits
