// SPDX-License-Identifier: GPL-2.0
/*
 * verbs-smoke: drive one RDMA device through the public verbs API, stage by
 * stage, the way applications use a provider:
 *
 *   ctx       open the device, query device and port, read a GID
 *   pd        alloc/dealloc a PD
 *   mr        register/deregister memory
 *   ah        create/destroy an address handle to our own GID
 *   cq        create a CQ and an extended CQ, arm one
 *   qp        create two RC QPs (one with the ibv_wr_* API), INIT/RTR/RTS
 *             connected to each other, query one
 *   loopback  SEND with the ibv_wr_* API (polled with ibv_start_poll),
 *             RDMA WRITE with ibv_post_send, inline SEND with immediate,
 *             and check the data
 *
 * Usage: verbs-smoke -d DEVICE [-g GID_INDEX] [-p PORT] [-s LAST_STAGE]
 * Prints one "ok: STAGE" line per stage; exits 1 at the first failure.
 */
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

static const char *const stages[] = { "ctx", "pd", "mr", "ah", "cq", "qp",
				      "loopback" };
enum { S_CTX, S_PD, S_MR, S_AH, S_CQ, S_QP, S_LOOPBACK, S_NR };

#define BUF_SIZE 4096

static int last_stage = S_NR - 1;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                         \
		fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));  \
		exit(1);                                                       \
	} while (0)

static void stage_ok(int stage, const char *detail)
{
	printf("ok: %s%s%s\n", stages[stage], detail ? " - " : "",
	       detail ? detail : "");
	fflush(stdout);
	if (stage == last_stage)
		exit(0);
}

/* Wait up to 5 s for one completion on a plain CQ. */
static void poll_one(struct ibv_cq *cq, struct ibv_wc *wc, const char *what)
{
	struct timespec t0, t;
	int n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			FAIL("ibv_poll_cq (%s)", what);
		if (n == 1)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5) {
			errno = ETIMEDOUT;
			FAIL("no completion for %s", what);
		}
	}
	if (wc->status != IBV_WC_SUCCESS) {
		errno = EIO;
		FAIL("%s completed with %s", what, ibv_wc_status_str(wc->status));
	}
}

/* Wait up to 5 s for one completion on an extended CQ; returns its wr_id. */
static uint64_t poll_one_ex(struct ibv_cq_ex *cq, enum ibv_wc_opcode *op,
			    const char *what)
{
	struct ibv_poll_cq_attr attr = {};
	struct timespec t0, t;
	uint64_t wr_id;
	int ret;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((ret = ibv_start_poll(cq, &attr)) == ENOENT) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5) {
			errno = ETIMEDOUT;
			FAIL("no completion for %s", what);
		}
	}
	if (ret) {
		errno = ret;
		FAIL("ibv_start_poll (%s)", what);
	}
	wr_id = cq->wr_id;
	*op = ibv_wc_read_opcode(cq);
	if (cq->status != IBV_WC_SUCCESS) {
		errno = EIO;
		FAIL("%s completed with %s", what, ibv_wc_status_str(cq->status));
	}
	ibv_end_poll(cq);
	return wr_id;
}

static void to_rts(struct ibv_qp *qp, uint32_t remote_qpn, uint8_t port,
		   int gid_index, const union ibv_gid *gid, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ,
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("modify QP %u to INIT", qp->qp_num);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = 0x1234;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = port;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC |
				      IBV_QP_MIN_RNR_TIMER))
		FAIL("modify QP %u to RTR", qp->qp_num);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x1234;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("modify QP %u to RTS", qp->qp_num);
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *buf,
		      uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	if (ibv_post_recv(qp, &wr, &bad))
		FAIL("ibv_post_recv");
}

