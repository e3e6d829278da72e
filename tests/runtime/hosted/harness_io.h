/* Memory and files for the hosted test programs (sessions.c, snapshot.c): what they give the runtime, zeroed and
 * 64-byte aligned, a program file read whole, and what they dump for the test to read. Any failure ends the program: a test harness has no one to tell. */
#ifndef HARNESS_IO_H
#define HARNESS_IO_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *memory(unsigned long bytes)
{
	void *p = aligned_alloc(64, (bytes + 63) & ~63ul);

	if (!p)
		abort();
	memset(p, 0, bytes);
	return p;
}

static void *file(const char *path, unsigned long *size)
{
	FILE *f = fopen(path, "rb");
	void *p;

	if (!f)
		abort();
	fseek(f, 0, SEEK_END);
	*size = (unsigned long)ftell(f);
	rewind(f);
	p = memory(*size + 8);
	if (fread(p, 1, *size, f) != *size)
		abort();
	fclose(f);
	return p;
}

static const char *dir;	/* where dump writes: the program's first argument */

/* ``n`` bytes at ``p`` written to DIR/NAME_K. */
static void dump(const char *name, unsigned k, const void *p, unsigned long n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s_%u", dir, name, k);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f))
		abort();
}

#endif
