// SPDX-License-Identifier: GPL-2.0
/*
 * MetaRoCE provider: queue pairs and shared receive queues.
 *
 * v1 posts work requests through the kernel (ibv_cmd_post_send/recv,
 * ibv_cmd_post_srq_recv). The per-object path pointer is where a mapped
 * send/receive ring with a doorbell will plug in later.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
	metaroce_wr_api_cleanup(qp);
	free(qp);
}

struct ibv_qp *metaroce_create_qp(struct ibv_pd *pd,
				  struct ibv_qp_init_attr *attr)
{
	struct ibv_create_qp cmd = {};
	struct ib_uverbs_create_qp_resp resp = {};
	struct metaroce_qp *qp;
	int ret;

	qp = qp_alloc();
	if (!qp)
		return NULL;
	ret = ibv_cmd_create_qp(pd, &qp->vqp.qp, attr, &cmd, sizeof(cmd),
				&resp, sizeof(resp));
	if (ret) {
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
	struct ib_uverbs_create_qp_resp resp = {};
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
				   &resp, sizeof(resp));
	if (ret) {
		qp_free(qp);
		errno = ret;
		return NULL;
	}
	attr->cap = kattr.cap;

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

	return ibv_cmd_modify_qp(qp, attr, attr_mask, &cmd, sizeof(cmd));
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
