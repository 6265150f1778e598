// SPDX-License-Identifier: GPL-2.0
/*
 * MetaRoCE provider: queue pairs and shared receive queues.
 *
 * RC and UD QPs post into send and receive rings the module maps into the
 * process: a receive is a store to memory; sends are stores followed by one
 * doorbell command per ibv_post_send call (a post_send command with no work
 * requests), which wakes the QP's kernel work. A UD send entry carries its
 * address handle's destination GID. SRQs post through uverbs commands.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metaroce.h"

/* ---- command paths ---- */

static int qp_cmd_post_send(struct metaroce_qp *qp, struct ibv_send_wr *wr,
			    struct ibv_send_wr **bad_wr)
{
	return ibv_cmd_post_send(&qp->vqp.qp, wr, bad_wr);
}

static int qp_cmd_post_recv(struct metaroce_qp *qp, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad_wr)
{
	return ibv_cmd_post_recv(&qp->vqp.qp, wr, bad_wr);
}

const struct metaroce_qp_path metaroce_qp_cmd_path = {
	.name = "cmd",
	.post_send = qp_cmd_post_send,
	.post_recv = qp_cmd_post_recv,
};

static int srq_cmd_post_recv(struct metaroce_srq *srq, struct ibv_recv_wr *wr,
			     struct ibv_recv_wr **bad_wr)
{
	return ibv_cmd_post_srq_recv(&srq->vsrq.srq, wr, bad_wr);
}

/* ---- ring path ---- */

/* The checks the kernel's command path makes, made before the ring is touched
 * (a WQE the module finds malformed puts the QP in error instead). */
static int ring_check_send(struct metaroce_qp *qp, const struct ibv_send_wr *wr,
			   uint32_t *inline_len)
{
	uint64_t len = 0;
	int i;

	if (qp->vqp.qp.qp_type == IBV_QPT_UD &&
	    ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) ||
	     !wr->wr.ud.ah))
		return EINVAL;
	/* UC carries SEND and WRITE messages only (MetaRoCE MR-4.6.1). */
	if (qp->vqp.qp.qp_type == IBV_QPT_UC &&
	    (wr->opcode == IBV_WR_RDMA_READ ||
	     wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	     wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	     wr->opcode == IBV_WR_ATOMIC_WRITE || wr->opcode == IBV_WR_FLUSH))
		return EINVAL;
	switch (wr->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_WRITE:
	case IBV_WR_FLUSH:
		break;
	case IBV_WR_LOCAL_INV:
		*inline_len = 0;
		return 0;
	case IBV_WR_BIND_MW:
		/* Memory windows (MetaRoCE MR-9.2.4): the module checks the
		 * window, the region and the range when the bind executes. */
		*inline_len = 0;
		if (!wr->bind_mw.mw || wr->num_sge ||
		    wr->bind_mw.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED ||
		    (!wr->bind_mw.bind_info.mr && wr->bind_mw.bind_info.length))
			return EINVAL;
		return 0;
	default:
		return EINVAL;
	}
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge)
		return EINVAL;
	/* A message is at most 2^31 bytes (MetaRoCE MR-2.2.3). */
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > (1ull << 31))
		return EINVAL;
	*inline_len = 0;
	/* FLUSH (as wr_flush lays it out): no data, a placement type, no
	 * reserved bit, a length that fits the wire (MetaRoCE MR-3.3.5). */
	if (wr->opcode == IBV_WR_FLUSH) {
		uint32_t types = METAROCE_FLUSH_GLOBAL | METAROCE_FLUSH_PERSISTENT;

		if (wr->num_sge || !(wr->imm_data & types) ||
		    wr->imm_data & ~(types | METAROCE_FLUSH_WHOLE_REGION) ||
		    wr->wr.atomic.compare_add > UINT32_MAX)
			return EINVAL;
		return 0;
	}
	/* ATOMIC_WRITE: 8 bytes to an aligned address (MetaRoCE MR-4.4.6); as
	 * inline data they go in the WQE's operand field, whatever max_inline. */
	if (wr->opcode == IBV_WR_ATOMIC_WRITE) {
		if (len != 8 || wr->wr.rdma.remote_addr % 8)
			return EINVAL;
		return 0;
	}
	if (wr->send_flags & IBV_SEND_INLINE) {
		if (len > qp->max_inline)
			return EINVAL;
		*inline_len = len;
	}
	return 0;
}

