/*
 * The control harness (control_harness.c) as a program, built with AddressSanitizer: its first line says where
 * harness_sum, harness_buffer and the program memory are; then every line of standard input
 * goes to sdt_control_input as it came, and every reply line to standard output. A read or write one byte past
 * any of the core's buffers ends it with ASan's report.
 */
#include <stdio.h>
#include <string.h>

int harness_start(void);
void harness_input(const char *data, unsigned long len);
const char *harness_replies(unsigned long *len);
long harness_sum(long a, long b, long c, long d, long e, long f);
extern unsigned char harness_buffer[];
void *harness_program_memory(void);

int main(void)
{
	static char data[1 << 16];
	unsigned long n, k;
	const char *out;

	if (harness_start())
		return 2;
	for (k = 0; k < MAX_READ_BYTES; k++)
		harness_buffer[k] = (unsigned char)(k * 7 + 1);
	printf("sum %lx buffer %lx programs %lx\n", (unsigned long)harness_sum, (unsigned long)harness_buffer,
	       (unsigned long)harness_program_memory());
	fflush(stdout);
	n = fread(data, 1, sizeof(data), stdin);
	harness_input(data, n);
	out = harness_replies(&k);
	fwrite(out, 1, k, stdout);
	return 0;
}
