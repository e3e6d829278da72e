/* x86-64: arguments in rdi, rsi, rdx, rcx, r8, r9; the encoders are x86's (sdt_x86.h). */
#define SDT_X86_WORD 8
#define SDT_X86_GOT 1	/* call/jmp *GOT(%rip) sites exist */
#include "sdt_x86.h"

const char sdt_arch_name[] = "x86_64";

sdt_word sdt_arch_arg(const struct sdt_frame *f, unsigned k, unsigned form)
{
	(void)form;
	return (sdt_word)f->arg[k];
}
