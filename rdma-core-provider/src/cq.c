// SPDX-License-Identifier: GPL-2.0
/*
 * MetaRoCE provider: completion queues.
 *
 * With a mapped completion ring (the module offers one for every CQ a
 * process creates) polling reads the ring and never enters the kernel; the
 * command path (ibv_cmd_poll_cq) remains for a module without rings.
 * Arming (req_notify_cq) is a command either way. The extended CQ API
 * (ibv_create_cq_ex, ibv_start_poll/ibv_next_poll/ibv_wc_read_*) is
 * emulated on top of the same poll path: start_poll fetches a small batch
 * of completions, next_poll walks it, and the readers return fields of the
 * current one. Completions left over at end_poll stay buffered and are
 * returned first by the next start_poll or ibv_poll_cq.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "metaroce.h"

/*
 * A completion's flags as the kernel writes them (enum ib_wc_flags, which
 * uverbs hands on unchanged, in the ring's entries and in the poll command's
 * answer alike) in libibverbs' terms (enum ibv_wc_flags). The two differ from
 * bit 2 on: the kernel's WITH_INVALIDATE (1 << 2) is libibverbs' IP_CSUM_OK,
 * whose WITH_INV is 1 << 3, and the kernel's WITH_NETWORK_HDR_TYPE (1 << 6)
 * would read as TM_DATA_VALID. Copied as they were, a SEND_WITH_INV's
 * receive completion did not say which key it invalidated.
 */
#define KERNEL_WC_GRH			(1u << 0)
#define KERNEL_WC_WITH_IMM		(1u << 1)
#define KERNEL_WC_WITH_INVALIDATE	(1u << 2)
#define KERNEL_WC_IP_CSUM_OK		(1u << 3)

static unsigned int metaroce_wc_flags(unsigned int kernel)
{
	unsigned int f = 0;

	if (kernel & KERNEL_WC_GRH)
		f |= IBV_WC_GRH;
	if (kernel & KERNEL_WC_WITH_IMM)
		f |= IBV_WC_WITH_IMM;
	if (kernel & KERNEL_WC_WITH_INVALIDATE)
		f |= IBV_WC_WITH_INV;
	if (kernel & KERNEL_WC_IP_CSUM_OK)
		f |= IBV_WC_IP_CSUM_OK;
	return f;
}

/* ---- command path ---- */

static int cmd_poll(struct metaroce_cq *cq, int ne, struct ibv_wc *wc)
{
	int i, n = ibv_cmd_poll_cq(&cq->vcq.cq, ne, wc);

	for (i = 0; i < n; i++)
		wc[i].wc_flags = metaroce_wc_flags(wc[i].wc_flags);
	return n;
}

static int cmd_req_notify(struct metaroce_cq *cq, int solicited_only)
{
	return ibv_cmd_req_notify_cq(&cq->vcq.cq, solicited_only);
}

const struct metaroce_cq_path metaroce_cq_cmd_path = {
	.name = "cmd",
	.poll = cmd_poll,
	.req_notify = cmd_req_notify,
};

/* ---- ring path ---- */

static int ring_poll(struct metaroce_cq *cq, int ne, struct ibv_wc *wc)
{
	struct metaroce_uring *r = &cq->ring;
	uint32_t cons, prod;
	int n = 0;

	/*
	 * An empty ring is seen without the lock, and the consumer counter is not
	 * written back: a latency test polls an empty ring most of the time, and each
	 * poll is on the path from a completion to the program's reaction to it.
	 */
	if (__atomic_load_n(r->producer, __ATOMIC_ACQUIRE) ==
	    __atomic_load_n(r->consumer, __ATOMIC_RELAXED))
		return 0;
	pthread_spin_lock(&r->lock);
	cons = *r->consumer;
	prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);
	while (n < ne && cons != prod) {
		const struct ib_uverbs_wc *e = metaroce_uring_slot(r, cons);
		struct ibv_wc *w = &wc[n++];

		w->wr_id = e->wr_id;
		w->status = e->status;
		w->opcode = e->opcode;
		w->vendor_err = e->vendor_err;
		w->byte_len = e->byte_len;
		w->imm_data = e->ex.imm_data;
		w->qp_num = e->qp_num;
		w->src_qp = e->src_qp;
		w->wc_flags = metaroce_wc_flags(e->wc_flags);
		w->pkey_index = e->pkey_index;
		w->slid = e->slid;
		w->sl = e->sl;
		w->dlid_path_bits = e->dlid_path_bits;
		cons++;
	}
	/* The slots read are the kernel's again. */
	__atomic_store_n(r->consumer, cons, __ATOMIC_RELEASE);
	pthread_spin_unlock(&r->lock);
	return n;
}

