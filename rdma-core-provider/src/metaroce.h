/* SPDX-License-Identifier: GPL-2.0 */
/*
 * MetaRoCE userspace verbs provider for rdma-core (private provider ABI 65).
 *
 * Objects with a data path (CQ polling, QP/SRQ posting) reach it through a
 * small per-object ops table chosen at creation: the "ring" path when the
 * module mapped the object's queues into the process (CQs, and the send and
 * receive queues of RC QPs; see rdma_user_metaroce.h), else the "cmd" path,
 * where every operation is a uverbs command (UD QPs, SRQs, and any object of
 * a module that offers no rings).
 */
#ifndef METAROCE_PROVIDER_H
#define METAROCE_PROVIDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/driver.h>
#include <infiniband/verbs.h>

#include <rdma_user_metaroce.h>

/* The uverbs ABI version the kernel module reports (abi_version in sysfs). */
#define METAROCE_UVERBS_ABI_VERSION 1

struct metaroce_device {
	struct verbs_device ibv_dev;
};

struct metaroce_context {
	struct verbs_context ibv_ctx;
};

struct metaroce_cq;
struct metaroce_qp;
struct metaroce_srq;

/* One ring mapped from the module (layout: rdma_user_metaroce.h). */
struct metaroce_uring {
	void *map;
	size_t map_size;
	uint32_t num;			/* entries; 0 = not mapped */
	uint32_t stride;		/* bytes per entry */
	uint32_t *producer;
	uint32_t *consumer;
	uint8_t *entries;
	pthread_spinlock_t lock;	/* serialises this side's users */
};

static inline void *metaroce_uring_slot(struct metaroce_uring *r, uint32_t i)
{
	return r->entries + (size_t)(i % r->num) * r->stride;
}

/* ring.c */
int metaroce_uring_map(struct ibv_context *ctx, struct metaroce_uring *r,
		       const struct metaroce_ring_info *info,
		       size_t min_entry_size);
void metaroce_uring_unmap(struct metaroce_uring *r);
/* Replaces a mapped ring by the one info names (a resize), keeping r->lock,
 * which the caller holds. */
int metaroce_uring_remap(struct ibv_context *ctx, struct metaroce_uring *r,
			 const struct metaroce_ring_info *info,
			 size_t min_entry_size);

/* Data path of one CQ. v1: metaroce_cq_cmd_path (ibv_cmd_poll_cq, ...). */
struct metaroce_cq_path {
	const char *name;
	/* Fill up to ne completions; returns their number or -errno. */
	int (*poll)(struct metaroce_cq *cq, int ne, struct ibv_wc *wc);
	int (*req_notify)(struct metaroce_cq *cq, int solicited_only);
};

/* Data path of one QP. v1: metaroce_qp_cmd_path (ibv_cmd_post_*). */
struct metaroce_qp_path {
	const char *name;
	int (*post_send)(struct metaroce_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad_wr);
	int (*post_recv)(struct metaroce_qp *qp, struct ibv_recv_wr *wr,
			 struct ibv_recv_wr **bad_wr);
};

/* Data path of one SRQ. v1: metaroce_srq_cmd_path (ibv_cmd_post_srq_recv). */
struct metaroce_srq_path {
	const char *name;
	int (*post_recv)(struct metaroce_srq *srq, struct ibv_recv_wr *wr,
			 struct ibv_recv_wr **bad_wr);
};

/*
 * Completions taken from the kernel but not yet handed to the application.
 * Used by the extended CQ (ibv_cq_ex) polling API, which is emulated on top
 * of the CQ's poll path: start_poll/next_poll walk this buffer.
 */
#define METAROCE_CQ_BATCH 16

struct metaroce_cq {
	struct verbs_cq vcq;
	const struct metaroce_cq_path *path;
	pthread_mutex_t lock;		/* guards the buffer below */
	bool is_ex;			/* created with ibv_create_cq_ex */
	bool in_poll;			/* between start_poll and end_poll */
	int head, count;		/* buffered completions wc[head..head+count) */
	struct ibv_wc *cur;		/* the one start/next_poll returned */
	struct ibv_wc wc[METAROCE_CQ_BATCH];
	struct metaroce_uring ring;	/* completions, when mapped */
};

/* One work request built with the ibv_wr_* API, kept until wr_complete. */
struct metaroce_pending_wr {
	struct ibv_send_wr wr;
	struct ibv_sge sge;		/* storage for a single SGE */
	struct ibv_sge *sgl;		/* or a copied list / inline copies */
	void *inline_buf;		/* copied inline data */
};

