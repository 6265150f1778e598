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
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

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

/*
 * The fake module's mapped rings: when ring_fd is set, create_cq/create_qp
 * answer with rings in a memfd (the fake context's command fd), which the
 * tests also map to play the kernel's side.
 */
static int ring_fd = -1;
#define RING_CQ_OFF 0
#define RING_SQ_OFF 65536
#define RING_RQ_OFF 131072
#define RING_FILE 196608
static void fill_ring(struct metaroce_ring_info *r, uint64_t off, uint32_t n,
		      uint32_t stride)
{
	r->mmap_offset = off;
	r->num_entries = n;
	r->entry_size = stride;
	r->mmap_size = METAROCE_RING_ENTRIES + (uint64_t)n * stride;
}

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

/* The send ring's doorbell: a post_send command with no work requests written
 * to the command fd (the memfd standing in for the device). Anything else
 * written there is a failure; other fds go to the system call. */
static struct {
	int calls;
	int bad;
	uint32_t qp_handle;
} doorbells;

ssize_t write(int fd, const void *buf, size_t n)
{
	const struct ibv_post_send *req = buf;

	if (fd != ring_fd || ring_fd < 0)
		return syscall(SYS_write, fd, buf, n);
	if (n != sizeof(*req) || req->hdr.command != IB_USER_VERBS_CMD_POST_SEND ||
	    req->hdr.in_words != sizeof(*req) / 4 || req->wr_count != 0 ||
	    req->sge_count != 0 || !req->response) {
		doorbells.bad++;
		errno = EINVAL;
		return -1;
	}
	doorbells.calls++;
	doorbells.qp_handle = req->qp_handle;
	return n;
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
	if (ring_fd >= 0)
		fill_ring(&((struct metaroce_create_cq_resp *)(resp + 1))->cq,
			  RING_CQ_OFF, cqe, sizeof(struct ib_uverbs_wc));
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
	qp->context = pd->context;
	qp->qp_type = attr->qp_type;
	qp->pd = pd;
	if (ring_fd >= 0 && resp_size >= sizeof(*resp) +
					  sizeof(struct metaroce_create_qp_resp)) {
		struct metaroce_create_qp_resp *drv = (void *)(resp + 1);

		fill_ring(&drv->sq, RING_SQ_OFF, attr->cap.max_send_wr,
			  sizeof(struct metaroce_send_wqe) + 64);
		fill_ring(&drv->rq, RING_RQ_OFF, attr->cap.max_recv_wr,
			  sizeof(struct metaroce_recv_wqe) + 32);
	}
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

	/* Memory-window operations: the bind's window, key and range, and
	 * the key to invalidate, as the post path lays them out. */
	{
		struct ibv_mw mw = { .rkey = 0x1200 };
		struct ibv_mr mr = { .lkey = 0x3400 };
		struct ibv_mw_bind_info info = {
			.mr = &mr, .addr = 0x5000, .length = 64,
			.mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
		};

		ibv_wr_start(qpx);
		qpx->wr_id = 7;
		ibv_wr_bind_mw(qpx, &mw, 0x1201, &info);
		qpx->wr_id = 8;
		ibv_wr_local_inv(qpx, 0x1201);
		posted.calls = 0;
		CHECK(ibv_wr_complete(qpx) == 0);
		CHECK(posted.calls == 1 && posted.n == 2);
		CHECK(posted.wr[0].opcode == IBV_WR_BIND_MW &&
		      posted.wr[0].bind_mw.mw == &mw &&
		      posted.wr[0].bind_mw.rkey == 0x1201 &&
		      posted.wr[0].bind_mw.bind_info.mr == &mr &&
		      posted.wr[0].bind_mw.bind_info.addr == 0x5000 &&
		      posted.wr[0].bind_mw.bind_info.length == 64 &&
		      posted.wr[0].bind_mw.bind_info.mw_access_flags ==
			      IBV_ACCESS_REMOTE_WRITE);
		CHECK(posted.wr[1].wr_id == 8 &&
		      posted.wr[1].opcode == IBV_WR_LOCAL_INV &&
		      posted.wr[1].invalidate_rkey == 0x1201);
	}

	/* Unsupported opcodes fail at complete. */
	posted.calls = 0;
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_send_tso(qpx, msg, 4, 1000);
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
		.send_ops_flags = IBV_QP_EX_WITH_TSO,
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

/* The ring path: what the provider writes is what the module's layout says,
 * and posting receives and polling never call into the kernel. */
static void test_rings(void)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2, .max_recv_wr = 4, .max_send_sge = 4,
			 .max_recv_sge = 2, .max_inline_data = 64 },
	};
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS };
	struct ibv_send_wr w[3] = {}, *bad;
	struct ibv_recv_wr rw = {}, *rbad;
	struct ibv_sge sg[2] = { { 0x1000, 100, 7 }, { 0x2000, 50, 8 } };
	char msg[] = "inline!";
	struct ibv_sge isg = { (uintptr_t)msg, sizeof(msg), 0 };
	struct ibv_wc wc[4];
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	uint8_t *k;	/* the kernel's view of the memfd */

	ring_fd = memfd_create("metaroce-unit", 0);
	CHECK(ring_fd >= 0 && ftruncate(ring_fd, RING_FILE) == 0);
	k = mmap(NULL, RING_FILE, PROT_READ | PROT_WRITE, MAP_SHARED, ring_fd, 0);
	CHECK(k != MAP_FAILED);
	fake_ctx.cmd_fd = ring_fd;
	fake_pd.context = &fake_ctx;

	qp = metaroce_create_qp(&fake_pd, &init);
	CHECK(qp && to_mqp(qp)->path == &metaroce_qp_ring_path);
	if (!qp || k == MAP_FAILED)
		goto out;
	struct metaroce_ring_hdr *sq = (void *)(k + RING_SQ_OFF);
	struct metaroce_ring_hdr *rq = (void *)(k + RING_RQ_OFF);
	struct metaroce_send_wqe *e0 = (void *)(k + RING_SQ_OFF + METAROCE_RING_ENTRIES);
	struct metaroce_send_wqe *e1 = (void *)((uint8_t *)e0 + sizeof(*e0) + 64);

	/* Not yet RTS: refused before the ring is touched. */
	w[0].wr_id = 11;
	w[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w[0].num_sge = 2;
	w[0].sg_list = sg;
	w[0].imm_data = htobe32(0xabcd);
	w[0].wr.rdma.remote_addr = 0x5000;
	w[0].wr.rdma.rkey = 0x77;
	w[0].next = &w[1];
	w[1].wr_id = 12;
	w[1].opcode = IBV_WR_SEND;
	w[1].num_sge = 1;
	w[1].sg_list = &isg;
	w[1].send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
	w[1].next = &w[2];
	w[2] = w[1];
	w[2].wr_id = 13;
	w[2].next = NULL;
	CHECK(metaroce_post_send(qp, w, &bad) == EINVAL && bad == w);
	CHECK(sq->producer == 0);

	CHECK(metaroce_modify_qp(qp, &rts, IBV_QP_STATE) == 0);
	posted.calls = 0;
	doorbells.calls = 0;
	/* Two fit; the third finds the ring full (nothing has completed). */
	CHECK(metaroce_post_send(qp, w, &bad) == ENOMEM && bad == &w[2]);
	CHECK(sq->producer == 2);
	/* One doorbell, for this QP, and no command carrying work requests. */
	CHECK(doorbells.calls == 1 && doorbells.bad == 0 &&
	      doorbells.qp_handle == qp->handle && posted.calls == 0);
	CHECK(e0->wr_id == 11 && e0->opcode == IBV_WR_RDMA_WRITE_WITH_IMM &&
	      e0->num_sge == 2 && e0->ex == htobe32(0xabcd) &&
	      e0->remote_addr == 0x5000 && e0->rkey == 0x77);
	struct metaroce_sge *s0 = (void *)(e0 + 1);
	CHECK(s0[0].addr == 0x1000 && s0[0].length == 100 && s0[0].lkey == 7 &&
	      s0[1].addr == 0x2000 && s0[1].length == 50 && s0[1].lkey == 8);
	CHECK(e1->wr_id == 12 && e1->num_sge == 0 &&
	      e1->inline_len == sizeof(msg) &&
	      e1->send_flags == (IBV_SEND_INLINE | IBV_SEND_SIGNALED) &&
	      memcmp(e1 + 1, msg, sizeof(msg)) == 0);
	/* The kernel completes one: its slot is free again. */
	__atomic_store_n(&sq->consumer, 1, __ATOMIC_RELEASE);
	CHECK(metaroce_post_send(qp, &w[2], &bad) == 0 && sq->producer == 3);
	/* A message longer than 2^31 bytes: EINVAL at posting. */
	{
		struct ibv_sge big[2] = { { 0x1000, 1u << 31, 7 }, { 0x2000, 1, 7 } };
		struct ibv_send_wr bw = { .wr_id = 14, .opcode = IBV_WR_RDMA_WRITE,
					  .sg_list = big, .num_sge = 2 };

		__atomic_store_n(&sq->consumer, 3, __ATOMIC_RELEASE);
		CHECK(metaroce_post_send(qp, &bw, &bad) == EINVAL && bad == &bw &&
		      sq->producer == 3);
	}
	/* More SGEs than the QP has: EINVAL, nothing written. */
	w[0].num_sge = 5;
	w[0].next = NULL;
	__atomic_store_n(&sq->consumer, 3, __ATOMIC_RELEASE);
	CHECK(metaroce_post_send(qp, w, &bad) == EINVAL && sq->producer == 3);

	/* Receives: no command at all. */
	posted.calls = 0;
	doorbells.calls = 0;
	rw.wr_id = 21;
	rw.num_sge = 2;
	rw.sg_list = sg;
	CHECK(metaroce_post_recv(qp, &rw, &rbad) == 0 && rq->producer == 1);
	struct metaroce_recv_wqe *r0 = (void *)(k + RING_RQ_OFF + METAROCE_RING_ENTRIES);
	CHECK(r0->wr_id == 21 && r0->num_sge == 2 &&
	      ((struct metaroce_sge *)(r0 + 1))[1].lkey == 8);
	CHECK(posted.calls == 0 && doorbells.calls == 0);

	/* Completions: written by the "kernel", polled without a command. */
	cq = metaroce_create_cq(&fake_ctx, 4, NULL, 0);
	CHECK(cq && to_mcq(cq)->path == &metaroce_cq_ring_path);
	if (cq) {
		struct metaroce_ring_hdr *h = (void *)(k + RING_CQ_OFF);
		struct ib_uverbs_wc *ke = (void *)(k + RING_CQ_OFF + METAROCE_RING_ENTRIES);
		int i;

		for (i = 0; i < 4; i++) {
			memset(&ke[i], 0, sizeof(ke[i]));
			ke[i].wr_id = 100 + i;
			ke[i].opcode = IBV_WC_RECV;
			ke[i].byte_len = 10 * i;
			ke[i].qp_num = 0x42;
			/* The kernel's flags: WITH_IMM (1 << 1), WITH_INVALIDATE (1 << 2). */
			ke[i].wc_flags = i == 2 ? 1u << 1 : i == 3 ? 1u << 2 : 0;
			ke[i].ex.imm_data = i == 3 ? 0x1234 : htobe32(0x99);
		}
		__atomic_store_n(&h->producer, 4, __ATOMIC_RELEASE);
		poll_calls = 0;
		CHECK(metaroce_poll_cq(cq, 2, wc) == 2 && wc[0].wr_id == 100 &&
		      wc[1].byte_len == 10 && h->consumer == 2);
		CHECK(metaroce_poll_cq(cq, 1, wc) == 1 && wc[0].wr_id == 102 &&
		      wc[0].qp_num == 0x42 && wc[0].wc_flags == IBV_WC_WITH_IMM &&
		      wc[0].imm_data == htobe32(0x99) && h->consumer == 3);
		/* A SEND_WITH_INV's receive: libibverbs' WITH_INV, the key in host order. */
		CHECK(metaroce_poll_cq(cq, 4, wc) == 1 && wc[0].wr_id == 103 &&
		      wc[0].wc_flags == IBV_WC_WITH_INV && wc[0].invalidated_rkey == 0x1234 &&
		      h->consumer == 4);
		CHECK(metaroce_poll_cq(cq, 4, wc) == 0);
		CHECK(poll_calls == 0);
		CHECK(metaroce_destroy_cq(cq) == 0);
	}
	CHECK(metaroce_destroy_qp(qp) == 0);

	/* UD: the entry carries the address handle's destination. */
	init.qp_type = IBV_QPT_UD;
	qp = metaroce_create_qp(&fake_pd, &init);
	CHECK(qp && to_mqp(qp)->path == &metaroce_qp_ring_path);
	if (qp) {
		struct metaroce_ah ah = {};
		struct ibv_send_wr u = {};
		uint32_t before = sq->producer;
		struct metaroce_send_wqe *ue;

		memset(ah.dgid + 10, 0xff, 2);
		ah.dgid[12] = 198; ah.dgid[13] = 18; ah.dgid[15] = 2;
		CHECK(metaroce_modify_qp(qp, &rts, IBV_QP_STATE) == 0);
		u.wr_id = 31;
		u.opcode = IBV_WR_RDMA_WRITE;
		u.num_sge = 1;
		u.sg_list = sg;
		u.wr.ud.ah = &ah.ibv_ah;
		u.wr.ud.remote_qpn = 0x1234;
		u.wr.ud.remote_qkey = 0x11111111;
		/* Only SENDs exist on UD. */
		CHECK(metaroce_post_send(qp, &u, &bad) == EINVAL && sq->producer == before);
		u.opcode = IBV_WR_SEND;
		CHECK(metaroce_post_send(qp, &u, &bad) == 0 && sq->producer == before + 1);
		ue = (void *)(k + RING_SQ_OFF + METAROCE_RING_ENTRIES +
			      (size_t)(before % init.cap.max_send_wr) * (sizeof(*ue) + 64));
		CHECK(ue->wr_id == 31 && ue->remote_qpn == 0x1234 &&
		      ue->remote_qkey == 0x11111111 && !memcmp(ue->dgid, ah.dgid, 16));
		CHECK(metaroce_destroy_qp(qp) == 0);
	}
out:
	if (k != MAP_FAILED)
		munmap(k, RING_FILE);
	close(ring_fd);
	ring_fd = -1;
	fake_ctx.cmd_fd = -1;
}

int main(void)
{
	test_wr_api();
	test_create_qp_ex_checks();
	test_cq_ex();
	test_plain_cq();
	test_rings();
	if (failures) {
		fprintf(stderr, "unit: %d check(s) failed\n", failures);
		return 1;
	}
	printf("ok: unit (wr API emulation, cq_ex emulation, create_*_ex checks, mapped rings)\n");
	return 0;
}
