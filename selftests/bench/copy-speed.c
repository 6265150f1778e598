// SPDX-License-Identifier: GPL-2.0
/*
 * Experiment: how fast the CPU (or its emulation) copies 4 KiB at a time with
 * `rep movsb` (what the kernel's memcpy and copy_*_user use on a CPU with FSRM),
 * `rep movsq`, a loop of 8-byte moves, and glibc's memcpy. Under QEMU's TCG the
 * first one runs a byte at a time. Build in the toolchain root and run it on the
 * host and in a guest:
 *   tools/inroot gcc -O2 -o out/copy-speed selftests/bench/copy-speed.c
 *   tools/vm --flavour plain -- out/copy-speed
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUF (1 << 20)
#define CHUNK 4096

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void copy_movsb(void *d, const void *s, size_t n)
{
	asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

static void copy_movsq(void *d, const void *s, size_t n)
{
	n /= 8;
	asm volatile("rep movsq" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

/* Four 8-byte loads, then four stores; not vectorized (the kernel has no SIMD). */
__attribute__((noinline, optimize("no-tree-vectorize")))
static void copy_loop64(void *d, const void *s, size_t n)
{
	uint64_t *dst = d;
	const uint64_t *src = s;

	for (size_t i = 0; i < n / 8; i += 4) {
		uint64_t a = src[i], b = src[i + 1], c = src[i + 2], e = src[i + 3];

		dst[i] = a;
		dst[i + 1] = b;
		dst[i + 2] = c;
		dst[i + 3] = e;
	}
}

static void copy_glibc(void *d, const void *s, size_t n)
{
	memcpy(d, s, n);
}

int main(void)
{
	static const struct {
		const char *name;
		void (*copy)(void *, const void *, size_t);
	} ways[] = {
		{ "rep movsb", copy_movsb },
		{ "rep movsq", copy_movsq },
		{ "u64 loop", copy_loop64 },
		{ "glibc", copy_glibc },
	};
	char *src = aligned_alloc(4096, BUF), *dst = aligned_alloc(4096, BUF);

	if (!src || !dst)
		return 1;
	memset(src, 1, BUF);
	memset(dst, 2, BUF);
	for (size_t w = 0; w < sizeof(ways) / sizeof(ways[0]); w++) {
		double t0 = now(), bytes = 0;

		while (now() - t0 < 1.0) {
			for (size_t off = 0; off < BUF; off += CHUNK)
				ways[w].copy(dst + off, src + off, CHUNK);
			bytes += BUF;
		}
		printf("%-10s %.0f MB/s\n", ways[w].name, bytes / (now() - t0) / 1e6);
	}
	return 0;
}
