/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR Linux-OpenIB) */
/*
 * MetaRoCE user ABI: the queues the kernel module maps into a process.
 *
 * One definition for both sides: the module reads it through bindgen, the
 * rdma-core provider includes it. Everything here is little-endian host
 * order except where a field says otherwise, and every field is naturally
 * aligned so the layout is the same for every compiler.
 *
 * A ring is one mmap()ed region: a header (struct metaroce_ring_hdr), then
 * num_entries entries of entry_size bytes each, at METAROCE_RING_ENTRIES.
 * producer and consumer are free-running 32-bit counters; entry i lives at
 * slot i % num_entries; the ring holds producer - consumer entries. The
 * producer stores its counter with release semantics after writing the
 * entry; the consumer loads it with acquire semantics before reading.
 *
 *   send queue:  process produces struct metaroce_send_wqe, kernel consumes;
 *                after producing, the process rings the doorbell (a
 *                post_send command with no work requests).
 *   recv queue:  process produces struct metaroce_recv_wqe, kernel consumes
 *                (no doorbell: the kernel looks before placing a message).
 *   completion:  kernel produces struct ib_uverbs_wc, process consumes.
 *
 * The kernel's consumer counter of a work queue advances when a work
 * request completes, not when the kernel reads it, so a full ring means
 * max_send_wr / max_recv_wr requests outstanding, as verbs defines it.
 * The kernel treats everything in a mapped ring as untrusted: it copies an
 * entry before looking at it and checks every field.
 */
#ifndef RDMA_USER_METAROCE_H
#define RDMA_USER_METAROCE_H

#include <linux/types.h>

/*
 * Rings are negotiated, not versioned: a provider that passes no response
 * room for the driver data below, or a module that writes none, leaves
 * num_entries 0 and the object works through the uverbs commands.
 */

/* Producer and consumer sit on their own cache lines. */
struct metaroce_ring_hdr {
	__u32 producer;
	__u32 pad0[15];
	__u32 consumer;
	__u32 flags;		/* METAROCE_RING_F_*, written by the kernel */
	__u32 pad1[14];
};

/*
 * Work queue flag: the QP is in the error state. Work posted from now on is
 * flushed, but only when the kernel looks, so a process that posts receives
 * then rings the doorbell (a post_recv command with no work requests).
 */
#define METAROCE_RING_F_ERROR 1

/* Offset of the first entry in a ring's mapping. */
#define METAROCE_RING_ENTRIES 128

/* Where and how big one mapped ring is (create responses). */
struct metaroce_ring_info {
	__aligned_u64 mmap_offset;	/* pass to mmap() on the verbs fd */
	__aligned_u64 mmap_size;	/* bytes to map */
	__u32 num_entries;		/* 0: no ring, use the command path */
	__u32 entry_size;		/* bytes per entry, a multiple of 16 */
};

/* Driver data of the create_cq response. */
struct metaroce_create_cq_resp {
	struct metaroce_ring_info cq;	/* entries: struct ib_uverbs_wc */
};

/*
 * Driver data of the resize_cq response for a CQ with a mapped ring: the ring
 * that replaces it, holding the completions not yet consumed from index 0
 * (producer = their number, consumer = 0). The process maps it, and unmaps
 * the old one, only if the command succeeds; until it returns, the process
 * must not consume from the old ring.
 */
struct metaroce_resize_cq_resp {
	struct metaroce_ring_info cq;	/* entries: struct ib_uverbs_wc */
};

/* Driver data of the create_qp response (RC and UD QPs). */
struct metaroce_create_qp_resp {
	struct metaroce_ring_info sq;
	struct metaroce_ring_info rq;	/* num_entries 0 on an SRQ */
};

struct metaroce_sge {
	__aligned_u64 addr;
	__u32 length;
	__u32 lkey;
};

/* A send work request; followed by num_sge SGEs or inline_len bytes. */
struct metaroce_send_wqe {
	__aligned_u64 wr_id;
	__u32 opcode;		/* enum ib_uverbs_wr_opcode */
	__u32 send_flags;	/* enum ib_uverbs_send_flags */
	__u32 num_sge;		/* 0 when the data is inline */
	__u32 inline_len;	/* bytes of inline data (IB_SEND_INLINE) */
	__u32 ex;		/* immediate data (big-endian), rkey to invalidate,
				 * a FLUSH's METAROCE_FLUSH_* bits, or the rkey
				 * of the window a BIND_MW binds */
	__u32 rkey;		/* RDMA, atomic and FLUSH operations */
	__aligned_u64 remote_addr;
	__aligned_u64 compare_add;	/* atomics; ATOMIC_WRITE without SGEs: the
					 * 8 bytes; FLUSH: the range's length */
	__aligned_u64 swap;
	/* UD QPs: where the datagram goes (the address handle's destination). */
	__u8 dgid[16];
	__u32 remote_qpn;
	__u32 remote_qkey;
};

/*
 * IB_UVERBS_WR_BIND_MW (MetaRoCE MR-9.2.4) lays its fields out as:
 *   ex           the window's rkey as the process knows it (before the bind)
 *   rkey         the rkey it has once bound (same index, new low byte)
 *   remote_addr  first address of the range, in the region's addressing
 *   compare_add  length of the range (0: unbind a type 1 window)
 *   swap         the region's lkey in bits 0-31, the window's access
 *                flags (enum ib_access_flags) in bits 32-63
 * and IB_UVERBS_WR_LOCAL_INV puts the rkey to invalidate in ex. Neither
 * carries SGEs or inline data.
 */
#define METAROCE_BIND_ACCESS_SHIFT	32

/* The ex field of a FLUSH: the placement types (the verbs values) and the
 * selectivity (MetaRoCE MR-3.3.5). */
#define METAROCE_FLUSH_GLOBAL		0x1
#define METAROCE_FLUSH_PERSISTENT	0x2
#define METAROCE_FLUSH_WHOLE_REGION	0x100

/* A receive work request; followed by num_sge SGEs. */
struct metaroce_recv_wqe {
	__aligned_u64 wr_id;
	__u32 num_sge;
	__u32 reserved;
};

#endif /* RDMA_USER_METAROCE_H */
