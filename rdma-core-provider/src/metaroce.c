// SPDX-License-Identifier: GPL-2.0
/*
 * MetaRoCE provider: device matching, context, and the verbs that have no
 * data path (query, PD, MR, AH, multicast). See metaroce.h for the design.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metaroce.h"

static int metaroce_query_device(struct ibv_context *ctx,
				 const struct ibv_query_device_ex_input *input,
				 struct ibv_device_attr_ex *attr,
				 size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t fw;
	int ret;

	ret = ibv_cmd_query_device_any(ctx, input, attr, attr_size, &resp,
				       &resp_size);
	if (ret)
		return ret;

	/* The kernel reports fw_ver as a number; show it as major.minor.sub. */
	fw = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver),
		 "%u.%u.%u", (unsigned int)(fw >> 32) & 0xffff,
		 (unsigned int)(fw >> 16) & 0xffff, (unsigned int)fw & 0xffff);
	return 0;
}

static int metaroce_query_port(struct ibv_context *ctx, uint8_t port,
			       struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd = {};

	return ibv_cmd_query_port(ctx, port, attr, &cmd, sizeof(cmd));
}

static struct ibv_pd *metaroce_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_alloc_pd cmd = {};
	struct ib_uverbs_alloc_pd_resp resp = {};
	struct ibv_pd *pd;
	int ret;

	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_alloc_pd(ctx, pd, &cmd, sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		free(pd);
		errno = ret;
		return NULL;
	}
	return pd;
}

static int metaroce_dealloc_pd(struct ibv_pd *pd)
{
	int ret = ibv_cmd_dealloc_pd(pd);

	if (ret)
		return ret;
	free(pd);
	return 0;
}

static struct ibv_mr *metaroce_reg_mr(struct ibv_pd *pd, void *addr,
				      size_t length, uint64_t hca_va,
				      int access)
{
	struct ibv_reg_mr cmd = {};
	struct ib_uverbs_reg_mr_resp resp = {};
	struct verbs_mr *vmr;
	int ret;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd,
			     sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		free(vmr);
		errno = ret;
		return NULL;
	}
	return &vmr->ibv_mr;
}

static struct ibv_mr *metaroce_reg_dmabuf_mr(struct ibv_pd *pd,
					     uint64_t offset, size_t length,
					     uint64_t iova, int fd, int access)
{
	struct verbs_mr *vmr;
	int ret;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_reg_dmabuf_mr(pd, offset, length, iova, fd, access, vmr,
				    NULL);
	if (ret) {
		free(vmr);
		errno = ret;
		return NULL;
	}
	return &vmr->ibv_mr;
}

static int metaroce_rereg_mr(struct verbs_mr *vmr, int flags,
			     struct ibv_pd *pd, void *addr, size_t length,
			     int access)
{
	struct ibv_rereg_mr cmd = {};
	struct ib_uverbs_rereg_mr_resp resp = {};

	return ibv_cmd_rereg_mr(vmr, flags, addr, length, (uintptr_t)addr,
				access, pd, &cmd, sizeof(cmd), &resp,
				sizeof(resp));
}

/*
 * ibv_advise_mr(): prefetch of on-demand (IBV_ACCESS_ON_DEMAND) regions, done
 * by the module (MetaRoCE MR-9.2.5); nothing of it happens in the provider.
 */
static int metaroce_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
			      uint32_t flags, struct ibv_sge *sg_list,
			      uint32_t num_sge)
{
	return ibv_cmd_advise_mr(pd, advice, flags, sg_list, num_sge);
}

static int metaroce_dereg_mr(struct verbs_mr *vmr)
{
	int ret = ibv_cmd_dereg_mr(vmr);

	if (ret)
		return ret;
	free(vmr);
	return 0;
}

/*
 * Memory windows (MetaRoCE MR-9.2.4). The module keeps them with the regions;
 * binding goes through the send queue, so a bind takes effect in order with
 * the QP's other work.
 */
