/*
 * sdt_arch.h - what the runtime asks of an architecture (the hook layer).
 *
 * One file per architecture implements it: arch/sdt_<arch>.c. Everything
 * else in the runtime is the same C on every CPU. Encoders never guess: a
 * site is written only after sdt_arch_verify() recognised the instruction
 * that is there, and every encoding is checked against GNU as and Capstone
 * (tests/runtime/test_encoders.py).
 */
#ifndef SDTGEN_SDT_ARCH_H
#define SDTGEN_SDT_ARCH_H

#include "sdt_runtime.h"

#define SDT_SITE_MAX 16	/* bytes of the longest site any architecture has */

/*
 * The length of the instruction of ``form`` that goes to ``stub`` and that
 * ``code`` (the bytes at ``site``, ``length`` of them as the table says)
 * starts with; 0 when it is anything else. A linker that relaxes calls
 * (RISC-V) may have made it shorter than ``length``. ``*keep`` receives
 * what the encoders need to rebuild the original later (x86: a jcc's
 * condition byte), stored in the site entry's reserved byte.
 */
unsigned sdt_arch_verify(const sdt_u8 *code, sdt_word site, unsigned form, unsigned length, sdt_word stub,
			 sdt_u8 *keep);

/*
 * The bytes of a verified site of ``form`` and ``size`` in ``state`` (OFF,
 * TRAP or BRANCH) into ``out``; 0 when that state has no encoding here (a
 * recorder out of branch range), else ``size``. ``stub`` and ``recorder``
 * are the probe's, ``keep`` what sdt_arch_verify() kept.
 */
unsigned sdt_arch_encode(sdt_u8 *out, unsigned form, unsigned size, unsigned state, sdt_word site, sdt_word stub,
			 sdt_word recorder, sdt_u8 keep);

/*
 * Whether the disabled form of every site of ``form`` is the same bytes for
 * the same size (not depending on the site's address, stub or ``keep``):
 * sdt_init then encodes it once for a run of such sites, not once a site.
 */
int sdt_arch_off_is_fixed(unsigned form);

/* sdtgen's name of the architecture (x86_64, i386, aarch64, riscv64): what the control core's hello says. */
extern const char sdt_arch_name[];

/* The breakpoint the patch protocol puts over a site's first bytes while it writes the rest. */
extern const sdt_u8 sdt_arch_bp[];
extern const unsigned sdt_arch_bp_len;
/* The width of the stores that write the bytes behind that breakpoint (x86: 1; RISC-V: 2). */
extern const unsigned sdt_arch_tail_unit;

/*
 * Whether the change of bytes ``lo``..``hi`` (offsets in a ``size``-byte site
 * at ``site``) is one store that every other CPU's instruction fetch sees
 * whole, old or new: its offset in ``*at`` and width in ``*width`` (1, 2 or 4).
 */
int sdt_arch_single_store(sdt_word site, unsigned size, unsigned lo, unsigned hi, unsigned *at, unsigned *width);

/* Whether ``code`` (at a site) starts with a breakpoint of the runtime's (armed or transient). */
int sdt_arch_is_breakpoint(const sdt_u8 *code);

/* The address of the breakpoint that trapped with ``f->pc``. */
sdt_word sdt_arch_trap_address(const struct sdt_frame *f);

/* Probe argument ``k`` as it is just before a site of ``form`` executes. */
sdt_word sdt_arch_arg(const struct sdt_frame *f, unsigned k, unsigned form);

/* Make the frame do what a call to ``target`` returning to ``ret`` would. */
void sdt_arch_emulate_call(struct sdt_frame *f, sdt_word target, sdt_word ret);
/* Make the frame return from the current function (an armed or disabled tail site). */
void sdt_arch_emulate_return(struct sdt_frame *f);
/* An is-enabled check's result register. */
void sdt_arch_set_result(struct sdt_frame *f, sdt_word value);
/* Whether a conditional tail site (form COND, ``keep`` from verify) would jump, with f's flags. */
int sdt_arch_cond_taken(const struct sdt_frame *f, sdt_u8 keep);

#endif
