// SPDX-License-Identifier: GPL-2.0
/*
 * MetaRoCE provider: the ibv_qp_ex work-request API (ibv_wr_start,
 * ibv_wr_send, ibv_wr_set_sge, ..., ibv_wr_complete) emulated on top of the
 * QP's ordinary post_send path.
 *
 * Each ibv_wr_<opcode>() call opens a new struct ibv_send_wr; the setters
 * fill in the open one. Scatter lists and inline data are copied at call
 * time (the API lets the caller reuse its buffers immediately), and
 * ibv_wr_complete() links everything into one chain for a single post.
 * The first error is remembered and returned by ibv_wr_complete(), which
 * then posts nothing, as the API specifies.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "metaroce.h"

static void pending_release(struct metaroce_pending_wr *p)
{
	free(p->sgl);
	free(p->inline_buf);
	p->sgl = NULL;
	p->inline_buf = NULL;
}

static void batch_reset(struct metaroce_wr_batch *b)
{
	unsigned int i;

	for (i = 0; i < b->nr; i++)
		pending_release(&b->wrs[i]);
	b->nr = 0;
	b->err = 0;
}

static void batch_fail(struct metaroce_wr_batch *b, int err)
{
	if (!b->err)
		b->err = err;
}

/* Open a new work request with the QP's current wr_id and wr_flags. */
static struct metaroce_pending_wr *wr_open(struct ibv_qp_ex *qpx,
					   enum ibv_wr_opcode opcode)
{
	struct metaroce_qp *qp = qp_ex_to_mqp(qpx);
	struct metaroce_wr_batch *b = &qp->batch;
	struct metaroce_pending_wr *p;

	if (b->err)
		return NULL;
	if (b->nr == b->cap) {
		unsigned int cap = b->cap ? 2 * b->cap : 16;

		p = realloc(b->wrs, cap * sizeof(*p));
		if (!p) {
			batch_fail(b, ENOMEM);
			return NULL;
		}
		b->wrs = p;
		b->cap = cap;
	}
	p = &b->wrs[b->nr++];
	memset(p, 0, sizeof(*p));
	p->wr.wr_id = qpx->wr_id;
	p->wr.send_flags = qpx->wr_flags;
	p->wr.opcode = opcode;
	return p;
}

/* The work request the setters apply to. */
static struct metaroce_pending_wr *wr_current(struct ibv_qp_ex *qpx)
{
	struct metaroce_wr_batch *b = &qp_ex_to_mqp(qpx)->batch;

	if (b->err)
		return NULL;
	if (!b->nr) {
		batch_fail(b, EINVAL);
		return NULL;
	}
	return &b->wrs[b->nr - 1];
}

static void wr_unsupported(struct ibv_qp_ex *qpx)
{
	batch_fail(&qp_ex_to_mqp(qpx)->batch, EOPNOTSUPP);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
				    const struct ibv_data_buf *buf_list);

/* ---- opcodes ---- */

static void wr_send(struct ibv_qp_ex *qpx)
{
	wr_open(qpx, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
	struct metaroce_pending_wr *p = wr_open(qpx, IBV_WR_SEND_WITH_IMM);

	if (p)
		p->wr.imm_data = imm_data;
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	struct metaroce_pending_wr *p = wr_open(qpx, IBV_WR_SEND_WITH_INV);

	if (p)
		p->wr.invalidate_rkey = invalidate_rkey;
}

static void wr_rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode opcode,
		    uint32_t rkey, uint64_t remote_addr, __be32 imm_data)
{
	struct metaroce_pending_wr *p = wr_open(qpx, opcode);

	if (!p)
		return;
	p->wr.wr.rdma.rkey = rkey;
	p->wr.wr.rdma.remote_addr = remote_addr;
	p->wr.imm_data = imm_data;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey,
			  uint64_t remote_addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey,
			      uint64_t remote_addr, __be32 imm_data)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm_data);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey,
			 uint64_t remote_addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void wr_atomic(struct ibv_qp_ex *qpx, enum ibv_wr_opcode opcode,
		      uint32_t rkey, uint64_t remote_addr, uint64_t compare_add,
		      uint64_t swap)
{
	struct metaroce_pending_wr *p = wr_open(qpx, opcode);

	if (!p)
		return;
	p->wr.wr.atomic.rkey = rkey;
	p->wr.wr.atomic.remote_addr = remote_addr;
	p->wr.wr.atomic.compare_add = compare_add;
	p->wr.wr.atomic.swap = swap;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey,
			      uint64_t remote_addr, uint64_t compare,
			      uint64_t swap)
{
	wr_atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr, compare,
		  swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey,
				uint64_t remote_addr, uint64_t add)
{
	wr_atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr, add, 0);
}