static struct ibv_mw *metaroce_alloc_mw(struct ibv_pd *pd,
					enum ibv_mw_type type)
{
	struct ibv_alloc_mw cmd = {};
	struct ib_uverbs_alloc_mw_resp resp = {};
	struct ibv_mw *mw;
	int ret;

	mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_alloc_mw(pd, type, mw, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret) {
		free(mw);
		errno = ret;
		return NULL;
	}
	return mw;
}

static int metaroce_dealloc_mw(struct ibv_mw *mw)
{
	int ret = ibv_cmd_dealloc_mw(mw);

	if (ret)
		return ret;
	free(mw);
	return 0;
}

/* ibv_bind_mw (type 1; libibverbs checked the type and the PDs): a BIND_MW
 * work request under the window's next key. The window carries that key
 * from now on; if the bind completes in error, the caller undoes it. */
static int metaroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
			    struct ibv_mw_bind *bind)
{
	struct ibv_send_wr wr = {}, *bad_wr;
	int ret;

	wr.wr_id = bind->wr_id;
	wr.send_flags = bind->send_flags;
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = bind->bind_info;
	ret = metaroce_post_send(qp, &wr, &bad_wr);
	if (ret)
		return ret;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}

/*
 * Address handles are resolved by the kernel (for RoCE it looks up the
 * destination MAC itself), so the provider only passes the attributes on.
 */
static struct ibv_ah *metaroce_create_ah(struct ibv_pd *pd,
					 struct ibv_ah_attr *attr)
{
	struct ib_uverbs_create_ah_resp resp = {};
	struct metaroce_ah *ah;
	int ret;

	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_create_ah(pd, &ah->ibv_ah, attr, &resp, sizeof(resp));
	if (ret) {
		free(ah);
		errno = ret;
		return NULL;
	}
	/* The kernel accepted it, so it has a GRH (RoCE needs one). */
	memcpy(ah->dgid, attr->grh.dgid.raw, sizeof(ah->dgid));
	return &ah->ibv_ah;
}

static int metaroce_destroy_ah(struct ibv_ah *ibah)
{
	int ret = ibv_cmd_destroy_ah(ibah);

	if (ret)
		return ret;
	free(to_mah(ibah));
	return 0;
}

static int metaroce_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
				 uint16_t lid)
{
	return ibv_cmd_attach_mcast(qp, gid, lid);
}

static int metaroce_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
				 uint16_t lid)
{
	return ibv_cmd_detach_mcast(qp, gid, lid);
}

static void metaroce_free_context(struct ibv_context *ibctx);

/*
 * Every op not listed here keeps libibverbs' default, which fails with
 * EOPNOTSUPP (XRC, WQs/RSS, flows, counters, DM, TD/parent
 * domains, ECE, ...).
 */
static const struct verbs_context_ops metaroce_ctx_ops = {
	.advise_mr = metaroce_advise_mr,
	.alloc_mw = metaroce_alloc_mw,
	.alloc_pd = metaroce_alloc_pd,
	.attach_mcast = metaroce_attach_mcast,
	.bind_mw = metaroce_bind_mw,
	.create_ah = metaroce_create_ah,
	.create_cq = metaroce_create_cq,
	.create_cq_ex = metaroce_create_cq_ex,
	.create_qp = metaroce_create_qp,
	.create_qp_ex = metaroce_create_qp_ex,
	.create_srq = metaroce_create_srq,
	.dealloc_mw = metaroce_dealloc_mw,
	.dealloc_pd = metaroce_dealloc_pd,
	.dereg_mr = metaroce_dereg_mr,
	.destroy_ah = metaroce_destroy_ah,
	.destroy_cq = metaroce_destroy_cq,
	.destroy_qp = metaroce_destroy_qp,
	.destroy_srq = metaroce_destroy_srq,
	.detach_mcast = metaroce_detach_mcast,
	.free_context = metaroce_free_context,
	.modify_qp = metaroce_modify_qp,
	.modify_srq = metaroce_modify_srq,
	.poll_cq = metaroce_poll_cq,
	.post_recv = metaroce_post_recv,
	.post_send = metaroce_post_send,
	.post_srq_recv = metaroce_post_srq_recv,
	.query_device_ex = metaroce_query_device,
	.query_port = metaroce_query_port,
	.query_qp = metaroce_query_qp,
	.query_srq = metaroce_query_srq,
	.reg_dmabuf_mr = metaroce_reg_dmabuf_mr,
	.reg_mr = metaroce_reg_mr,
	.req_notify_cq = metaroce_req_notify_cq,
	.rereg_mr = metaroce_rereg_mr,
	.resize_cq = metaroce_resize_cq,
};

