// SPDX-License-Identifier: GPL-2.0
/*
 * Guest instruction counter for QEMU's TCG (a plugin: qemu -plugin file=...so,dir=D).
 *
 * Why: under emulation a guest's time goes roughly with the instructions it runs, and
 * an instruction count does not move with the host's load the way a latency figure
 * does. The plugin counts, for every translated block, how often each vCPU ran it;
 * when the guest asks (by creating D/snap-req-K in a directory it shares with the
 * host), it writes the counts so far to D/snap-K.txt. Two snapshots around a
 * workload, minus each other, are that workload's instructions, block by block;
 * tools/insn-count/fold.py maps blocks to the guest's symbols. With sample_us=N it
 * also samples, every N us of host time, the block each vCPU is in.
 *
 * QEMU's plugin header is not shipped by Debian, so the handful of entry points used
 * here are declared below, as QEMU 11's binary calls them (API level 7).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
/* At API level 7 (QEMU 11) a translation callback is given the block first; what
 * follows it is not used here. */
typedef void (*tb_trans_cb)(struct qemu_plugin_tb *tb, void *unused);
typedef void (*vcpu_udata_cb)(unsigned int vcpu_index, void *userdata);
typedef void (*udata_cb)(qemu_plugin_id_t id, void *userdata);
enum { CB_NO_REGS = 0 };

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, vcpu_udata_cb cb,
					  int flags, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb cb, void *userdata);

/* The API level this plugin was written against; QEMU refuses a level outside the
 * range it supports (overridable at build time: -DPLUGIN_API_LEVEL=N). */
#ifndef PLUGIN_API_LEVEL
#define PLUGIN_API_LEVEL 7
#endif
__attribute__((visibility("default"))) int qemu_plugin_version = PLUGIN_API_LEVEL;

#define MAX_VCPUS 4
#define TABLE_BITS 21 /* 2M blocks: a booted kernel and a few programs use ~10^5 */

/* One translated block, keyed by its start address and length (user-space blocks of
 * different processes can share an address; a re-translation finds its entry). */
struct block {
	uint64_t vaddr;
	uint32_t insns;
	bool used;
	uint64_t runs[MAX_VCPUS]; /* written by that vCPU's thread only */
	uint64_t samples;         /* written by the sampler thread only */
};

static struct block *table;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER; /* guards inserts */
static char dir[4096];
static bool table_full;

static struct block *block_for(uint64_t vaddr, uint32_t insns)
{
	uint64_t mask = (1ull << TABLE_BITS) - 1;
	uint64_t i = ((vaddr ^ (vaddr >> 29)) * 0x9e3779b97f4a7c15ull + insns) >> (64 - TABLE_BITS);
	struct block *b = NULL;

	pthread_mutex_lock(&table_lock);
	for (uint64_t probe = 0; probe <= mask; probe++) {
		struct block *c = &table[(i + probe) & mask];
		if (!c->used) {
			c->used = true;
			c->vaddr = vaddr;
			c->insns = insns;
			b = c;
			break;
		}
		if (c->vaddr == vaddr && c->insns == insns) {
			b = c;
			break;
		}
		if (probe > 4096) /* a near-full table: stop counting new blocks */
			break;
	}
	if (!b)
		table_full = true;
	pthread_mutex_unlock(&table_lock);
	return b;
}

/* The block each vCPU entered last: what the sampler finds it running (a block
 * that runs long, on an instruction the emulator executes slowly such as a string
 * copy, or a helper it calls, is found more often than its instructions say). */
static struct block *volatile current[MAX_VCPUS];
static unsigned int sample_us; /* 0: no sampling */

static void on_exec(unsigned int vcpu, void *userdata)
{
	struct block *b = userdata;
	b->runs[vcpu % MAX_VCPUS]++;
	current[vcpu % MAX_VCPUS] = b;
}

static void on_translate(struct qemu_plugin_tb *tb, void *unused)
{
	struct block *b = block_for(qemu_plugin_tb_vaddr(tb), qemu_plugin_tb_n_insns(tb));
	(void)unused;
	if (b)
		qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, CB_NO_REGS, b);
}

/* Writes every block that ran so far: "vaddr insns runs" (hex address, decimal rest),
 * to a temporary name first so the guest never reads half a file. */
static void write_snapshot(const char *name)
{
	char tmp[4300], path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "# vaddr insns runs samples%s\n", table_full ? " (table full: some blocks uncounted)" : "");
	for (uint64_t i = 0; i < (1ull << TABLE_BITS); i++) {
		struct block *b = &table[i];
		uint64_t runs = 0;
		if (!b->used)
			continue;
		for (int v = 0; v < MAX_VCPUS; v++)
			runs += __atomic_load_n(&b->runs[v], __ATOMIC_RELAXED);
		if (runs)
			fprintf(f, "%" PRIx64 " %u %" PRIu64 " %" PRIu64 "\n", b->vaddr, b->insns, runs,
				__atomic_load_n(&b->samples, __ATOMIC_RELAXED));
	}
	fclose(f);
	rename(tmp, path);
}

/* Answers the guest's snapshot requests: snap-req-1, snap-req-2, ... in turn. */
static void *watch_requests(void *unused)
{
	(void)unused;
	for (unsigned int k = 1;; ) {
		char req[4200], name[64];
		snprintf(req, sizeof(req), "%s/snap-req-%u", dir, k);
		if (access(req, F_OK) == 0) {
			snprintf(name, sizeof(name), "snap-%u.txt", k);
			write_snapshot(name);
			k++;
			continue;
		}
		usleep(20000);
	}
	return NULL;
}

/* Every sample_us of host time, notes the block each vCPU is in: a profile of the
 * guest by the host's clock, with nothing running in the guest to take it. */
static void *sample(void *unused)
{
	(void)unused;
	for (;;) {
		usleep(sample_us);
		for (int v = 0; v < MAX_VCPUS; v++) {
			struct block *b = current[v];
			if (b)
				__atomic_store_n(&b->samples, b->samples + 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static void at_exit(qemu_plugin_id_t unused1, void *unused2)
{
	(void)unused1;
	(void)unused2;
	write_snapshot("snap-exit.txt");
}

__attribute__((visibility("default"))) int
qemu_plugin_install(qemu_plugin_id_t id, const void *info, int argc, char **argv)
{
	pthread_t watcher;
	(void)info;
	for (int i = 0; i < argc; i++)
		if (strncmp(argv[i], "dir=", 4) == 0)
			snprintf(dir, sizeof(dir), "%s", argv[i] + 4);
		else if (strncmp(argv[i], "sample_us=", 10) == 0)
			sample_us = (unsigned int)atoi(argv[i] + 10);
	if (!dir[0]) {
		fprintf(stderr, "insn-count: needs dir=DIRECTORY\n");
		return -1;
	}
	table = calloc(1ull << TABLE_BITS, sizeof(*table));
	if (!table)
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	if (pthread_create(&watcher, NULL, watch_requests, NULL))
		return -1;
	pthread_detach(watcher);
	if (sample_us) {
		pthread_t sampler;
		if (pthread_create(&sampler, NULL, sample, NULL))
			return -1;
		pthread_detach(sampler);
	}
	return 0;
}
