// SPDX-License-Identifier: GPL-2.0
/*
 * Unit test of the provider's emulation layers, with libibverbs' ibv_cmd_*
 * helpers replaced by stubs (no kernel, no libibverbs at run time):
 *   - the ibv_qp_ex work-request API (wr_api.c) builds the right chain of
 *     ibv_send_wr for one post, copies SGE lists and inline data at call
 *     time, survives growth of its buffer and reports errors at complete;
 *   - the ibv_cq_ex polling emulation (cq.c) returns every completion once,
 *     in order, across batch boundaries, end_poll and plain ibv_poll_cq;
 *   - create_qp_ex / create_cq_ex refuse what v1 does not offer.
 */
#include <assert.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metaroce.h"

static int failures;
#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			failures++;                                            \
		}                                                              \
	} while (0)

/* ---- stubs for libibverbs' command helpers ---- */

#define MAX_POSTED 64
static struct {
	int calls;
	int n;
	struct ibv_send_wr wr[MAX_POSTED];
	struct ibv_sge sge[MAX_POSTED][4];
	unsigned char inl[MAX_POSTED][64];
} posted;

int ibv_cmd_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr)
{
	int i, j;

	posted.calls++;
	posted.n = 0;
	for (i = 0; wr && i < MAX_POSTED; wr = wr->next, i++) {
		posted.wr[i] = *wr;
		for (j = 0; j < wr->num_sge && j < 4; j++)
			posted.sge[i][j] = wr->sg_list[j];
		if (wr->send_flags & IBV_SEND_INLINE && wr->num_sge == 1 &&
		    wr->sg_list[0].length <= 64)
			memcpy(posted.inl[i],
			       (void *)(uintptr_t)wr->sg_list[0].addr,
			       wr->sg_list[0].length);
		posted.n++;
	}
	return 0;
}

int ibv_cmd_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	return 0;
}

int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	return 0;
}

/* The "kernel CQ": completions with wr_id 1..cq_total. */
static int cq_total, cq_next;
static int poll_calls;

int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc)
{
	int n = 0;

	poll_calls++;
	while (n < ne && cq_next < cq_total) {
		memset(&wc[n], 0, sizeof(wc[n]));
		wc[n].wr_id = ++cq_next;
		wc[n].status = cq_next % 7 ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
		wc[n].opcode = IBV_WC_RECV;
		wc[n].byte_len = 100 + cq_next;
		wc[n].qp_num = 0x11;
		if (cq_next % 2) {
			wc[n].wc_flags = IBV_WC_WITH_IMM;
			wc[n].imm_data = htobe32(cq_next);
		}
		n++;
	}
	return n;
}

int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only) { return 0; }

int ibv_cmd_create_cq(struct ibv_context *context, int cqe,
		      struct ibv_comp_channel *channel, int comp_vector,
		      struct ibv_cq *cq, struct ibv_create_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_create_cq_resp *resp,
		      size_t resp_size)
{
	cq->context = context;
	cq->cqe = cqe;
	return 0;
}

int ibv_cmd_create_cq_ex(struct ibv_context *context,
			 const struct ibv_cq_init_attr_ex *cq_attr,
			 struct verbs_create_cq_prov_attr *prov_attr,
			 struct verbs_cq *cq, struct ibv_create_cq_ex *cmd,
			 size_t cmd_size, struct ib_uverbs_ex_create_cq_resp *resp,
			 size_t resp_size, uint32_t cmd_flags)
{
	cq->cq.context = context;
	cq->cq.cqe = cq_attr->cqe;
	return 0;
}

int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size)
{
	return 0;
}

int ibv_cmd_destroy_cq(struct ibv_cq *cq) { return 0; }

static uint64_t last_kernel_qp_comp_mask;

int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp,
		      struct ibv_qp_init_attr *attr, struct ibv_create_qp *cmd,
		      size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		      size_t resp_size)
{
	return 0;
}

int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp,
			 struct ibv_qp_init_attr_ex *attr_ex,
			 struct ibv_create_qp *cmd, size_t cmd_size,
			 struct ib_uverbs_create_qp_resp *resp, size_t resp_size)
{
	last_kernel_qp_comp_mask = attr_ex->comp_mask;
	qp->qp.context = context;
	qp->qp.qp_type = attr_ex->qp_type;
	attr_ex->cap.max_inline_data = 64;
	return 0;
}

int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr,
		     int attr_mask, struct ibv_qp_init_attr *qp_init_attr,
		     struct ibv_query_qp *cmd, size_t cmd_size)
{
	return 0;
}

int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_modify_qp *cmd, size_t cmd_size)
{
	return 0;
}

int ibv_cmd_destroy_qp(struct ibv_qp *qp) { return 0; }

int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
		       struct ibv_srq_init_attr *attr, struct ibv_create_srq *cmd,
		       size_t cmd_size, struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size)
{
	return 0;
}

