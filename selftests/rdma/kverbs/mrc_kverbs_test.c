// SPDX-License-Identifier: GPL-2.0
/*
 * mrc_kverbs_test: a kernel verbs consumer for the MetaRoCE selftests.
 *
 * Loading it runs one test against the RDMA device named by `dev` and the
 * module load fails (-EIO) if the test fails:
 *
 *   two RC QPs on that device, connected to each other through the device's
 *   own RoCE v2 GID; kernel memory through the PD's local DMA key; one CQ
 *   polled in softirq context (IB_POLL_SOFTIRQ), as storage and file-system
 *   ULPs use it. Every completion handler runs in softirq and posts the next
 *   work request from there: `count` SENDs, each checked byte for byte at the
 *   receiver, which reposts its receive from its own handler;
 *
 *   then a fast-registration MR (two pages, ib_map_mr_sg) registered by a
 *   REG_MR work request, an RDMA WRITE into it across the page boundary
 *   (checked byte for byte), a LOCAL_INV, and a second WRITE that must fail
 *   with IB_WC_REM_ACCESS_ERR without touching the memory.
 *
 * This is the case a plain spinlock in the provider's post path would
 * deadlock on (the softirq interrupting the QP's own work on the same CPU),
 * and that lockdep reports on a debug kernel. The result is printed as
 * "mrc_kverbs_test: ..." in the kernel log.
 */
#include <linux/completion.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>

static char *dev_name_param = "mrc0";
module_param_named(dev, dev_name_param, charp, 0444);
MODULE_PARM_DESC(dev, "RDMA device to test");
static unsigned int count = 1000;
module_param(count, uint, 0444);
MODULE_PARM_DESC(count, "SENDs to exchange");

#define MSG 256
#define DEPTH 16

struct kv_test {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *tx, *rx;
	u8 *sbuf, *rbuf;	/* DEPTH slots of MSG bytes each */
	u64 sdma, rdma;
	struct ib_cqe send_cqe, recv_cqe[DEPTH];
	atomic_t posted, received, errors, mismatches;
	atomic_t softirq_handlers;	/* handlers that ran in softirq */
	struct completion done;
	/* One work request at a time in the memory-registration phase. */
	struct ib_cqe step_cqe;
	struct completion step;
	enum ib_wc_status step_status;
	enum ib_wc_opcode step_opcode;
};

static struct kv_test *the_test;

static void fill(u8 *p, unsigned int seq)
{
	unsigned int i;

	for (i = 0; i < MSG; i++)
		p[i] = (u8)(seq * 7 + i);
}

static int post_recv(struct kv_test *t, unsigned int slot)
{
	struct ib_sge sge = {
		.addr = t->rdma + slot * MSG,
		.length = MSG,
		.lkey = t->pd->local_dma_lkey,
	};
	struct ib_recv_wr wr = {
		.wr_cqe = &t->recv_cqe[slot],
		.sg_list = &sge,
		.num_sge = 1,
	};

	return ib_post_recv(t->rx, &wr, NULL);
}

static int post_send(struct kv_test *t)
{
	unsigned int seq = atomic_inc_return(&t->posted) - 1;
	unsigned int slot = seq % DEPTH;
	struct ib_sge sge = {
		.addr = t->sdma + slot * MSG,
		.length = MSG,
		.lkey = t->pd->local_dma_lkey,
	};
	struct ib_send_wr wr = {
		.wr_cqe = &t->send_cqe,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IB_WR_SEND_WITH_IMM,
		.send_flags = IB_SEND_SIGNALED,
		.ex.imm_data = cpu_to_be32(seq),
	};

	fill(t->sbuf + slot * MSG, seq);
	return ib_post_send(t->tx, &wr, NULL);
}

static void fail(struct kv_test *t, const char *what, int v)
{
	pr_err("mrc_kverbs_test: %s (%d)\n", what, v);
	atomic_inc(&t->errors);
	complete(&t->done);
}

/* Runs in softirq (IB_POLL_SOFTIRQ): posts the next SEND from here. */
static void send_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kv_test *t = cq->cq_context;

	if (in_softirq())
		atomic_inc(&t->softirq_handlers);
	if (wc->status != IB_WC_SUCCESS) {
		if (wc->status != IB_WC_WR_FLUSH_ERR)
			fail(t, "send completion error", wc->status);
		return;
	}
	if (atomic_read(&t->posted) < count) {
		int ret = post_send(t);

		if (ret)
			fail(t, "post_send from the completion handler", ret);
	}
}