/* State of the emulated ibv_qp_ex work-request API of one QP. */
struct metaroce_wr_batch {
	struct metaroce_pending_wr *wrs;
	unsigned int nr, cap;
	int err;			/* first error, reported by wr_complete */
};

struct metaroce_qp {
	struct verbs_qp vqp;
	const struct metaroce_qp_path *path;
	struct metaroce_wr_batch batch;
	/* Ring path only: */
	struct metaroce_uring sq, rq;
	/* The doorbell: a post_send command with no work requests, built once
	 * and written to the command fd as it is (the write() interface; the
	 * ioctl dispatch libibverbs would use costs several microseconds per
	 * call under emulation). Used under sq.lock. */
	struct ibv_post_send db_req;
	struct ib_uverbs_post_send_resp db_resp;
	uint32_t max_send_sge, max_recv_sge, max_inline;
	/* The state as this process last set it (the module may move the QP to
	 * ERR on its own; posting is then still accepted and flushed). */
	enum ibv_qp_state state;
};

struct metaroce_srq {
	struct verbs_srq vsrq;
	const struct metaroce_srq_path *path;
};

struct metaroce_ah {
	struct ibv_ah ibv_ah;
	uint8_t dgid[16];	/* written into UD send WQEs of the ring path */
};

static inline struct metaroce_context *to_mctx(struct ibv_context *ctx)
{
	return container_of(ctx, struct metaroce_context, ibv_ctx.context);
}

static inline struct metaroce_cq *to_mcq(struct ibv_cq *cq)
{
	return container_of(cq, struct metaroce_cq, vcq.cq);
}

static inline struct metaroce_cq *cq_ex_to_mcq(struct ibv_cq_ex *cq)
{
	return container_of(cq, struct metaroce_cq, vcq.cq_ex);
}

static inline struct metaroce_qp *to_mqp(struct ibv_qp *qp)
{
	return container_of(qp, struct metaroce_qp, vqp.qp);
}

static inline struct metaroce_qp *qp_ex_to_mqp(struct ibv_qp_ex *qp)
{
	return container_of(qp, struct metaroce_qp, vqp.qp_ex);
}

static inline struct metaroce_srq *to_msrq(struct ibv_srq *srq)
{
	return container_of(srq, struct metaroce_srq, vsrq.srq);
}

static inline struct metaroce_ah *to_mah(struct ibv_ah *ah)
{
	return container_of(ah, struct metaroce_ah, ibv_ah);
}

/* cq.c */
extern const struct metaroce_cq_path metaroce_cq_cmd_path;
extern const struct metaroce_cq_path metaroce_cq_ring_path;
struct ibv_cq *metaroce_create_cq(struct ibv_context *ctx, int cqe,
				  struct ibv_comp_channel *channel,
				  int comp_vector);
struct ibv_cq_ex *metaroce_create_cq_ex(struct ibv_context *ctx,
					struct ibv_cq_init_attr_ex *attr);
int metaroce_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc);
int metaroce_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int metaroce_resize_cq(struct ibv_cq *cq, int cqe);
int metaroce_destroy_cq(struct ibv_cq *cq);

/* qp.c */
extern const struct metaroce_qp_path metaroce_qp_cmd_path;
extern const struct metaroce_qp_path metaroce_qp_ring_path;
extern const struct metaroce_srq_path metaroce_srq_cmd_path;
struct ibv_qp *metaroce_create_qp(struct ibv_pd *pd,
				  struct ibv_qp_init_attr *attr);
struct ibv_qp *metaroce_create_qp_ex(struct ibv_context *ctx,
				     struct ibv_qp_init_attr_ex *attr);
int metaroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_qp_init_attr *init_attr);
int metaroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		       int attr_mask);
int metaroce_destroy_qp(struct ibv_qp *qp);
int metaroce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		       struct ibv_send_wr **bad_wr);
int metaroce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr);
struct ibv_srq *metaroce_create_srq(struct ibv_pd *pd,
				    struct ibv_srq_init_attr *attr);
int metaroce_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			int attr_mask);
int metaroce_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int metaroce_destroy_srq(struct ibv_srq *srq);
int metaroce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			   struct ibv_recv_wr **bad_wr);

/* wr_api.c: the ibv_qp_ex work-request API on top of a QP's post_send. */
#define METAROCE_SUP_SEND_OPS_FLAGS                                            \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |                  \
	 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |      \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |        \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV |  \
	 IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_FLUSH |                  \
	 IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV)
void metaroce_wr_api_init(struct metaroce_qp *qp);
void metaroce_wr_api_cleanup(struct metaroce_qp *qp);

#endif /* METAROCE_PROVIDER_H */