const struct metaroce_cq_path metaroce_cq_ring_path = {
	.name = "ring",
	.poll = ring_poll,
	.req_notify = cmd_req_notify,
};

/* Switches a new CQ to its mapped ring, if the module sent one. */
static int cq_use_ring(struct ibv_context *ctx, struct metaroce_cq *cq,
		       const struct metaroce_create_cq_resp *drv)
{
	int ret = metaroce_uring_map(ctx, &cq->ring, &drv->cq,
				     sizeof(struct ib_uverbs_wc));

	if (!ret && cq->ring.num)
		cq->path = &metaroce_cq_ring_path;
	return ret;
}

/* ---- verbs entry points ---- */

static struct metaroce_cq *cq_alloc(void)
{
	struct metaroce_cq *cq = calloc(1, sizeof(*cq));

	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&cq->lock, NULL);
	cq->path = &metaroce_cq_cmd_path;
	return cq;
}

static void cq_free(struct metaroce_cq *cq)
{
	metaroce_uring_unmap(&cq->ring);
	pthread_mutex_destroy(&cq->lock);
	free(cq);
}

struct ibv_cq *metaroce_create_cq(struct ibv_context *ctx, int cqe,
				  struct ibv_comp_channel *channel,
				  int comp_vector)
{
	struct ibv_create_cq cmd = {};
	struct {
		struct ib_uverbs_create_cq_resp ibv_resp;
		struct metaroce_create_cq_resp drv;
	} resp = {};
	struct metaroce_cq *cq;
	int ret;

	cq = cq_alloc();
	if (!cq)
		return NULL;
	ret = ibv_cmd_create_cq(ctx, cqe, channel, comp_vector, &cq->vcq.cq,
				&cmd, sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (ret) {
		cq_free(cq);
		errno = ret;
		return NULL;
	}
	ret = cq_use_ring(ctx, cq, &resp.drv);
	if (ret) {
		ibv_cmd_destroy_cq(&cq->vcq.cq);
		cq_free(cq);
		errno = ret;
		return NULL;
	}
	return &cq->vcq.cq;
}

/* Take completions from the buffer; caller holds cq->lock. */
static int cq_take_buffered(struct metaroce_cq *cq, int ne, struct ibv_wc *wc)
{
	int n = ne < cq->count ? ne : cq->count;

	memcpy(wc, &cq->wc[cq->head], n * sizeof(*wc));
	cq->head += n;
	/* Stored atomically: polls read it without the lock. */
	__atomic_store_n(&cq->count, cq->count - n, __ATOMIC_RELAXED);
	return n;
}

int metaroce_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct metaroce_cq *cq = to_mcq(ibcq);
	int got, ret;

	if (!cq->is_ex)
		return cq->path->poll(cq, ne, wc);

	/*
	 * An extended CQ may hold completions fetched by start_poll. Most polls find
	 * none, and see that without the lock: completions another thread buffers
	 * meanwhile are returned by a later poll (pollers on several threads get no
	 * order among themselves).
	 */
	got = 0;
	if (__atomic_load_n(&cq->count, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&cq->lock);
		got = cq_take_buffered(cq, ne, wc);
		pthread_mutex_unlock(&cq->lock);
	}
	if (got == ne)
		return got;
	ret = cq->path->poll(cq, ne - got, wc + got);
	if (ret < 0)
		return got ? got : ret;
	return got + ret;
}

