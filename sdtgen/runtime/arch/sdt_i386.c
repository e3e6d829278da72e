/* i386: cdecl arguments on the stack; the encoders are x86's (sdt_x86.h). */
#define SDT_X86_WORD 4
#define SDT_X86_GOT 0	/* no RIP-relative addressing, so no GOT-slot branches */
#include "sdt_x86.h"

const char sdt_arch_name[] = "i386";

sdt_word sdt_arch_arg(const struct sdt_frame *f, unsigned k, unsigned form)
{
	/* At a call [esp] is the first argument; at a (conditional) tail jump [esp] is the return address. */
	sdt_word sp = (sdt_word)f->sp + (form == SDT_FORM_TAIL || form == SDT_FORM_COND ? 4 : 0);

	return ((const sdt_word *)sp)[k];
}