static void ring_write_send(struct metaroce_qp *qp, void *slot,
			    const struct ibv_send_wr *wr, uint32_t inline_len)
{
	struct metaroce_send_wqe *w = slot;
	uint8_t *tail = (uint8_t *)(w + 1);
	int i;

	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;	/* enum ibv_wr_opcode = ib_uverbs_wr_opcode */
	w->send_flags = wr->send_flags;
	w->ex = wr->opcode == IBV_WR_SEND_WITH_INV ? wr->invalidate_rkey :
						      wr->imm_data;	/* FLUSH: its bits */
	w->remote_addr = 0;
	w->rkey = 0;
	w->compare_add = 0;
	w->swap = 0;
	if (qp->vqp.qp.qp_type == IBV_QPT_UD) {
		memcpy(w->dgid, to_mah(wr->wr.ud.ah)->dgid, sizeof(w->dgid));
		w->remote_qpn = wr->wr.ud.remote_qpn;
		w->remote_qkey = wr->wr.ud.remote_qkey;
	} else {
		memset(w->dgid, 0, sizeof(w->dgid));
		w->remote_qpn = 0;
		w->remote_qkey = 0;
	}
	if (wr->opcode == IBV_WR_LOCAL_INV || wr->opcode == IBV_WR_BIND_MW) {
		/* No data: the fields as the module's header lays them out. */
		const struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;

		w->num_sge = 0;
		w->inline_len = 0;
		w->send_flags &= ~IBV_SEND_INLINE;
		if (wr->opcode == IBV_WR_LOCAL_INV) {
			w->ex = wr->invalidate_rkey;
			return;
		}
		w->ex = wr->bind_mw.mw->rkey;
		w->rkey = wr->bind_mw.rkey;
		w->remote_addr = b->addr;
		w->compare_add = b->length;
		w->swap = (uint64_t)b->mw_access_flags << METAROCE_BIND_ACCESS_SHIFT |
			  (b->mr ? b->mr->lkey : 0);
		return;
	}
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_WRITE:
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_FLUSH:
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if (wr->opcode == IBV_WR_ATOMIC_WRITE &&
	    wr->send_flags & IBV_SEND_INLINE) {
		/* The operand itself, in compare_add: no SGE, no inline flag. */
		uint8_t *to = (uint8_t *)&w->compare_add;

		w->send_flags &= ~IBV_SEND_INLINE;
		w->num_sge = 0;
		w->inline_len = 0;
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(to, (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			to += wr->sg_list[i].length;
		}
	} else if (wr->send_flags & IBV_SEND_INLINE) {
		/* Inline data is copied now: the buffers are the caller's again
		 * when ibv_post_send returns. */
		w->num_sge = 0;
		w->inline_len = inline_len;
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(tail, (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			tail += wr->sg_list[i].length;
		}
	} else {
		struct metaroce_sge *sge = (struct metaroce_sge *)tail;

		w->num_sge = wr->num_sge;
		w->inline_len = 0;
		for (i = 0; i < wr->num_sge; i++) {
			sge[i].addr = wr->sg_list[i].addr;
			sge[i].length = wr->sg_list[i].length;
			sge[i].lkey = wr->sg_list[i].lkey;
		}
	}
}

/* Rings the doorbell of a QP's send ring: 0, or the module's errno. */
static int ring_doorbell(struct metaroce_qp *qp)
{
	ssize_t n = write(qp->vqp.qp.context->cmd_fd, &qp->db_req,
			  sizeof(qp->db_req));

	if (n == (ssize_t)sizeof(qp->db_req))
		return 0;
	return n < 0 ? errno : EIO;
}

static int ring_post_send(struct metaroce_qp *qp, struct ibv_send_wr *wr,
			  struct ibv_send_wr **bad_wr)
{
	struct metaroce_uring *r = &qp->sq;
	struct ibv_send_wr *first = wr;
	uint32_t prod, cons, start, inline_len;
	int ret = 0;

	/* Verbs: sending needs RTS (or SQD); in ERR requests are flushed (and
	 * the doorbell below makes the module do it). */
	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
	    qp->state != IBV_QPS_ERR) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&r->lock);
	start = prod = *r->producer;
	cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
	for (; wr; wr = wr->next) {
		ret = ring_check_send(qp, wr, &inline_len);
		if (!ret && prod - cons >= r->num) {
			cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
			if (prod - cons >= r->num)
				ret = ENOMEM;
		}
		if (ret) {
			*bad_wr = wr;
			break;
		}
		ring_write_send(qp, metaroce_uring_slot(r, prod), wr,
				inline_len);
		prod++;
	}
	if (prod != start) {
		int db;

		__atomic_store_n(r->producer, prod, __ATOMIC_RELEASE);
		db = ring_doorbell(qp);
		if (db) {
			/* The module refused (the QP is not in a sending state):
			 * nothing was taken, withdraw it all. */
			__atomic_store_n(r->producer, start, __ATOMIC_RELEASE);
			*bad_wr = first;
			ret = db;
		}
	}
	pthread_spin_unlock(&r->lock);
	return ret;
}