int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		       int srq_attr_mask, struct ibv_modify_srq *cmd,
		       size_t cmd_size)
{
	return 0;
}

int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
		      struct ibv_query_srq *cmd, size_t cmd_size)
{
	return 0;
}

int ibv_cmd_destroy_srq(struct ibv_srq *srq) { return 0; }

/* ---- tests ---- */

static struct ibv_context fake_ctx;
static struct ibv_pd fake_pd;

static struct ibv_qp_ex *make_qp_ex(uint64_t send_ops)
{
	struct ibv_qp_init_attr_ex attr = {
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = &fake_pd,
		.send_ops_flags = send_ops,
	};
	struct ibv_qp *qp = metaroce_create_qp_ex(&fake_ctx, &attr);

	CHECK(qp);
	if (!qp)
		exit(1);
	CHECK(last_kernel_qp_comp_mask == IBV_QP_INIT_ATTR_PD);
	CHECK(attr.cap.max_inline_data == 64);
	/* What ibv_qp_to_qp_ex() checks. */
	CHECK(container_of(qp, struct verbs_qp, qp)->comp_mask & VERBS_QP_EX);
	return &container_of(qp, struct verbs_qp, qp)->qp_ex;
}

static void test_wr_api(void)
{
	struct ibv_qp_ex *qpx = make_qp_ex(IBV_QP_EX_WITH_SEND |
					   IBV_QP_EX_WITH_RDMA_WRITE |
					   IBV_QP_EX_WITH_SEND_WITH_IMM);
	struct ibv_sge list[2] = {
		{ .addr = 0x1000, .length = 10, .lkey = 7 },
		{ .addr = 0x2000, .length = 20, .lkey = 8 },
	};
	char msg[16] = "hello, inline";
	int i, ret;

	/* A three-WR chain in one post. */
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 5, 0xabc, 64);
	qpx->wr_id = 2;
	qpx->wr_flags = 0;
	ibv_wr_rdma_write(qpx, 0x99, 0xdead0000);
	ibv_wr_set_inline_data(qpx, msg, strlen(msg) + 1);
	memset(msg, 'X', sizeof(msg));	/* the caller may reuse it at once */
	qpx->wr_id = 3;
	ibv_wr_send_imm(qpx, htobe32(0x1234));
	ibv_wr_set_sge_list(qpx, 2, list);
	memset(list, 0, sizeof(list));
	posted.calls = 0;
	ret = ibv_wr_complete(qpx);
	CHECK(ret == 0);
	CHECK(posted.calls == 1);
	CHECK(posted.n == 3);
	CHECK(posted.wr[0].wr_id == 1 && posted.wr[0].opcode == IBV_WR_SEND);
	CHECK(posted.wr[0].send_flags == IBV_SEND_SIGNALED);
	CHECK(posted.wr[0].num_sge == 1 && posted.sge[0][0].addr == 0xabc &&
	      posted.sge[0][0].length == 64 && posted.sge[0][0].lkey == 5);
	CHECK(posted.wr[1].wr_id == 2 && posted.wr[1].opcode == IBV_WR_RDMA_WRITE);
	CHECK(posted.wr[1].wr.rdma.rkey == 0x99 &&
	      posted.wr[1].wr.rdma.remote_addr == 0xdead0000);
	CHECK(posted.wr[1].send_flags & IBV_SEND_INLINE);
	CHECK(strcmp((char *)posted.inl[1], "hello, inline") == 0);
	CHECK(posted.wr[2].opcode == IBV_WR_SEND_WITH_IMM &&
	      posted.wr[2].imm_data == htobe32(0x1234));
	CHECK(posted.wr[2].num_sge == 2 && posted.sge[2][0].addr == 0x1000 &&
	      posted.sge[2][1].length == 20 && posted.sge[2][1].lkey == 8);

	/* Growth beyond the initial buffer keeps every WR intact. */
	ibv_wr_start(qpx);
	for (i = 0; i < 40; i++) {
		qpx->wr_id = 100 + i;
		ibv_wr_send(qpx);
		ibv_wr_set_sge(qpx, i, 0x10000 + i, i);
	}
	posted.calls = 0;
	CHECK(ibv_wr_complete(qpx) == 0);
	CHECK(posted.calls == 1 && posted.n == 40);
	for (i = 0; i < 40; i++)
		CHECK(posted.wr[i].wr_id == (uint64_t)(100 + i) &&
		      posted.sge[i][0].addr == (uint64_t)(0x10000 + i) &&
		      posted.sge[i][0].lkey == (uint32_t)i);

	/* A setter with no open WR is an error; nothing is posted. */
	ibv_wr_start(qpx);
	ibv_wr_set_sge(qpx, 1, 2, 3);
	ibv_wr_send(qpx);
	posted.calls = 0;
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(posted.calls == 0);

	/* Unsupported opcodes fail at complete. */
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_local_inv(qpx, 5);
	CHECK(ibv_wr_complete(qpx) == EOPNOTSUPP);
	CHECK(posted.calls == 0);

	/* Abort discards; the next batch starts clean. */
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_abort(qpx);
	ibv_wr_start(qpx);
	CHECK(ibv_wr_complete(qpx) == 0);
	CHECK(posted.calls == 0);

	CHECK(metaroce_destroy_qp(&qpx->qp_base) == 0);
}

