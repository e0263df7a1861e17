/*
 * verifier_stats.so: what the kernel's verifier went through for each BPF
 * program a process loads, written to $VERIFIER_STATS_DIR/<program>.log.
 *
 * In: every BPF_PROG_LOAD the process makes through libc's syscall() (aya's
 * way) that asks for no log. Out: the same load, asked for the verifier's
 * statistics (log level 4: instructions processed, peak states, time,
 * stack depth per function), or its whole log with VERIFIER_STATS_LEVEL=2
 * (tens of MB a program: which lines it checked how often). aya keeps a
 * verifier log only when a load fails; this is for the ones that succeed.
 *
 *   gcc -O2 -shared -fPIC -o /tmp/verifier_stats.so benches/tools/verifier_stats.c -ldl
 *   mkdir /tmp/vs; VERIFIER_STATS_DIR=/tmp/vs LD_PRELOAD=/tmp/verifier_stats.so \
 *       sysprof record -a -d 1 -o /tmp/r.json.gz
 *   grep -r '^processed' /tmp/vs
 *
 * A measuring tool, not part of sysprof: ARCHITECTURE 79 has what it found.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/bpf.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

/* Per thread: sysprof loads programs from several threads at once. */
static __thread char *log_buf;
#define LOG_SIZE (1u << 29)

long syscall(long number, ...)
{
	static long (*real)(long, ...);
	long a[6];
	va_list ap;

	va_start(ap, number);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	if (number == SYS_bpf && a[0] == BPF_PROG_LOAD && ((union bpf_attr *)a[1])->log_level == 0) {
		union bpf_attr *asked = (union bpf_attr *)a[1], attr;
		const char *dir = getenv("VERIFIER_STATS_DIR"), *level = getenv("VERIFIER_STATS_LEVEL");
		char path[256];
		long ret;
		FILE *out;

		memset(&attr, 0, sizeof(attr));
		memcpy(&attr, asked, (size_t)a[2] < sizeof(attr) ? (size_t)a[2] : sizeof(attr));
		if (!log_buf && !(log_buf = malloc(LOG_SIZE)))
			return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
		log_buf[0] = 0;
		attr.log_level = level ? (uint32_t)atoi(level) : 4;
		attr.log_buf = (uint64_t)(uintptr_t)log_buf;
		attr.log_size = LOG_SIZE;
		ret = real(number, a[0], (long)&attr, (long)sizeof(attr), a[3], a[4], a[5]);
		snprintf(path, sizeof(path), "%s/%s.log", dir ? dir : "/tmp",
			 asked->prog_name[0] ? asked->prog_name : "unnamed");
		if ((out = fopen(path, "a"))) {
			fprintf(out, "load returned %ld\n%s\n", ret, log_buf);
			fclose(out);
		}
		return ret;
	}
	return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