static int ring_post_recv(struct metaroce_qp *qp, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	struct metaroce_uring *r = &qp->rq;
	struct ibv_recv_wr *dummy;
	uint32_t prod, cons, start;
	int ret = 0, i;

	if (qp->state == IBV_QPS_RESET) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&r->lock);
	start = prod = *r->producer;
	cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
	for (; wr; wr = wr->next) {
		struct metaroce_recv_wqe *w;
		struct metaroce_sge *sge;

		if (wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > qp->max_recv_sge) {
			ret = EINVAL;
		} else if (prod - cons >= r->num) {
			cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
			if (prod - cons >= r->num)
				ret = ENOMEM;
		}
		if (ret) {
			*bad_wr = wr;
			break;
		}
		w = metaroce_uring_slot(r, prod);
		sge = (struct metaroce_sge *)(w + 1);
		w->wr_id = wr->wr_id;
		w->num_sge = wr->num_sge;
		w->reserved = 0;
		for (i = 0; i < wr->num_sge; i++) {
			sge[i].addr = wr->sg_list[i].addr;
			sge[i].length = wr->sg_list[i].length;
			sge[i].lkey = wr->sg_list[i].lkey;
		}
		prod++;
	}
	if (prod != start) {
		__atomic_store_n(r->producer, prod, __ATOMIC_RELEASE);
		/* The module looks at the ring when a message arrives; in ERR
		 * nothing arrives, so wake it to flush what was just posted. It
		 * may have moved the QP to ERR by itself (a fatal remote error):
		 * then it says so in the ring header. */
		if (qp->state == IBV_QPS_ERR ||
		    __atomic_load_n(&((struct metaroce_ring_hdr *)r->map)->flags,
				    __ATOMIC_ACQUIRE) & METAROCE_RING_F_ERROR)
			ibv_cmd_post_recv(&qp->vqp.qp, NULL, &dummy);
	}
	pthread_spin_unlock(&r->lock);
	return ret;
}

const struct metaroce_qp_path metaroce_qp_ring_path = {
	.name = "ring",
	.post_send = ring_post_send,
	.post_recv = ring_post_recv,
};

/* Switches a new QP to its mapped rings, if the module sent them. */
static int qp_use_rings(struct ibv_context *ctx, struct metaroce_qp *qp,
			const struct metaroce_create_qp_resp *drv,
			const struct ibv_qp_cap *cap)
{
	int ret;

	if (!drv->sq.num_entries)
		return 0;
	ret = metaroce_uring_map(ctx, &qp->sq, &drv->sq,
				 sizeof(struct metaroce_send_wqe));
	if (!ret)
		ret = metaroce_uring_map(ctx, &qp->rq, &drv->rq,
					 sizeof(struct metaroce_recv_wqe));
	if (ret) {
		metaroce_uring_unmap(&qp->sq);
		return ret;
	}
	qp->max_send_sge = cap->max_send_sge;
	qp->max_recv_sge = cap->max_recv_sge;
	qp->max_inline = cap->max_inline_data;
	qp->db_req.hdr.command = IB_USER_VERBS_CMD_POST_SEND;
	qp->db_req.hdr.in_words = sizeof(qp->db_req) / 4;
	qp->db_req.hdr.out_words = sizeof(qp->db_resp) / 4;
	qp->db_req.response = (uintptr_t)&qp->db_resp;
	qp->db_req.qp_handle = qp->vqp.qp.handle;
	qp->db_req.wr_count = 0;
	qp->db_req.sge_count = 0;
	qp->db_req.wqe_size = sizeof(struct ibv_send_wr);
	qp->path = &metaroce_qp_ring_path;
	return 0;
}

const struct metaroce_srq_path metaroce_srq_cmd_path = {
	.name = "cmd",
	.post_recv = srq_cmd_post_recv,
};

/* ---- QP ---- */

static struct metaroce_qp *qp_alloc(void)
{
	struct metaroce_qp *qp = calloc(1, sizeof(*qp));

	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->path = &metaroce_qp_cmd_path;
	return qp;
}

static void qp_free(struct metaroce_qp *qp)
{
	metaroce_uring_unmap(&qp->sq);
	metaroce_uring_unmap(&qp->rq);
	metaroce_wr_api_cleanup(qp);
	free(qp);
}

struct ibv_qp *metaroce_create_qp(struct ibv_pd *pd,
				  struct ibv_qp_init_attr *attr)
{
	struct ibv_create_qp cmd = {};
	struct {
		struct ib_uverbs_create_qp_resp ibv_resp;
		struct metaroce_create_qp_resp drv;
	} resp = {};
	struct metaroce_qp *qp;
	int ret;