/* Runs in softirq: checks the message, reposts the receive from here. */
static void recv_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kv_test *t = cq->cq_context;
	unsigned int slot = wc->wr_cqe - t->recv_cqe;
	unsigned int seq, n;
	u8 want[MSG];
	int ret;

	if (in_softirq())
		atomic_inc(&t->softirq_handlers);
	if (wc->status != IB_WC_SUCCESS) {
		if (wc->status != IB_WC_WR_FLUSH_ERR)
			fail(t, "receive completion error", wc->status);
		return;
	}
	seq = be32_to_cpu(wc->ex.imm_data);
	n = atomic_inc_return(&t->received);
	fill(want, seq);
	if (wc->byte_len != MSG || !(wc->wc_flags & IB_WC_WITH_IMM) ||
	    seq != n - 1 || memcmp(t->rbuf + slot * MSG, want, MSG))
		atomic_inc(&t->mismatches);
	if (n == count) {
		complete(&t->done);
		return;
	}
	ret = post_recv(t, slot);
	if (ret)
		fail(t, "post_recv from the completion handler", ret);
}

static void step_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kv_test *t = cq->cq_context;

	t->step_status = wc->status;
	t->step_opcode = wc->opcode;
	complete(&t->step);
}

/* Posts one signaled WR on `qp` and waits for its completion. */
static int step(struct kv_test *t, struct ib_qp *qp, struct ib_send_wr *wr,
		enum ib_wc_status want, const char *what)
{
	int ret;

	reinit_completion(&t->step);
	wr->wr_cqe = &t->step_cqe;
	wr->send_flags |= IB_SEND_SIGNALED;
	ret = ib_post_send(qp, wr, NULL);
	if (ret) {
		pr_err("mrc_kverbs_test: post %s: %d\n", what, ret);
		return ret;
	}
	if (!wait_for_completion_timeout(&t->step, 30 * HZ)) {
		pr_err("mrc_kverbs_test: %s: no completion\n", what);
		return -ETIMEDOUT;
	}
	if (t->step_status != want) {
		pr_err("mrc_kverbs_test: %s: status %d, expected %d\n", what,
		       t->step_status, want);
		return -EIO;
	}
	return 0;
}

/* Fast-registration MR: REG_MR, WRITE into it, LOCAL_INV, WRITE refused. */
static int frmr_phase(struct kv_test *t)
{
	const unsigned int len = 3000, at = PAGE_SIZE - 1000;
	struct page *pages;
	struct scatterlist sg;
	struct ib_mr *mr;
	u8 *buf;
	int n, ret;

	pages = alloc_pages(GFP_KERNEL | __GFP_ZERO, 1);
	if (!pages)
		return -ENOMEM;
	buf = page_address(pages);
	mr = ib_alloc_mr(t->pd, IB_MR_TYPE_MEM_REG, 4);
	if (IS_ERR(mr)) {
		ret = PTR_ERR(mr);
		pr_err("mrc_kverbs_test: ib_alloc_mr: %d\n", ret);
		goto free_pages;
	}
	sg_init_one(&sg, buf, 2 * PAGE_SIZE);
	ret = -EIO;
	if (ib_dma_map_sg(t->dev, &sg, 1, DMA_BIDIRECTIONAL) != 1)
		goto dereg;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1) {
		pr_err("mrc_kverbs_test: ib_map_mr_sg: %d\n", n);
		goto unmap;
	}
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	{
		struct ib_reg_wr reg = {
			.wr.opcode = IB_WR_REG_MR,
			.mr = mr,
			.key = mr->rkey,
			.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE,
		};

		ret = step(t, t->rx, &reg.wr, IB_WC_SUCCESS, "REG_MR");
		if (ret)
			goto unmap;
		if (t->step_opcode != IB_WC_REG_MR) {
			pr_err("mrc_kverbs_test: REG_MR completed as opcode %d\n", t->step_opcode);
			ret = -EIO;
			goto unmap;
		}
	}
	{
		struct ib_sge sge = { .addr = t->sdma, .length = len,
				      .lkey = t->pd->local_dma_lkey };
		struct ib_rdma_wr w = {
			.wr.opcode = IB_WR_RDMA_WRITE,
			.wr.sg_list = &sge,
			.wr.num_sge = 1,
			.remote_addr = mr->iova + at,
			.rkey = mr->rkey,
		};
		struct ib_send_wr inv = {
			.opcode = IB_WR_LOCAL_INV,
			.ex.invalidate_rkey = mr->rkey,
		};
		unsigned int i;

		for (i = 0; i < len; i++)
			t->sbuf[i] = (u8)(i * 13 + 5);
		ret = step(t, t->tx, &w.wr, IB_WC_SUCCESS, "RDMA WRITE to the registered MR");
		if (ret)
			goto unmap;
		if (memcmp(buf + at, t->sbuf, len) || buf[at - 1] || buf[at + len]) {
			pr_err("mrc_kverbs_test: the WRITE did not land exactly in the MR's pages\n");
			ret = -EIO;
			goto unmap;
		}
		ret = step(t, t->rx, &inv, IB_WC_SUCCESS, "LOCAL_INV");
		if (ret)
			goto unmap;
		if (t->step_opcode != IB_WC_LOCAL_INV) {
			pr_err("mrc_kverbs_test: LOCAL_INV completed as opcode %d\n", t->step_opcode);
			ret = -EIO;
			goto unmap;
		}
		memset(t->sbuf, 0xee, len);
		w.wr.send_flags = 0;
		ret = step(t, t->tx, &w.wr, IB_WC_REM_ACCESS_ERR,
			   "RDMA WRITE to the invalidated MR");
		if (ret)
			goto unmap;
		for (i = 0; i < len; i++)
			if (buf[at + i] != (u8)(i * 13 + 5)) {
				pr_err("mrc_kverbs_test: the refused WRITE changed memory\n");
				ret = -EIO;
				goto unmap;
			}
	}
	pr_info("mrc_kverbs_test: %s: fast-registration MR: REG_MR, WRITE across pages, LOCAL_INV, refused WRITE: PASS\n",
		dev_name_param);
	ret = 0;