int metaroce_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct metaroce_cq *cq = to_mcq(ibcq);

	return cq->path->req_notify(cq, solicited_only);
}

/*
 * A CQ with a mapped ring gets a new one from the module, holding the
 * completions not yet polled; polling is held off (the ring's lock) from
 * before the command until the new ring is mapped, so nothing is consumed
 * from the old ring after the module copied it.
 */
int metaroce_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct metaroce_cq *cq = to_mcq(ibcq);
	struct metaroce_uring *r = &cq->ring;
	struct ibv_resize_cq cmd = {};
	struct {
		struct ib_uverbs_resize_cq_resp ibv_resp;
		struct metaroce_resize_cq_resp drv;
	} resp = {};
	int ret;

	if (cqe <= 0)
		return EINVAL;
	pthread_mutex_lock(&cq->lock);
	if (!r->num) {
		ret = ibv_cmd_resize_cq(ibcq, cqe, &cmd, sizeof(cmd),
					&resp.ibv_resp, sizeof(resp.ibv_resp));
		pthread_mutex_unlock(&cq->lock);
		return ret;
	}
	pthread_spin_lock(&r->lock);
	ret = ibv_cmd_resize_cq(ibcq, cqe, &cmd, sizeof(cmd), &resp.ibv_resp,
				sizeof(resp));
	if (!ret)
		ret = metaroce_uring_remap(ibcq->context, r, &resp.drv.cq,
					   sizeof(struct ib_uverbs_wc));
	pthread_spin_unlock(&r->lock);
	pthread_mutex_unlock(&cq->lock);
	return ret;
}

int metaroce_destroy_cq(struct ibv_cq *ibcq)
{
	struct metaroce_cq *cq = to_mcq(ibcq);
	int ret;

	ret = ibv_cmd_destroy_cq(ibcq);
	if (ret)
		return ret;
	cq_free(cq);
	return 0;
}

/* ---- extended CQ polling, emulated over the poll path ---- */

static void cq_ex_set_current(struct metaroce_cq *cq)
{
	cq->cur = &cq->wc[cq->head];
	cq->head++;
	__atomic_store_n(&cq->count, cq->count - 1, __ATOMIC_RELAXED);
	cq->vcq.cq_ex.status = cq->cur->status;
	cq->vcq.cq_ex.wr_id = cq->cur->wr_id;
}

/* Make at least one completion available; caller holds cq->lock. */
static int cq_ex_fill(struct metaroce_cq *cq)
{
	int n;

	if (cq->count)
		return 0;
	n = cq->path->poll(cq, METAROCE_CQ_BATCH, cq->wc);
	if (n < 0)
		return errno ? errno : EIO;
	cq->head = 0;
	__atomic_store_n(&cq->count, n, __ATOMIC_RELAXED);
	return n ? 0 : ENOENT;
}

static int cq_ex_start_poll(struct ibv_cq_ex *ibcq,
			    struct ibv_poll_cq_attr *attr)
{
	struct metaroce_cq *cq = cq_ex_to_mcq(ibcq);
	int ret;

	if (attr->comp_mask)
		return EINVAL;
	pthread_mutex_lock(&cq->lock);
	ret = cq_ex_fill(cq);
	if (ret) {
		/* The caller does not call end_poll after a failed start. */
		pthread_mutex_unlock(&cq->lock);
		return ret;
	}
	cq->in_poll = true;
	cq_ex_set_current(cq);
	return 0;
}

static int cq_ex_next_poll(struct ibv_cq_ex *ibcq)
{
	struct metaroce_cq *cq = cq_ex_to_mcq(ibcq);
	int ret;

	ret = cq_ex_fill(cq);
	if (ret)
		return ret;
	cq_ex_set_current(cq);
	return 0;
}