	qp = qp_alloc();
	if (!qp)
		return NULL;
	ret = ibv_cmd_create_qp(pd, &qp->vqp.qp, attr, &cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp));
	if (ret) {
		qp_free(qp);
		errno = ret;
		return NULL;
	}
	ret = qp_use_rings(pd->context, qp, &resp.drv, &attr->cap);
	if (ret) {
		ibv_cmd_destroy_qp(&qp->vqp.qp);
		qp_free(qp);
		errno = ret;
		return NULL;
	}
	return &qp->vqp.qp;
}

struct ibv_qp *metaroce_create_qp_ex(struct ibv_context *ctx,
				     struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_create_qp cmd = {};
	struct {
		struct ib_uverbs_create_qp_resp ibv_resp;
		struct metaroce_create_qp_resp drv;
	} resp = {};
	struct ibv_qp_init_attr_ex kattr;
	struct metaroce_qp *qp;
	bool wr_api = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	int ret;

	/* A PD is required; XRC, RSS, TSO and creation flags are not offered. */
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    attr->comp_mask & ~(uint64_t)(IBV_QP_INIT_ATTR_PD |
					  IBV_QP_INIT_ATTR_CREATE_FLAGS |
					  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ||
	    (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS &&
	     attr->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (wr_api) {
		if (attr->send_ops_flags & ~(uint64_t)METAROCE_SUP_SEND_OPS_FLAGS ||
		    (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
		     attr->qp_type != IBV_QPT_UD)) {
			errno = EOPNOTSUPP;
			return NULL;
		}
	}

	kattr = *attr;
	kattr.comp_mask &= IBV_QP_INIT_ATTR_PD;

	qp = qp_alloc();
	if (!qp)
		return NULL;
	ret = ibv_cmd_create_qp_ex(ctx, &qp->vqp, &kattr, &cmd, sizeof(cmd),
				   &resp.ibv_resp, sizeof(resp));
	if (ret) {
		qp_free(qp);
		errno = ret;
		return NULL;
	}
	attr->cap = kattr.cap;
	ret = qp_use_rings(ctx, qp, &resp.drv, &kattr.cap);
	if (ret) {
		ibv_cmd_destroy_qp(&qp->vqp.qp);
		qp_free(qp);
		errno = ret;
		return NULL;
	}

	if (wr_api) {
		qp->vqp.comp_mask |= VERBS_QP_EX;
		metaroce_wr_api_init(qp);
	}
	return &qp->vqp.qp;
}

int metaroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd = {};

	return ibv_cmd_query_qp(qp, attr, attr_mask, init_attr, &cmd,
				sizeof(cmd));
}

int metaroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		       int attr_mask)
{
	struct ibv_modify_qp cmd = {};
	int ret;

	ret = ibv_cmd_modify_qp(qp, attr, attr_mask, &cmd, sizeof(cmd));
	if (!ret && attr_mask & IBV_QP_STATE)
		to_mqp(qp)->state = attr->qp_state;
	return ret;
}

int metaroce_destroy_qp(struct ibv_qp *ibqp)
{
	int ret = ibv_cmd_destroy_qp(ibqp);

	if (ret)
		return ret;
	qp_free(to_mqp(ibqp));
	return 0;
}

int metaroce_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		       struct ibv_send_wr **bad_wr)
{
	struct metaroce_qp *qp = to_mqp(ibqp);

	return qp->path->post_send(qp, wr, bad_wr);
}

int metaroce_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr)
{
	struct metaroce_qp *qp = to_mqp(ibqp);

	return qp->path->post_recv(qp, wr, bad_wr);
}

/* ---- SRQ ---- */

struct ibv_srq *metaroce_create_srq(struct ibv_pd *pd,
				    struct ibv_srq_init_attr *attr)
{
	struct ibv_create_srq cmd = {};
	struct ib_uverbs_create_srq_resp resp = {};
	struct metaroce_srq *srq;
	int ret;

	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	srq->path = &metaroce_srq_cmd_path;
	ret = ibv_cmd_create_srq(pd, &srq->vsrq.srq, attr, &cmd, sizeof(cmd),
				 &resp, sizeof(resp));
	if (ret) {
		free(srq);
		errno = ret;
		return NULL;
	}
	return &srq->vsrq.srq;
}

int metaroce_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			int attr_mask)
{
	struct ibv_modify_srq cmd = {};

	return ibv_cmd_modify_srq(srq, attr, attr_mask, &cmd, sizeof(cmd));
}

int metaroce_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct ibv_query_srq cmd = {};

	return ibv_cmd_query_srq(srq, attr, &cmd, sizeof(cmd));
}

int metaroce_destroy_srq(struct ibv_srq *ibsrq)
{
	int ret = ibv_cmd_destroy_srq(ibsrq);

	if (ret)
		return ret;
	free(to_msrq(ibsrq));
	return 0;
}

int metaroce_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			   struct ibv_recv_wr **bad_wr)
{
	struct metaroce_srq *srq = to_msrq(ibsrq);

	return srq->path->post_recv(srq, wr, bad_wr);
}