unmap:
	ib_dma_unmap_sg(t->dev, &sg, 1, DMA_BIDIRECTIONAL);
dereg:
	ib_dereg_mr(mr);
free_pages:
	__free_pages(pages, 1);
	return ret;
}

/* The device's first RoCE v2 GID of an IPv4 address (index returned). */
static int find_gid(struct ib_device *dev, union ib_gid *gid)
{
	int i;

	for (i = 0; i < dev->port_data[1].immutable.gid_tbl_len; i++) {
		const struct ib_gid_attr *a = rdma_get_gid_attr(dev, 1, i);
		bool ok;

		if (IS_ERR(a))
			continue;
		ok = a->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
		     ipv6_addr_v4mapped((struct in6_addr *)a->gid.raw);
		if (ok)
			*gid = a->gid;
		rdma_put_gid_attr(a);
		if (ok)
			return i;
	}
	return -ENOENT;
}

static int connect_qp(struct ib_qp *qp, u32 dest, int sgid, union ib_gid *gid,
		      u32 sq_psn, u32 rq_psn)
{
	struct ib_qp_attr a = {};
	int ret;

	a.qp_state = IB_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
				  IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	a.path_mtu = IB_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(&a.ah_attr, 1);
	rdma_ah_set_grh(&a.ah_attr, gid, 0, sgid, 64, 0);
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
				  IB_QP_DEST_QPN | IB_QP_RQ_PSN |
				  IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = 1;
	return ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_TIMEOUT |
				   IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
				   IB_QP_SQ_PSN | IB_QP_MAX_QP_RD_ATOMIC);
}

