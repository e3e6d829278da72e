/*
 * deny - run a command under a seccomp filter that refuses what hardened kernels refuse: any mmap or
 * mprotect asking for memory writable and executable at once (wx), or memfd_create (memfd), or both.
 *
 *   deny wx|memfd|both COMMAND [ARG...]
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARG2_LOW (offsetof(struct seccomp_data, args) + 2 * sizeof(__u64))	/* prot, little-endian */
#define REFUSE (SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA))

int main(int argc, char **argv)
{
	int wx, memfd;

	if (argc < 3) {
		fprintf(stderr, "usage: deny wx|memfd|both COMMAND [ARG...]\n");
		return 2;
	}
	wx = !strcmp(argv[1], "wx") || !strcmp(argv[1], "both");
	memfd = !strcmp(argv[1], "memfd") || !strcmp(argv[1], "both");
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, memfd ? REFUSE : SECCOMP_RET_ALLOW),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 3, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mprotect, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pkey_mprotect, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG2_LOW),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, PROT_WRITE | PROT_EXEC),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_WRITE | PROT_EXEC, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, wx ? REFUSE : SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(filter) / sizeof(filter[0]), filter};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) {
		perror("deny: seccomp");
		return 2;
	}
	execvp(argv[2], argv + 2);
	perror("deny: exec");
	return 127;
}