int main(int argc, char **argv)
{
	const char *dev_name = NULL;
	int gid_index = 0, port = 1, c, i, n;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_device_attr_ex dattr = {};
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	char detail[256];

	while ((c = getopt(argc, argv, "d:g:p:s:")) != -1) {
		switch (c) {
		case 'd': dev_name = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 's':
			for (last_stage = 0; last_stage < S_NR; last_stage++)
				if (!strcmp(stages[last_stage], optarg))
					break;
			if (last_stage == S_NR) {
				fprintf(stderr, "unknown stage %s\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "usage: %s -d DEVICE [-g GID_INDEX] [-p PORT] "
				"[-s ctx|pd|mr|ah|cq|qp|loopback]\n", argv[0]);
			return 2;
		}
	}
	if (!dev_name) {
		fprintf(stderr, "-d DEVICE is required\n");
		return 2;
	}

	/* ---- ctx ---- */
	list = ibv_get_device_list(&n);
	if (!list)
		FAIL("ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		FAIL("open device %s (%d devices listed)", dev_name, n);
	if (ibv_query_device_ex(ctx, NULL, &dattr))
		FAIL("ibv_query_device_ex");
	if (ibv_query_port(ctx, port, &pattr))
		FAIL("ibv_query_port %d", port);
	if (ibv_query_gid(ctx, port, gid_index, &gid))
		FAIL("ibv_query_gid %d", gid_index);
	snprintf(detail, sizeof(detail),
		 "fw %s, max_qp %d, max_cqe %d, port %d %s link_layer %s mtu %d",
		 dattr.orig_attr.fw_ver, dattr.orig_attr.max_qp,
		 dattr.orig_attr.max_cqe, port,
		 ibv_port_state_str(pattr.state),
		 pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "IB",
		 128 << pattr.active_mtu);
	stage_ok(S_CTX, detail);

	/* ---- pd ---- */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		FAIL("ibv_alloc_pd");
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	if (!pd2 || ibv_dealloc_pd(pd2))
		FAIL("second PD");
	stage_ok(S_PD, NULL);

	/* ---- mr ---- */
	char *src = aligned_alloc(4096, BUF_SIZE), *dst = aligned_alloc(4096, BUF_SIZE);
	if (!src || !dst)
		FAIL("allocate buffers");
	memset(src, 0, BUF_SIZE);
	memset(dst, 0, BUF_SIZE);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		     IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *smr = ibv_reg_mr(pd, src, BUF_SIZE, access);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, BUF_SIZE, access);
	if (!smr || !dmr)
		FAIL("ibv_reg_mr");
	snprintf(detail, sizeof(detail), "lkey 0x%x rkey 0x%x", dmr->lkey,
		 dmr->rkey);
	stage_ok(S_MR, detail);

	/* ---- ah ---- */
	struct ibv_ah_attr ah_attr = {
		.is_global = 1,
		.grh = { .dgid = gid, .sgid_index = gid_index, .hop_limit = 64 },
		.port_num = port,
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &ah_attr);
	if (!ah)
		FAIL("ibv_create_ah");
	if (ibv_destroy_ah(ah))
		FAIL("ibv_destroy_ah");
	stage_ok(S_AH, NULL);

	/* ---- cq ---- */
	struct ibv_cq *cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq_b)
		FAIL("ibv_create_cq");
	struct ibv_cq_init_attr_ex cq_attr = {
		.cqe = 64,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM,
	};
	struct ibv_cq_ex *cq_a = ibv_create_cq_ex(ctx, &cq_attr);
	if (!cq_a)
		FAIL("ibv_create_cq_ex");
	if (ibv_req_notify_cq(cq_b, 0))
		FAIL("ibv_req_notify_cq");
	stage_ok(S_CQ, NULL);

	/* ---- qp ---- */
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(cq_a),
		.recv_cq = ibv_cq_ex_to_cq(cq_a),
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *qp_a = ibv_create_qp_ex(ctx, &qa);
	if (!qp_a)
		FAIL("ibv_create_qp_ex with send_ops_flags");
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp_a);
	if (!qpx)
		FAIL("ibv_qp_to_qp_ex");
	struct ibv_qp_init_attr qb = {
		.send_cq = cq_b,
		.recv_cq = cq_b,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp_b = ibv_create_qp(pd, &qb);
	if (!qp_b)
		FAIL("ibv_create_qp");
	to_rts(qp_a, qp_b->qp_num, port, gid_index, &gid, pattr.active_mtu);
	to_rts(qp_b, qp_a->qp_num, port, gid_index, &gid, pattr.active_mtu);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	if (ibv_query_qp(qp_a, &qattr, IBV_QP_STATE | IBV_QP_DEST_QPN, &qinit))
		FAIL("ibv_query_qp");
	if (qattr.qp_state != IBV_QPS_RTS || qattr.dest_qp_num != qp_b->qp_num) {
		errno = EINVAL;
		FAIL("query_qp: state %d dest %u", qattr.qp_state, qattr.dest_qp_num);
	}
	snprintf(detail, sizeof(detail), "QPs %u <-> %u in RTS", qp_a->qp_num,
		 qp_b->qp_num);
	stage_ok(S_QP, detail);

	/* ---- loopback ---- */
	struct ibv_wc wc;
	enum ibv_wc_opcode op;
	const char msg[] = "metaroce verbs-smoke SEND";

	/* 1. SEND built with the ibv_wr_* API. */
	post_recv(qp_b, dmr, dst, BUF_SIZE, 100);
	strcpy(src, msg);
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, smr->lkey, (uintptr_t)src, sizeof(msg));
	if ((errno = ibv_wr_complete(qpx)))
		FAIL("ibv_wr_complete (SEND)");
	if (poll_one_ex(cq_a, &op, "wr-API SEND") != 1 || op != IBV_WC_SEND) {
		errno = EINVAL;
		FAIL("unexpected send completion");
	}
	poll_one(cq_b, &wc, "receive of SEND");
	if (wc.wr_id != 100 || wc.byte_len != sizeof(msg) || strcmp(dst, msg)) {
		errno = EINVAL;
		FAIL("received %u bytes \"%.40s\"", wc.byte_len, dst);
	}

	/* 2. RDMA WRITE with the classic ibv_post_send. */
	for (i = 0; i < BUF_SIZE; i++)
		src[i] = (char)(i * 7 + 1);
	struct ibv_sge sge = { (uintptr_t)src, BUF_SIZE, smr->lkey };
	struct ibv_send_wr swr = {
		.wr_id = 2, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)dst, .rkey = dmr->rkey },
	};
	struct ibv_send_wr *bad;
	if (ibv_post_send(qp_a, &swr, &bad))
		FAIL("ibv_post_send (RDMA WRITE)");
	if (poll_one_ex(cq_a, &op, "RDMA WRITE") != 2 || op != IBV_WC_RDMA_WRITE) {
		errno = EINVAL;
		FAIL("unexpected RDMA WRITE completion");
	}
	if (memcmp(src, dst, BUF_SIZE)) {
		errno = EINVAL;
		FAIL("RDMA WRITE data mismatch");
	}

	/* 3. Inline SEND with immediate, wr API; the source buffer is reused at once. */
	post_recv(qp_b, dmr, dst, BUF_SIZE, 101);
	char inl[32] = "inline+imm";
	ibv_wr_start(qpx);
	qpx->wr_id = 3;
	/* IBV_SEND_INLINE too: rdma-core 65's rxe provider needs it beside
	 * ibv_wr_set_inline_data(), or its kernel reads the data as SGEs. */
	qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send_imm(qpx, htobe32(0xC0FFEE));
	ibv_wr_set_inline_data(qpx, inl, sizeof(inl));
	memset(inl, 'X', sizeof(inl));
	if ((errno = ibv_wr_complete(qpx)))
		FAIL("ibv_wr_complete (inline SEND_WITH_IMM)");
	if (poll_one_ex(cq_a, &op, "inline SEND_WITH_IMM") != 3 || op != IBV_WC_SEND) {
		errno = EINVAL;
		FAIL("unexpected inline SEND_WITH_IMM completion");
	}
	poll_one(cq_b, &wc, "receive of SEND_WITH_IMM");
	if (!(wc.wc_flags & IBV_WC_WITH_IMM) || be32toh(wc.imm_data) != 0xC0FFEE ||
	    strcmp(dst, "inline+imm")) {
		errno = EINVAL;
		FAIL("immediate 0x%x data \"%.20s\"", be32toh(wc.imm_data), dst);
	}

	/* Orderly teardown (earlier stages leave it to process exit). */
	if (ibv_destroy_qp(qp_a) || ibv_destroy_qp(qp_b))
		FAIL("ibv_destroy_qp");
	if (ibv_destroy_cq(ibv_cq_ex_to_cq(cq_a)) || ibv_destroy_cq(cq_b))
		FAIL("ibv_destroy_cq");
	if (ibv_dereg_mr(smr) || ibv_dereg_mr(dmr))
		FAIL("ibv_dereg_mr");
	if (ibv_dealloc_pd(pd))
		FAIL("ibv_dealloc_pd");
	if (ibv_close_device(ctx))
		FAIL("ibv_close_device");
	ibv_free_device_list(list);
	stage_ok(S_LOOPBACK,
		 "wr-API SEND, RDMA WRITE 4 KiB, inline SEND_WITH_IMM, teardown");
	return 0;
}