static int run(struct kv_test *t)
{
	struct ib_qp_init_attr init = {
		.cap = { .max_send_wr = DEPTH, .max_recv_wr = DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_type = IB_SIGNAL_ALL_WR,
		.qp_type = IB_QPT_RC,
	};
	union ib_gid gid;
	unsigned int i;
	int sgid, ret;

	sgid = find_gid(t->dev, &gid);
	if (sgid < 0)
		return sgid;
	t->pd = ib_alloc_pd(t->dev, 0);
	if (IS_ERR(t->pd))
		return PTR_ERR(t->pd);
	t->cq = ib_alloc_cq(t->dev, t, 4 * DEPTH, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(t->cq))
		return PTR_ERR(t->cq);
	init.send_cq = t->cq;
	init.recv_cq = t->cq;
	t->tx = ib_create_qp(t->pd, &init);
	if (IS_ERR(t->tx))
		return PTR_ERR(t->tx);
	t->rx = ib_create_qp(t->pd, &init);
	if (IS_ERR(t->rx))
		return PTR_ERR(t->rx);
	t->sbuf = kzalloc(DEPTH * MSG, GFP_KERNEL);
	t->rbuf = kzalloc(DEPTH * MSG, GFP_KERNEL);
	if (!t->sbuf || !t->rbuf)
		return -ENOMEM;
	t->sdma = ib_dma_map_single(t->dev, t->sbuf, DEPTH * MSG, DMA_TO_DEVICE);
	t->rdma = ib_dma_map_single(t->dev, t->rbuf, DEPTH * MSG, DMA_FROM_DEVICE);
	ret = connect_qp(t->tx, t->rx->qp_num, sgid, &gid, 100, 200);
	if (!ret)
		ret = connect_qp(t->rx, t->tx->qp_num, sgid, &gid, 200, 100);
	if (ret)
		return ret;
	t->send_cqe.done = send_done;
	t->step_cqe.done = step_done;
	for (i = 0; i < DEPTH; i++) {
		t->recv_cqe[i].done = recv_done;
		ret = post_recv(t, i);
		if (ret)
			return ret;
	}
	/* One SEND from process context; every later one from a handler. */
	ret = post_send(t);
	if (ret)
		return ret;
	if (!wait_for_completion_timeout(&t->done, 60 * HZ))
		return -ETIMEDOUT;
	if (atomic_read(&t->errors) || atomic_read(&t->mismatches))
		return -EIO;
	return frmr_phase(t);
}

static void teardown(struct kv_test *t)
{
	if (!IS_ERR_OR_NULL(t->tx)) {
		ib_drain_qp(t->tx);
		ib_destroy_qp(t->tx);
	}
	if (!IS_ERR_OR_NULL(t->rx)) {
		ib_drain_qp(t->rx);
		ib_destroy_qp(t->rx);
	}
	if (t->sdma)
		ib_dma_unmap_single(t->dev, t->sdma, DEPTH * MSG, DMA_TO_DEVICE);
	if (t->rdma)
		ib_dma_unmap_single(t->dev, t->rdma, DEPTH * MSG, DMA_FROM_DEVICE);
	if (!IS_ERR_OR_NULL(t->cq))
		ib_free_cq(t->cq);
	if (!IS_ERR_OR_NULL(t->pd))
		ib_dealloc_pd(t->pd);
	kfree(t->sbuf);
	kfree(t->rbuf);
}

static int kv_add(struct ib_device *dev)
{
	if (the_test && !the_test->dev && !strcmp(dev_name(&dev->dev), dev_name_param))
		the_test->dev = dev;
	return 0;
}

static void kv_remove(struct ib_device *dev, void *data)
{
}

static struct ib_client kv_client = {
	.name = "mrc_kverbs_test",
	.add = kv_add,
	.remove = kv_remove,
};

static int __init kv_init(void)
{
	struct kv_test *t;
	int ret;

	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		return -ENOMEM;
	init_completion(&t->done);
	init_completion(&t->step);
	the_test = t;
	/* Calls kv_add for every registered device before it returns; the
	 * device stays registered until ib_unregister_client returns. */
	ret = ib_register_client(&kv_client);
	if (ret)
		goto out;
	if (!t->dev) {
		pr_err("mrc_kverbs_test: no RDMA device %s\n", dev_name_param);
		ret = -ENODEV;
		goto unreg;
	}
	ret = run(t);
	teardown(t);
	if (!ret && (atomic_read(&t->errors) || atomic_read(&t->mismatches) ||
		     atomic_read(&t->received) != count))
		ret = -EIO;
	pr_info("mrc_kverbs_test: %s: %u SENDs posted, %d received, %d corrupt, %d errors, %u handlers in softirq: %s (%d)\n",
		dev_name_param, atomic_read(&t->posted), atomic_read(&t->received),
		atomic_read(&t->mismatches), atomic_read(&t->errors),
		atomic_read(&t->softirq_handlers), ret ? "FAIL" : "PASS", ret);
unreg:
	ib_unregister_client(&kv_client);
out:
	the_test = NULL;
	kfree(t);
	return ret ? -EIO : 0;
}

static void __exit kv_exit(void)
{
}

module_init(kv_init);
module_exit(kv_exit);
MODULE_DESCRIPTION("MetaRoCE selftest: a kernel verbs consumer posting from softirq");
MODULE_LICENSE("GPL");