/* A type 2 window's bind; the caller chose the new rkey (the window's index,
 * a new low byte) and keeps track of it. */
static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *info)
{
	struct metaroce_pending_wr *p = wr_open(qpx, IBV_WR_BIND_MW);

	if (!p)
		return;
	p->wr.bind_mw.mw = mw;
	p->wr.bind_mw.rkey = rkey;
	p->wr.bind_mw.bind_info = *info;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	struct metaroce_pending_wr *p = wr_open(qpx, IBV_WR_LOCAL_INV);

	if (p)
		p->wr.invalidate_rkey = invalidate_rkey;
}

static void wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz,
			uint16_t mss)
{
	wr_unsupported(qpx);
}

/* The 8 bytes are the caller's again when this returns: they travel as inline
 * data (the post path puts them in the WQE's operand field). */
static void wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey,
			    uint64_t remote_addr, const void *atomic_wr)
{
	struct ibv_data_buf buf = { .addr = (void *)atomic_wr, .length = 8 };

	wr_rdma(qpx, IBV_WR_ATOMIC_WRITE, rkey, remote_addr, 0);
	wr_set_inline_data_list(qpx, 1, &buf);
}

/* A FLUSH is posted as an ibv_send_wr laid out as an atomic (remote_addr,
 * rkey; the range's length in compare_add) with its METAROCE_FLUSH_* bits in
 * imm_data: the fields of ibv_send_wr that ring_write_send reads for it. */
static void wr_flush(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
		     size_t len, uint8_t type, uint8_t level)
{
	struct metaroce_pending_wr *p;
	uint32_t bits = type;

	if (level == IBV_FLUSH_MR)
		bits |= METAROCE_FLUSH_WHOLE_REGION;
	else if (level != IBV_FLUSH_RANGE)
		bits = 0;	/* refused at post: no such selectivity */
	p = wr_open(qpx, IBV_WR_FLUSH);
	if (!p)
		return;
	p->wr.wr.atomic.remote_addr = remote_addr;
	p->wr.wr.atomic.rkey = rkey;
	p->wr.wr.atomic.compare_add = len;
	p->wr.imm_data = bits;
}

