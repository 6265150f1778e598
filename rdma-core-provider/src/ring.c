// SPDX-License-Identifier: GPL-2.0
/*
 * MetaRoCE provider: mapping the rings the kernel module shares with the
 * process (layout and protocol: rdma_user_metaroce.h).
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "metaroce.h"

int metaroce_uring_map(struct ibv_context *ctx, struct metaroce_uring *r,
		       const struct metaroce_ring_info *info,
		       size_t min_entry_size)
{
	void *map;

	memset(r, 0, sizeof(*r));
	if (!info->num_entries)
		return 0;
	/* A module speaking another layout: refuse rather than misread it. */
	if (info->entry_size < min_entry_size || info->entry_size % 16 ||
	    info->mmap_size < METAROCE_RING_ENTRIES +
			      (uint64_t)info->num_entries * info->entry_size)
		return EPROTO;
	map = mmap(NULL, info->mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		   ctx->cmd_fd, info->mmap_offset);
	if (map == MAP_FAILED)
		return errno;
	r->map = map;
	r->map_size = info->mmap_size;
	r->num = info->num_entries;
	r->stride = info->entry_size;
	r->producer = (uint32_t *)((uint8_t *)map +
				   offsetof(struct metaroce_ring_hdr, producer));
	r->consumer = (uint32_t *)((uint8_t *)map +
				   offsetof(struct metaroce_ring_hdr, consumer));
	r->entries = (uint8_t *)map + METAROCE_RING_ENTRIES;
	pthread_spin_init(&r->lock, PTHREAD_PROCESS_PRIVATE);
	return 0;
}

void metaroce_uring_unmap(struct metaroce_uring *r)
{
	if (!r->map)
		return;
	munmap(r->map, r->map_size);
	pthread_spin_destroy(&r->lock);
	r->map = NULL;
	r->num = 0;
}

int metaroce_uring_remap(struct ibv_context *ctx, struct metaroce_uring *r,
			 const struct metaroce_ring_info *info,
			 size_t min_entry_size)
{
	struct metaroce_uring n;
	int ret;

	ret = metaroce_uring_map(ctx, &n, info, min_entry_size);
	if (ret)
		return ret;
	if (!n.num)
		return EPROTO;
	pthread_spin_destroy(&n.lock);
	munmap(r->map, r->map_size);
	r->map = n.map;
	r->map_size = n.map_size;
	r->num = n.num;
	r->stride = n.stride;
	r->producer = n.producer;
	r->consumer = n.consumer;
	r->entries = n.entries;
	return 0;
}