static void cq_ex_end_poll(struct ibv_cq_ex *ibcq)
{
	struct metaroce_cq *cq = cq_ex_to_mcq(ibcq);

	cq->cur = NULL;
	cq->in_poll = false;
	pthread_mutex_unlock(&cq->lock);
}

static enum ibv_wc_opcode cq_ex_read_opcode(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->opcode;
}

static uint32_t cq_ex_read_vendor_err(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->vendor_err;
}

static uint32_t cq_ex_read_byte_len(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->byte_len;
}

static __be32 cq_ex_read_imm_data(struct ibv_cq_ex *ibcq)
{
	struct ibv_wc *wc = cq_ex_to_mcq(ibcq)->cur;

	/* ibv_wc_read_invalidated_rkey() reads this field too, byte-swapped. */
	if (wc->wc_flags & IBV_WC_WITH_INV)
		return htobe32(wc->invalidated_rkey);
	return wc->imm_data;
}

static uint32_t cq_ex_read_qp_num(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->qp_num;
}

static uint32_t cq_ex_read_src_qp(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->src_qp;
}

static unsigned int cq_ex_read_wc_flags(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->wc_flags;
}

static uint32_t cq_ex_read_slid(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->slid;
}

static uint8_t cq_ex_read_sl(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->sl;
}

static uint8_t cq_ex_read_dlid_path_bits(struct ibv_cq_ex *ibcq)
{
	return cq_ex_to_mcq(ibcq)->cur->dlid_path_bits;
}

struct ibv_cq_ex *metaroce_create_cq_ex(struct ibv_context *ctx,
					struct ibv_cq_init_attr_ex *attr)
{
	struct ibv_create_cq_ex cmd = {};
	struct {
		struct ib_uverbs_ex_create_cq_resp ibv_resp;
		struct metaroce_create_cq_resp drv;
	} resp = {};
	struct metaroce_cq *cq;
	struct ibv_cq_ex *cqx;
	int ret;

	/* Only what struct ibv_wc carries can be read back. */
	if (attr->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS ||
	    attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}

	cq = cq_alloc();
	if (!cq)
		return NULL;
	ret = ibv_cmd_create_cq_ex(ctx, attr, NULL, &cq->vcq, &cmd, sizeof(cmd),
				   &resp.ibv_resp, sizeof(resp), 0);
	if (ret) {
		cq_free(cq);
		errno = ret;
		return NULL;
	}
	ret = cq_use_ring(ctx, cq, &resp.drv);
	if (ret) {
		ibv_cmd_destroy_cq(ibv_cq_ex_to_cq(&cq->vcq.cq_ex));
		cq_free(cq);
		errno = ret;
		return NULL;
	}

	cq->is_ex = true;
	cqx = &cq->vcq.cq_ex;
	cqx->start_poll = cq_ex_start_poll;
	cqx->next_poll = cq_ex_next_poll;
	cqx->end_poll = cq_ex_end_poll;
	cqx->read_opcode = cq_ex_read_opcode;
	cqx->read_vendor_err = cq_ex_read_vendor_err;
	cqx->read_wc_flags = cq_ex_read_wc_flags;
	if (attr->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		cqx->read_byte_len = cq_ex_read_byte_len;
	if (attr->wc_flags & IBV_WC_EX_WITH_IMM)
		cqx->read_imm_data = cq_ex_read_imm_data;
	if (attr->wc_flags & IBV_WC_EX_WITH_QP_NUM)
		cqx->read_qp_num = cq_ex_read_qp_num;
	if (attr->wc_flags & IBV_WC_EX_WITH_SRC_QP)
		cqx->read_src_qp = cq_ex_read_src_qp;
	if (attr->wc_flags & IBV_WC_EX_WITH_SLID)
		cqx->read_slid = cq_ex_read_slid;
	if (attr->wc_flags & IBV_WC_EX_WITH_SL)
		cqx->read_sl = cq_ex_read_sl;
	if (attr->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
		cqx->read_dlid_path_bits = cq_ex_read_dlid_path_bits;
	return cqx;
}
