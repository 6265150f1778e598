// SPDX-License-Identifier: GPL-2.0
/*
 * What single instructions cost on this CPU (under QEMU's TCG, the test guests'),
 * in nanoseconds: an instruction count (tools/insn-count) says how much code ran,
 * this says which instructions it does not weigh fairly. Run in a guest:
 *   tools/vm -- bash -c 'gcc -O2 -o /tmp/t tools/insn-count/tcg-cost.c && /tmp/t'
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static char src[65536], dst[65536];
static volatile uint64_t sink;

#define MEASURE(name, per, n, ...)                                             \
	do {                                                                    \
		double t0 = now_ns();                                           \
		for (long i = 0; i < (n); i++) {                                \
			__VA_ARGS__;                                                 \
		}                                                               \
		double dt = now_ns() - t0;                                      \
		printf("%-40s %10.1f ns per %s\n", name, dt / (n), per);        \
	} while (0)

static void rep_movsb(void *d, const void *s, size_t n)
{
	asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

static void rep_stosb(void *d, size_t n)
{
	asm volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(0) : "memory");
}

/* The same bytes moved by ordinary 8-byte loads and stores. */
static void mov_loop(void *d, const void *s, size_t n)
{
	uint64_t *dq = d;
	const uint64_t *sq = s;
	for (size_t i = 0; i < n / 8; i++) {
		uint64_t v;
		asm volatile("mov (%1), %0" : "=r"(v) : "r"(sq + i) : "memory");
		asm volatile("mov %1, (%0)" : : "r"(dq + i), "r"(v) : "memory");
	}
}

int main(void)
{
	const long n = 200000;
	uint64_t x = 1;

	MEASURE("100 dependent adds", "100 adds", n, {
		for (int k = 0; k < 100; k++)
			asm volatile("add $1, %0" : "+r"(x));
	});
	sink = x;
	for (size_t len = 64; len <= 4096; len *= 4) {
		char name[64];
		snprintf(name, sizeof(name), "rep movsb %zu B", len);
		MEASURE(name, "copy", n / 4, rep_movsb(dst, src, len));
		snprintf(name, sizeof(name), "8-byte mov loop %zu B", len);
		MEASURE(name, "copy", n / 4, mov_loop(dst, src, len));
		snprintf(name, sizeof(name), "rep stosb %zu B", len);
		MEASURE(name, "fill", n / 4, rep_stosb(dst, len));
	}
	MEASURE("rdtsc", "rdtsc", n, {
		uint32_t lo, hi;
		asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
		sink = lo;
	});
	MEASURE("pause", "pause", n, asm volatile("pause"));
	MEASURE("lock add", "op", n, asm volatile("lock addq $1, %0" : "+m"(sink)));
	MEASURE("mfence", "op", n, asm volatile("mfence" ::: "memory"));
	MEASURE("indirect call (function pointer)", "call", n, {
		static void (*volatile fp)(void *, size_t) = rep_stosb;
		fp(dst, 0);
	});
	MEASURE("getppid system call", "call", n / 10, syscall(SYS_getppid));
	return 0;
}