/* ---- setters ---- */

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah,
			   uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct metaroce_pending_wr *p = wr_current(qpx);

	if (!p)
		return;
	p->wr.wr.ud.ah = ah;
	p->wr.wr.ud.remote_qpn = remote_qpn;
	p->wr.wr.ud.remote_qkey = remote_qkey;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
	wr_unsupported(qpx);
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr,
		       uint32_t length)
{
	struct metaroce_pending_wr *p = wr_current(qpx);

	if (!p)
		return;
	pending_release(p);
	p->sge.addr = addr;
	p->sge.length = length;
	p->sge.lkey = lkey;
	p->wr.num_sge = 1;
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge,
			    const struct ibv_sge *sg_list)
{
	struct metaroce_pending_wr *p = wr_current(qpx);

	if (!p)
		return;
	pending_release(p);
	p->wr.num_sge = 0;
	if (!num_sge)
		return;
	p->sgl = malloc(num_sge * sizeof(*sg_list));
	if (!p->sgl) {
		batch_fail(&qp_ex_to_mqp(qpx)->batch, ENOMEM);
		return;
	}
	memcpy(p->sgl, sg_list, num_sge * sizeof(*sg_list));
	p->wr.num_sge = num_sge;
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
				    const struct ibv_data_buf *buf_list)
{
	struct metaroce_pending_wr *p = wr_current(qpx);
	size_t i, len = 0;
	uint8_t *dst;

	if (!p)
		return;
	pending_release(p);
	p->wr.num_sge = 0;
	p->wr.send_flags |= IBV_SEND_INLINE;
	for (i = 0; i < num_buf; i++)
		len += buf_list[i].length;
	if (!len)
		return;
	if (len > UINT32_MAX) {
		batch_fail(&qp_ex_to_mqp(qpx)->batch, EINVAL);
		return;
	}
	p->inline_buf = dst = malloc(len);
	if (!dst) {
		batch_fail(&qp_ex_to_mqp(qpx)->batch, ENOMEM);
		return;
	}
	/* Inline data is a byte stream: one contiguous copy is equivalent. */
	for (i = 0; i < num_buf; i++) {
		memcpy(dst, buf_list[i].addr, buf_list[i].length);
		dst += buf_list[i].length;
	}
	p->sge.addr = (uintptr_t)p->inline_buf;
	p->sge.length = len;
	p->sge.lkey = 0;
	p->wr.num_sge = 1;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
			       size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	wr_set_inline_data_list(qpx, 1, &buf);
}

/* ---- batch control ---- */

static void wr_start(struct ibv_qp_ex *qpx)
{
	batch_reset(&qp_ex_to_mqp(qpx)->batch);
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	batch_reset(&qp_ex_to_mqp(qpx)->batch);
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct metaroce_qp *qp = qp_ex_to_mqp(qpx);
	struct metaroce_wr_batch *b = &qp->batch;
	struct ibv_send_wr *bad_wr = NULL;
	unsigned int i;
	int ret;

	ret = b->err;
	if (!ret && b->nr) {
		/* Addresses are final now: the array no longer moves. */
		for (i = 0; i < b->nr; i++) {
			struct metaroce_pending_wr *p = &b->wrs[i];

			p->wr.sg_list = p->sgl ? p->sgl : &p->sge;
			p->wr.next = i + 1 < b->nr ? &b->wrs[i + 1].wr : NULL;
		}
		ret = qp->path->post_send(qp, &b->wrs[0].wr, &bad_wr);
	}
	batch_reset(b);
	return ret;
}

void metaroce_wr_api_init(struct metaroce_qp *qp)
{
	struct ibv_qp_ex *qpx = &qp->vqp.qp_ex;

	qpx->wr_start = wr_start;
	qpx->wr_complete = wr_complete;
	qpx->wr_abort = wr_abort;

	qpx->wr_send = wr_send;
	qpx->wr_send_imm = wr_send_imm;
	qpx->wr_send_inv = wr_send_inv;
	qpx->wr_rdma_write = wr_rdma_write;
	qpx->wr_rdma_write_imm = wr_rdma_write_imm;
	qpx->wr_rdma_read = wr_rdma_read;
	qpx->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	qpx->wr_atomic_fetch_add = wr_atomic_fetch_add;
	qpx->wr_bind_mw = wr_bind_mw;
	qpx->wr_local_inv = wr_local_inv;
	qpx->wr_send_tso = wr_send_tso;
	qpx->wr_atomic_write = wr_atomic_write;
	qpx->wr_flush = wr_flush;

	qpx->wr_set_ud_addr = wr_set_ud_addr;
	qpx->wr_set_xrc_srqn = wr_set_xrc_srqn;
	qpx->wr_set_sge = wr_set_sge;
	qpx->wr_set_sge_list = wr_set_sge_list;
	qpx->wr_set_inline_data = wr_set_inline_data;
	qpx->wr_set_inline_data_list = wr_set_inline_data_list;
}

void metaroce_wr_api_cleanup(struct metaroce_qp *qp)
{
	batch_reset(&qp->batch);
	free(qp->batch.wrs);
	qp->batch.wrs = NULL;
	qp->batch.cap = 0;
}
