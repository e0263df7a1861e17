/*
 * jit: a tiny JIT, as CPython's -X perf_jit is one. It copies a trampoline
 * into executable memory (`sub $8,%rsp; call *%rdi; add $8,%rsp; ret`: no
 * frame pointer) and describes it in ./jit-PID.dump, perf's jitdump format,
 * with a JIT_CODE_UNWINDING_INFO record (an .eh_frame with one FDE, and its
 * .eh_frame_hdr) before its JIT_CODE_LOAD ("jit_trampoline"). Then
 * main -> run_jit -> [jit_trampoline] -> hot_spin spins for argv[1] seconds
 * of CPU. Built without frame pointers, so only the unwind table lets a
 * profiler walk from hot_spin through the JIT code to main. Prints "pid=".
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds = 1.0;
static volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void hot_spin(void)
{
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	while (cpu_ns() < end)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i;
}

static const unsigned char trampoline[] = {
	0x48, 0x83, 0xec, 0x08, /* sub $8, %rsp */
	0xff, 0xd7,             /* call *%rdi */
	0x48, 0x83, 0xc4, 0x08, /* add $8, %rsp */
	0xc3,                   /* ret */
};

typedef void (*jitted)(void (*)(void));
static jitted code;

__attribute__((noinline)) void run_jit(void)
{
	code(hot_spin);
	__asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void put(unsigned char **p, const void *v, size_t n)
{
	memcpy(*p, v, n);
	*p += n;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = atof(argv[1]);
	size_t size = sizeof(trampoline);
	code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy((void *)code, trampoline, size);
	uint64_t a = (uint64_t)code;
	uint64_t r = (size + 7) & ~7ULL; /* the eh_frame lies at a + r */

	/* .eh_frame: a CIE (24 bytes) and an FDE (24 bytes). */
	unsigned char eh[48] = { 0 }, *p = eh;
	uint32_t u32;
	int32_t s32;
	u32 = 20; put(&p, &u32, 4);                       /* CIE length */
	u32 = 0; put(&p, &u32, 4);                        /* CIE id */
	*p++ = 1;                                         /* version */
	put(&p, "zR", 3);                                 /* augmentation */
	*p++ = 1;                                         /* code alignment */
	*p++ = 0x78;                                      /* data alignment -8 */
	*p++ = 16;                                        /* return address: rip */
	*p++ = 1;                                         /* augmentation length */
	*p++ = 0x1b;                                      /* FDE pointers: pcrel sdata4 */
	*p++ = 0x0c; *p++ = 7; *p++ = 8;                  /* def_cfa rsp+8 */
	*p++ = 0x90; *p++ = 1;                            /* rip at cfa-8 */
	p = eh + 24;
	u32 = 20; put(&p, &u32, 4);                       /* FDE length */
	u32 = 28; put(&p, &u32, 4);                       /* back to the CIE */
	s32 = (int32_t)(a - (a + r + 32)); put(&p, &s32, 4); /* pc_begin, pc-relative */
	u32 = size; put(&p, &u32, 4);                     /* pc_range */
	*p++ = 0;                                         /* augmentation length */
	*p++ = 0x44;                                      /* advance 4: after sub */
	*p++ = 0x0e; *p++ = 16;                           /* cfa = rsp+16 */
	*p++ = 0x46;                                      /* advance 6: after add */
	*p++ = 0x0e; *p++ = 8;                            /* cfa = rsp+8 */

	/* .eh_frame_hdr, right after the .eh_frame. */
	unsigned char hdr[20], *q = hdr;
	*q++ = 1; *q++ = 0x1b; *q++ = 0x03; *q++ = 0x3b;
	s32 = -(int32_t)(sizeof(eh) + 4); put(&q, &s32, 4);  /* eh_frame_ptr */
	u32 = 1; put(&q, &u32, 4);                            /* fde count */
	s32 = -(int32_t)(r + sizeof(eh)); put(&q, &s32, 4);   /* initial location, datarel */
	s32 = -(int32_t)(sizeof(eh) - 24); put(&q, &s32, 4);  /* the FDE, datarel */

	char path[64];
	snprintf(path, sizeof(path), "jit-%d.dump", getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
	if (fd < 0)
		return 2;
	/* The header: magic, version, size, e_machine, pad, pid, timestamp, flags. */
	struct {
		uint32_t magic, version, total_size, elf_mach, pad1, pid;
		uint64_t timestamp, flags;
	} h = { 0x4A695444, 1, 40, EM_X86_64, 0, (uint32_t)getpid(), (uint64_t)now_ns(), 0 };
	if (write(fd, &h, sizeof(h)) != sizeof(h))
		return 3;
	/* Mapped executable, as JITs do, so profilers find the file. */
	if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED)
		return 4;
	/* JIT_CODE_UNWINDING_INFO: unwinding_size, eh_frame_hdr_size, mapped_size, data. */
	unsigned char rec[512], *w = rec;
	uint64_t total = sizeof(eh) + sizeof(hdr), hdr_size = sizeof(hdr), mapped = (total + 15) & ~15ULL;
	uint32_t id = 4, rsize = (uint32_t)((16 + 24 + total + 7) & ~7ULL);
	uint64_t ts = now_ns();
	memset(rec, 0, sizeof(rec));
	put(&w, &id, 4); put(&w, &rsize, 4); put(&w, &ts, 8);
	put(&w, &total, 8); put(&w, &hdr_size, 8); put(&w, &mapped, 8);
	put(&w, eh, sizeof(eh)); put(&w, hdr, sizeof(hdr));
	if (write(fd, rec, rsize) != rsize)
		return 5;
	/* JIT_CODE_LOAD: pid, tid, vma, code_addr, code_size, code_index, name, code. */
	const char *name = "jit_trampoline";
	w = rec;
	id = 0;
	rsize = (uint32_t)(16 + 40 + strlen(name) + 1 + size);
	uint32_t pid = getpid(), tid = syscall(SYS_gettid);
	uint64_t index = 1, sz = size;
	put(&w, &id, 4); put(&w, &rsize, 4); put(&w, &ts, 8);
	put(&w, &pid, 4); put(&w, &tid, 4); put(&w, &a, 8); put(&w, &a, 8); put(&w, &sz, 8); put(&w, &index, 8);
	put(&w, name, strlen(name) + 1); put(&w, trampoline, size);
	if (write(fd, rec, rsize) != rsize)
		return 6;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	/* Let the profiler read the dump (it polls it every few ms). */
	usleep(100000);
	run_jit();
	return 0;
}