static struct verbs_context *metaroce_alloc_context(struct ibv_device *ibdev,
						    int cmd_fd,
						    void *private_data)
{
	struct verbs_sysfs_dev *sysfs = verbs_get_device(ibdev)->sysfs;
	struct metaroce_context *ctx;
	struct ibv_get_context cmd = {};
	struct ib_uverbs_get_context_resp resp = {};

	/*
	 * The kernel rejects every uverbs ioctl whose header names another
	 * driver id than the device's (EINVAL). MetaRoCE, out of tree, has
	 * none (RDMA_DRIVER_UNKNOWN); use whatever the kernel reported over
	 * netlink, which is RDMA_DRIVER_UNKNOWN for MetaRoCE and also what
	 * libibverbs assumes when netlink is unavailable.
	 */
	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx,
					   sysfs ? sysfs->driver_id :
						   RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;

	if (ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd), NULL, &resp,
				sizeof(resp)))
		goto err;

	verbs_set_ops(&ctx->ibv_ctx, &metaroce_ctx_ops);
	verbs_debug(&ctx->ibv_ctx,
		    "metaroce provider: context opened (command path, uverbs ABI %u)\n",
		    sysfs ? sysfs->abi_ver : 0);
	return &ctx->ibv_ctx;

err:
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
	return NULL;
}

static void metaroce_free_context(struct ibv_context *ibctx)
{
	struct metaroce_context *ctx = to_mctx(ibctx);

	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static struct verbs_device *
metaroce_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
	struct metaroce_device *dev;

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	return &dev->ibv_dev;
}

static void metaroce_uninit_device(struct verbs_device *vdev)
{
	free(container_of(vdev, struct metaroce_device, ibv_dev));
}

/*
 * An out-of-tree kernel module has no rdma_driver_id, so the kernel reports
 * RDMA_DRIVER_UNKNOWN and matching by driver id is impossible. Every
 * MetaRoCE ib_device is parented by the platform device "rdma_metaroce",
 * so <ibdev>/device/modalias reads "platform:rdma_metaroce" whatever name
 * the user gave the device.
 */
static const struct verbs_match_ent metaroce_match_table[] = {
	VERBS_MODALIAS_MATCH("platform:rdma_metaroce", NULL),
#ifdef METAROCE_TEST_CLAIM_RXE
	/*
	 * Test builds only (make TEST_CLAIM_RXE=1, test-vm-rxe.sh): also claim
	 * soft-RoCE devices, so that the command path can be run against a
	 * real kernel before the MetaRoCE module implements the verbs. rxe
	 * speaks uverbs ABI 2 and wants its own udata for CQs/QPs/SRQs, so only
	 * the context, query, PD, MR and AH verbs work there.
	 */
	VERBS_DRIVER_ID(RDMA_DRIVER_RXE),
#endif
	{},
};

#ifdef METAROCE_TEST_CLAIM_RXE
#define METAROCE_MAX_ABI 2
#else
#define METAROCE_MAX_ABI METAROCE_UVERBS_ABI_VERSION
#endif

static const struct verbs_device_ops metaroce_dev_ops = {
	.name = "metaroce",
	.match_min_abi_version = METAROCE_UVERBS_ABI_VERSION,
	.match_max_abi_version = METAROCE_MAX_ABI,
	.match_table = metaroce_match_table,
	.alloc_device = metaroce_alloc_device,
	.uninit_device = metaroce_uninit_device,
	.alloc_context = metaroce_alloc_context,
};

PROVIDER_DRIVER(metaroce, metaroce_dev_ops);