static void test_create_qp_ex_checks(void)
{
	struct ibv_qp_init_attr_ex attr = {
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = &fake_pd,
		.send_ops_flags = IBV_QP_EX_WITH_BIND_MW,
	};

	errno = 0;
	CHECK(!metaroce_create_qp_ex(&fake_ctx, &attr) && errno == EOPNOTSUPP);
	attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD;
	errno = 0;
	CHECK(!metaroce_create_qp_ex(&fake_ctx, &attr) && errno == EOPNOTSUPP);
	attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	attr.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	CHECK(!metaroce_create_qp_ex(&fake_ctx, &attr) && errno == EOPNOTSUPP);
	attr.create_flags = 0;
	struct ibv_qp *qp = metaroce_create_qp_ex(&fake_ctx, &attr);
	CHECK(qp);
	/* No send_ops_flags: no ibv_qp_ex. */
	CHECK(qp && !(container_of(qp, struct verbs_qp, qp)->comp_mask & VERBS_QP_EX));
	if (qp)
		metaroce_destroy_qp(qp);
}

static void test_cq_ex(void)
{
	struct ibv_cq_init_attr_ex attr = {
		.cqe = 64,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
			    IBV_WC_EX_WITH_QP_NUM,
	};
	struct ibv_poll_cq_attr pattr = {};
	struct ibv_wc wc[8];
	struct ibv_cq_ex *cq;
	uint64_t expect = 1;
	int ret, n;

	attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	errno = 0;
	CHECK(!metaroce_create_cq_ex(&fake_ctx, &attr) && errno == EOPNOTSUPP);
	attr.wc_flags &= ~(uint64_t)IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;

	cq = metaroce_create_cq_ex(&fake_ctx, &attr);
	CHECK(cq);
	if (!cq)
		return;
	CHECK(cq->read_byte_len && cq->read_imm_data && cq->read_qp_num);
	CHECK(!cq->read_completion_ts && !cq->read_slid);

	/* Empty CQ. */
	cq_total = cq_next = 0;
	CHECK(ibv_start_poll(cq, &pattr) == ENOENT);

	/* 40 completions: read 3, stop; then plain poll 5; then the rest. */
	cq_total = 40;
	CHECK(ibv_start_poll(cq, &pattr) == 0);
	for (n = 0; n < 3; n++) {
		if (n)
			CHECK(ibv_next_poll(cq) == 0);
		CHECK(cq->wr_id == expect);
		CHECK(ibv_wc_read_byte_len(cq) == 100 + expect);
		CHECK(ibv_wc_read_qp_num(cq) == 0x11);
		CHECK(cq->status == (expect % 7 ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR));
		if (expect % 2)
			CHECK((ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM) &&
			      be32toh(ibv_wc_read_imm_data(cq)) == expect);
		expect++;
	}
	ibv_end_poll(cq);

	n = metaroce_poll_cq(ibv_cq_ex_to_cq(cq), 5, wc);
	CHECK(n == 5);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].wr_id == expect++);

	ret = ibv_start_poll(cq, &pattr);
	CHECK(ret == 0);
	while (!ret) {
		CHECK(cq->wr_id == expect);
		expect++;
		ret = ibv_next_poll(cq);
	}
	CHECK(ret == ENOENT);
	ibv_end_poll(cq);
	CHECK(expect == 41);
	CHECK(ibv_start_poll(cq, &pattr) == ENOENT);

	CHECK(metaroce_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
}

static void test_plain_cq(void)
{
	struct ibv_cq *cq = metaroce_create_cq(&fake_ctx, 16, NULL, 0);
	struct ibv_wc wc[4];

	CHECK(cq);
	if (!cq)
		return;
	cq_total = 6;
	cq_next = 0;
	poll_calls = 0;
	CHECK(metaroce_poll_cq(cq, 4, wc) == 4 && wc[3].wr_id == 4);
	CHECK(metaroce_poll_cq(cq, 4, wc) == 2 && wc[1].wr_id == 6);
	CHECK(metaroce_poll_cq(cq, 4, wc) == 0);
	CHECK(poll_calls == 3);	/* one command per poll, nothing buffered */
	CHECK(metaroce_destroy_cq(cq) == 0);
}

int main(void)
{
	test_wr_api();
	test_create_qp_ex_checks();
	test_cq_ex();
	test_plain_cq();
	if (failures) {
		fprintf(stderr, "unit: %d check(s) failed\n", failures);
		return 1;
	}
	printf("ok: unit (wr API emulation, cq_ex emulation, create_*_ex checks)\n");
	return 0;
}
