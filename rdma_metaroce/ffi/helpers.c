// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers for rdma_metaroce; see helpers.h. Forwarders for macros and static
 * inlines, plus the packet plumbing that is all macros in C (work items, skb
 * construction, routing). No protocol logic lives here.
 */
#include <linux/module.h>
#include <linux/platform_device.h>
#include <linux/udp.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <net/inet_ecn.h>
#include <net/netdev_rx_queue.h>
#include <net/udp_tunnel.h>
#include <net/route.h>
#include <net/dst_cache.h>
#include <net/ip6_route.h>
#include <net/ipv6.h>
#include <linux/workqueue.h>
#include <linux/hrtimer.h>
#include <linux/scatterlist.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <linux/mm.h>
#include <linux/highmem.h>
#include <linux/hmm.h>
#include <rdma/ib_umem_odp.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/rdma_netlink.h>
#include <uapi/rdma/rdma_netlink.h>
#include "helpers.h"

struct ib_device *mrc_ib_alloc_device(size_t size, struct net_device *ndev)
{
	return _ib_alloc_device(size, dev_net(ndev));
}

bool mrc_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

enum ib_port_state mrc_netdev_port_state(struct net_device *ndev)
{
	return ib_get_curr_port_state(ndev);
}

struct net_device *mrc_notifier_netdev(void *info)
{
	return netdev_notifier_info_to_dev(info);
}

void mrc_dev_hold(struct net_device *ndev)
{
	dev_hold(ndev);
}

void mrc_dev_put(struct net_device *ndev)
{
	dev_put(ndev);
}

const char *mrc_netdev_name(const struct net_device *ndev)
{
	return netdev_name(ndev);
}

unsigned short mrc_netdev_type(const struct net_device *ndev)
{
	return ndev->type;
}

unsigned int mrc_netdev_mtu(const struct net_device *ndev)
{
	return READ_ONCE(ndev->mtu);
}

int mrc_netdev_ifindex(const struct net_device *ndev)
{
	return ndev->ifindex;
}

bool mrc_netdev_hw_addr(const struct net_device *ndev, u8 out[6])
{
	if (ndev->addr_len < ETH_ALEN)
		return false;
	memcpy(out, ndev->dev_addr, ETH_ALEN);
	return true;
}

void mrc_ibdev_info(const struct ib_device *dev, const char *msg)
{
	ibdev_info(dev, "%s\n", msg);
}

unsigned int mrc_num_possible_cpus(void)
{
	return num_possible_cpus();
}

struct module *mrc_this_module(void)
{
	return THIS_MODULE;
}

struct device *mrc_parent_register(void)
{
	struct platform_device *pdev;

	pdev = platform_device_register_simple("rdma_metaroce", PLATFORM_DEVID_NONE,
					       NULL, 0);
	return IS_ERR(pdev) ? NULL : &pdev->dev;
}

void mrc_parent_unregister(struct device *dev)
{
	platform_device_unregister(to_platform_device(dev));
}

void mrc_ib_set_parent(struct ib_device *ib, struct device *parent)
{
	ib->dev.parent = parent;
}

struct ib_umem *mrc_umem_get(struct ib_device *ib, u64 addr, size_t len, int access,
			     int *err)
{
	struct ib_umem *umem = ib_umem_get_va(ib, addr, len, access);

	if (IS_ERR(umem)) {
		*err = PTR_ERR(umem);
		return NULL;
	}
	*err = 0;
	return umem;
}

bool mrc_odp_supported(void)
{
	return IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING);
}

#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)
/* The owner's invalidation hook (one function for every ODP MR of the module). */
static void (*mrc_odp_invalidate_fn)(void *owner, size_t first, size_t end);

/*
 * The device writes through kernel mappings, not DMA, so ib_core (which dirties
 * only DMA-mapped pages when it unmaps) never learns of it: every page the
 * record holds writable in [start, end) is marked dirty before it goes, or
 * reclaim could drop a clean-looking page holding data the peer wrote.
 * umem_mutex held.
 */
static void mrc_odp_dirty(struct ib_umem_odp *odp, u64 start, u64 end)
{
	u64 addr;

	lockdep_assert_held(&odp->umem_mutex);
	for (addr = start; addr < end; addr += PAGE_SIZE) {
		unsigned long pfn = odp->map.pfn_list[(addr - ib_umem_start(odp)) >> PAGE_SHIFT];

		if ((pfn & HMM_PFN_VALID) && (pfn & HMM_PFN_WRITE))
			set_page_dirty(compound_head(hmm_pfn_to_page(pfn)));
	}
}

static bool mrc_odp_invalidate(struct mmu_interval_notifier *mni,
			       const struct mmu_notifier_range *range, unsigned long cur_seq)
{
	struct ib_umem_odp *odp = container_of(mni, struct ib_umem_odp, notifier);
	void (*invalidate)(void *owner, size_t first, size_t end);
	unsigned long start, end;

	/* The owner's page table is cleared under a lock a copy may hold. */
	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&odp->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	start = max_t(u64, ib_umem_start(odp), range->start);
	end = min_t(u64, ib_umem_end(odp), range->end);
	invalidate = READ_ONCE(mrc_odp_invalidate_fn);
	if (odp->private && invalidate && start < end)
		invalidate(odp->private, (start - ib_umem_start(odp)) >> PAGE_SHIFT,
			   (end - ib_umem_start(odp) + PAGE_SIZE - 1) >> PAGE_SHIFT);
	if (start < end)
		mrc_odp_dirty(odp, start, end);
	ib_umem_odp_unmap_dma_pages(odp, start, end);
	mutex_unlock(&odp->umem_mutex);
	return true;
}

static const struct mmu_interval_notifier_ops mrc_odp_ops = {
	.invalidate = mrc_odp_invalidate,
};

struct ib_umem_odp *mrc_odp_get(struct ib_device *ib, u64 addr, size_t len, int access,
				int *err)
{
	struct ib_umem_odp *odp;

	odp = ib_umem_odp_get(ib, addr, len, access & ~IB_ACCESS_HUGETLB, &mrc_odp_ops);
	if (IS_ERR(odp)) {
		*err = PTR_ERR(odp);
		return NULL;
	}
	*err = 0;
	return odp;
}

void mrc_odp_set_owner(struct ib_umem_odp *odp, void *owner,
		       void (*invalidate)(void *owner, size_t first, size_t end))
{
	mutex_lock(&odp->umem_mutex);
	WRITE_ONCE(mrc_odp_invalidate_fn, invalidate);
	odp->private = owner;
	mutex_unlock(&odp->umem_mutex);
}

size_t mrc_odp_npages(struct ib_umem_odp *odp)
{
	return (ib_umem_end(odp) - ib_umem_start(odp)) >> PAGE_SHIFT;
}

size_t mrc_odp_first_offset(struct ib_umem_odp *odp)
{
	return odp->umem.address - ib_umem_start(odp);
}

bool mrc_odp_writable(struct ib_umem_odp *odp)
{
	return odp->umem.writable;
}

int mrc_odp_map_lock(struct ib_umem_odp *odp, size_t first, size_t n, bool write, bool fault)
{
	u64 va = ib_umem_start(odp) + ((u64)first << PAGE_SHIFT);
	u64 mask = write && odp->umem.writable ? HMM_PFN_WRITE : 0;
	int np;

	if (!n || first + n > mrc_odp_npages(odp))
		return -EINVAL;
	np = ib_umem_odp_map_dma_and_lock(odp, va, (u64)n << PAGE_SHIFT, mask, fault);
	return np < 0 ? np : 0;
}

struct page *mrc_odp_page(struct ib_umem_odp *odp, size_t idx, bool *writable)
{
	unsigned long pfn;

	lockdep_assert_held(&odp->umem_mutex);
	if (idx >= mrc_odp_npages(odp))
		return NULL;
	pfn = odp->map.pfn_list[idx];
	if (!(pfn & HMM_PFN_VALID))
		return NULL;
	*writable = pfn & HMM_PFN_WRITE;
	return hmm_pfn_to_page(pfn);
}

void mrc_odp_unlock(struct ib_umem_odp *odp)
{
	mutex_unlock(&odp->umem_mutex);
}

void mrc_odp_release(struct ib_umem_odp *odp)
{
	mutex_lock(&odp->umem_mutex);
	mrc_odp_dirty(odp, ib_umem_start(odp), ib_umem_end(odp));
	mutex_unlock(&odp->umem_mutex);
	ib_umem_odp_release(odp);
}
#else
/* No on-demand paging in this kernel: registration says so, and without a
 * registration nothing else is ever called. */
struct ib_umem_odp *mrc_odp_get(struct ib_device *ib, u64 addr, size_t len, int access,
				int *err)
{
	*err = -EOPNOTSUPP;
	return NULL;
}
void mrc_odp_set_owner(struct ib_umem_odp *odp, void *owner,
		       void (*invalidate)(void *owner, size_t first, size_t end)) {}
size_t mrc_odp_npages(struct ib_umem_odp *odp) { return 0; }
size_t mrc_odp_first_offset(struct ib_umem_odp *odp) { return 0; }
bool mrc_odp_writable(struct ib_umem_odp *odp) { return false; }
int mrc_odp_map_lock(struct ib_umem_odp *odp, size_t first, size_t n, bool write, bool fault)
{
	return -EOPNOTSUPP;
}
struct page *mrc_odp_page(struct ib_umem_odp *odp, size_t idx, bool *writable) { return NULL; }
void mrc_odp_unlock(struct ib_umem_odp *odp) {}
void mrc_odp_release(struct ib_umem_odp *odp) {}
#endif

void mrc_page_copy(struct page *page, size_t off, void *buf, size_t len, bool to_page)
{
	u8 *va = kmap_local_page(page);

	if (to_page)
		memcpy(va + off, buf, len);
	else
		memcpy(buf, va + off, len);
	kunmap_local(va);
}

int mrc_check_mr_access(struct ib_device *ib, unsigned int flags)
{
	return ib_check_mr_access(ib, flags);
}

/* Creates the UDP socket described by `cfg` in `ndev`'s namespace, bound to it,
 * and makes it a udp_tunnel socket delivering to `rcv`. */
static struct socket *mrc_udp_open_cfg(struct net_device *ndev, struct udp_port_cfg *cfg,
				       void *user,
				       int (*rcv)(struct sock *sk, struct sk_buff *skb),
				       int *err)
{
	struct udp_tunnel_sock_cfg tnl = {};
	struct socket *sock;

	cfg->bind_ifindex = ndev->ifindex;
	*err = udp_sock_create(dev_net(ndev), cfg, &sock);
	if (*err)
		return NULL;
	tnl.sk_user_data = user;
	tnl.encap_type = 1;
	tnl.encap_rcv = rcv;
	setup_udp_tunnel_sock(dev_net(ndev), sock->sk, &tnl);
	/*
	 * setup_udp_tunnel_sock() turns multicast loopback off; UD multicast needs it
	 * (MetaRoCE MR-3.6.3: the sender's own host's QPs attached to the group
	 * receive its datagrams), as rxe's QP sockets have it.
	 */
	if (cfg->family == AF_INET)
		inet_set_bit(MC_LOOP, sock->sk);
	return sock;
}

struct socket *mrc_udp_open(struct net_device *ndev, u16 port, void *user,
			    int (*rcv)(struct sock *sk, struct sk_buff *skb), int *err)
{
	struct udp_port_cfg cfg = {};

	cfg.family = AF_INET;
	cfg.local_ip.s_addr = htonl(INADDR_ANY);
	cfg.local_udp_port = htons(port);
	return mrc_udp_open_cfg(ndev, &cfg, user, rcv, err);
}

struct socket *mrc_udp_open6(struct net_device *ndev, u16 port, void *user,
			     int (*rcv)(struct sock *sk, struct sk_buff *skb), int *err)
{
	struct udp_port_cfg cfg = {};

	cfg.family = AF_INET6;
	cfg.local_ip6 = in6addr_any;
	cfg.ipv6_v6only = 1;
	cfg.local_udp_port = htons(port);
	return mrc_udp_open_cfg(ndev, &cfg, user, rcv, err);
}

void mrc_udp_close(struct socket *sock)
{
	udp_tunnel_sock_release(sock->sk);
	/* Receive callbacks run under RCU in softirq: let them finish. */
	synchronize_net();
}

void *mrc_sk_user_data(struct sock *sk)
{
	return rcu_dereference_sk_user_data(sk);
}

static void mrc_skb_udp_meta(struct sk_buff *skb, u16 *sport, bool *ce)
{
	*sport = ntohs(udp_hdr(skb)->source);
	if (skb->protocol == htons(ETH_P_IP))
		*ce = INET_ECN_is_ce(ip_hdr(skb)->tos);
	else
		*ce = INET_ECN_is_ce(ipv6_get_dsfield(ipv6_hdr(skb)));
}

const u8 *mrc_skb_udp_payload(struct sk_buff *skb, unsigned int *len, u16 *sport,
			      bool *ce)
{
	struct udphdr *uh;
	unsigned int ulen;

	if (skb_linearize(skb))
		return NULL;
	uh = udp_hdr(skb);
	ulen = ntohs(uh->len);
	if (ulen < sizeof(*uh) || (u8 *)uh + ulen > skb_tail_pointer(skb))
		return NULL;
	*len = ulen - sizeof(*uh);
	mrc_skb_udp_meta(skb, sport, ce);
	return (const u8 *)(uh + 1);
}

const u8 *mrc_skb_udp_pieces(struct sk_buff *skb, unsigned int pull, unsigned int *len,
			     struct mrc_piece *more, unsigned int max, unsigned int *n_more,
			     u16 *sport, bool *ce)
{
	struct skb_shared_info *sh = skb_shinfo(skb);
	unsigned int off, ulen, head, i;
	u64 total;

	*n_more = 0;
	if (!skb_is_nonlinear(skb) || skb_has_frag_list(skb) || !skb_frags_readable(skb) ||
	    sh->nr_frags > max)
		return mrc_skb_udp_payload(skb, len, sport, ce);
	off = skb_transport_offset(skb);
	ulen = ntohs(udp_hdr(skb)->len);
	/* The UDP receive path trimmed the skb to the UDP length. */
	if (ulen < sizeof(struct udphdr) || off + ulen != skb->len)
		return mrc_skb_udp_payload(skb, len, sport, ce);
	if (!pskb_may_pull(skb, off + sizeof(struct udphdr) +
			   min_t(unsigned int, ulen - sizeof(struct udphdr), pull)))
		return NULL;
	/* Pulling may have moved the head, and the shared info with it. */
	sh = skb_shinfo(skb);
	for (i = 0; i < sh->nr_frags; i++) {
		skb_frag_t *f = &sh->frags[i];

		/* Addressed through the direct map, so no highmem. */
		if (PageHighMem(skb_frag_page(f)))
			return mrc_skb_udp_payload(skb, len, sport, ce);
	}
	head = skb_headlen(skb) - off - sizeof(struct udphdr);
	total = head;
	for (i = 0; i < sh->nr_frags; i++) {
		skb_frag_t *f = &sh->frags[i];

		more[i].data = skb_frag_address(f);
		more[i].len = skb_frag_size(f);
		total += more[i].len;
	}
	if (total != ulen - sizeof(struct udphdr))
		return NULL;
	*n_more = sh->nr_frags;
	*len = head;
	mrc_skb_udp_meta(skb, sport, ce);
	return (const u8 *)(udp_hdr(skb) + 1);
}

void mrc_kfree_skb(struct sk_buff *skb)
{
	kfree_skb(skb);
}

struct sk_buff *mrc_skb_clone(struct sk_buff *skb)
{
	return skb_clone(skb, GFP_ATOMIC);
}

/* ---- Data path plumbing ---------------------------------------------------- */

static struct workqueue_struct *mrc_wq;

int mrc_wq_init(void)
{
	/*
	 * Per-CPU: a QP's work runs on the CPU its packets arrive on (see
	 * mrc_qp_io_home), so what it transmits joins the same per-CPU queues as
	 * what the receive path transmits, in order.
	 */
	mrc_wq = alloc_workqueue("metaroce", WQ_PERCPU | WQ_MEM_RECLAIM, 0);
	return mrc_wq ? 0 : -ENOMEM;
}

void mrc_wq_fini(void)
{
	destroy_workqueue(mrc_wq);
}

struct mrc_qp_io {
	struct work_struct work;
	/*
	 * Deadlines shorter than a jiffy (an acknowledgement waiting for a reply,
	 * spec MR-5.4.6): a delayed work would round them up to a whole jiffy and
	 * then wake a worker; this runs the QP in softirq on the arming CPU.
	 */
	struct hrtimer timer;
	/*
	 * Longer deadlines (a path's RTO, a tail probe): the jiffies `deadline`
	 * (0: none) is the truth and `wheel` only ever moves earlier, so
	 * disarming touches no timer and arming seldom does. In a request/
	 * response exchange every message arms and every ACK disarms: queueing
	 * and cancelling a delayed work for each cost more than an ACK's
	 * handling. A wheel timer that goes off before the deadline (or after it
	 * was dropped) re-arms itself (or does nothing), in softirq: no worker
	 * is woken. Arming keeps the earlier of two deadlines, as the delayed
	 * work did: runs on two CPUs arm after their locks, in either order, so
	 * an older run's later deadline must not push back a newer run's
	 * earlier one; an early deadline costs one run that finds nothing due.
	 */
	struct timer_list wheel;
	unsigned long deadline;
	struct sk_buff_head rxq;
	/* Datagrams refused for a page fault, handed in again after it. */
	struct sk_buff_head parked;
	/* Serves the page faults a run met (on-demand paging): may sleep. */
	struct work_struct fault_work;
	/*
	 * Runs the QP in softirq (a BH work item) on the CPU a received datagram
	 * was steered to (mrc_qp_io_rx_steer, spec MR-10.3.5).
	 */
	struct work_struct steer_work;
	/*
	 * Where the QP's ACKs are handled (MR-10.3.5): the CPU its last large
	 * datagram was steered to, or if none (-1), that of its last doorbell.
	 */
	int bulk_cpu;
	int doorbell_cpu;
	/*
	 * When the QP last sent a large packet (jiffies): only then are its ACKs
	 * steered. A request/response exchange of small messages keeps them where
	 * they arrive (an IPI per ACK lengthened its tail, MR-10.3.5).
	 */
	unsigned long bulk_tx;
	void *owner;
	void (*run)(void *owner);
	void (*fault)(void *owner);
	/* The CPU the QP's datagrams last arrived on (-1: none yet). */
	int home;
	/*
	 * Routes of a connected QP's transmissions, per CPU, for `route_daddr`
	 * (ip_route_output_key() per packet was a tenth of a small message's
	 * transmit). Checked against route changes by dst_cache itself.
	 */
	struct dst_cache route;
	__be32 route_daddr;
	/* Set by mrc_qp_io_free: nothing arms, kicks or runs any more. */
	bool dying;
	/*
	 * Kicks and arms so far. Runs end (arm, kick or disarm) outside the QP's
	 * lock, so a run that found nothing to wait for may disarm after a later
	 * run has armed: mrc_qp_io_disarm compares with the snapshot its run took
	 * under the lock and, if anyone asked for a run since, has the work run.
	 */
	atomic_t wants;
};

/*
 * The CPU a QP's work runs on: where its datagrams arrive. A virtual or
 * software link (veth, loopback) hands a transmitted packet to the receive
 * queue of the transmitting CPU, so packets one QP transmits from two CPUs can
 * overtake each other; the receive path and the work transmitting from one CPU
 * keeps them in order.
 */
static int mrc_qp_io_home(struct mrc_qp_io *io)
{
	int cpu = READ_ONCE(io->home);

	return cpu >= 0 && cpu_online(cpu) ? cpu : WORK_CPU_UNBOUND;
}

static void mrc_qp_io_fn(struct work_struct *w)
{
	struct mrc_qp_io *io = container_of(w, struct mrc_qp_io, work);

	if (!READ_ONCE(io->dying))
		io->run(io->owner);
}

static void mrc_qp_io_steer_fn(struct work_struct *w)
{
	struct mrc_qp_io *io = container_of(w, struct mrc_qp_io, steer_work);

	if (!READ_ONCE(io->dying))
		io->run(io->owner);
}

static void mrc_qp_io_fault_fn(struct work_struct *w)
{
	struct mrc_qp_io *io = container_of(w, struct mrc_qp_io, fault_work);

	if (!READ_ONCE(io->dying))
		io->fault(io->owner);
}

/* Bounds the datagrams waiting for a QP's run on the CPU they were steered to. */
#define MRC_QP_IO_STEERED 512

/* Bounds the datagrams one QP keeps while its fault is served. */
#define MRC_QP_IO_PARKED 64

bool mrc_qp_io_park(struct mrc_qp_io *io, struct sk_buff *skb)
{
	if (READ_ONCE(io->dying) || skb_queue_len(&io->parked) >= MRC_QP_IO_PARKED)
		return false;
	skb_queue_tail(&io->parked, skb);
	return true;
}

void mrc_qp_io_unpark(struct mrc_qp_io *io)
{
	struct sk_buff *skb;

	while ((skb = skb_dequeue(&io->parked)))
		skb_queue_tail(&io->rxq, skb);
}

void mrc_qp_io_fault(struct mrc_qp_io *io)
{
	/* Unbound: a fault may sleep for long and must not hold up the runs
	 * queued on the QP's CPU. */
	if (!READ_ONCE(io->dying))
		queue_work(system_dfl_wq, &io->fault_work);
}

static void mrc_qp_io_wheel_fn(struct timer_list *t)
{
	struct mrc_qp_io *io = timer_container_of(io, t, wheel);
	unsigned long deadline = READ_ONCE(io->deadline);

	if (!deadline || READ_ONCE(io->dying))
		return;
	if (time_before(jiffies, deadline))
		/* Dropped and armed again since, for later: wait for it (an arm
		 * meanwhile may have set an earlier one, which stays). */
		timer_reduce(&io->wheel, deadline);
	else if (try_cmpxchg(&io->deadline, &deadline, 0))
		/* Due: the run arms again for what it still waits for. */
		queue_work_on(mrc_qp_io_home(io), mrc_wq, &io->work);
	else
		/* Changed meanwhile: an arm or a disarm saw to it. */
		return;
}

static enum hrtimer_restart mrc_qp_io_timer_fn(struct hrtimer *t)
{
	struct mrc_qp_io *io = container_of(t, struct mrc_qp_io, timer);

	if (!READ_ONCE(io->dying))
		io->run(io->owner);
	return HRTIMER_NORESTART;
}

struct mrc_qp_io *mrc_qp_io_new(void *owner, void (*run)(void *owner),
				void (*fault)(void *owner))
{
	struct mrc_qp_io *io = kzalloc(sizeof(*io), GFP_KERNEL);

	if (!io)
		return NULL;
	if (dst_cache_init(&io->route, GFP_KERNEL)) {
		kfree(io);
		return NULL;
	}
	INIT_WORK(&io->work, mrc_qp_io_fn);
	timer_setup(&io->wheel, mrc_qp_io_wheel_fn, 0);
	INIT_WORK(&io->fault_work, mrc_qp_io_fault_fn);
	INIT_WORK(&io->steer_work, mrc_qp_io_steer_fn);
	io->bulk_cpu = -1;
	io->doorbell_cpu = -1;
	/* Not sent: a jiffy far enough back. */
	io->bulk_tx = jiffies - 2 * HZ;
	io->fault = fault;
	hrtimer_setup(&io->timer, mrc_qp_io_timer_fn, CLOCK_MONOTONIC, HRTIMER_MODE_REL_PINNED_SOFT);
	skb_queue_head_init(&io->rxq);
	skb_queue_head_init(&io->parked);
	io->owner = owner;
	io->run = run;
	io->home = -1;
	return io;
}

void mrc_qp_io_kick(struct mrc_qp_io *io)
{
	if (READ_ONCE(io->dying))
		return;
	atomic_inc(&io->wants);
	/* Pairs with the barrier in mrc_qp_io_disarm. */
	smp_mb__after_atomic();
	queue_work_on(mrc_qp_io_home(io), mrc_wq, &io->work);
}

unsigned int mrc_qp_io_wants(struct mrc_qp_io *io)
{
	return atomic_read(&io->wants);
}

void mrc_qp_io_arm(struct mrc_qp_io *io, u64 usecs, bool precise)
{
	unsigned long deadline, old;

	if (READ_ONCE(io->dying))
		return;
	atomic_inc(&io->wants);
	/* Pairs with the barrier in mrc_qp_io_disarm. */
	smp_mb__after_atomic();
	if (precise && usecs < jiffies_to_usecs(1)) {
		/* The engine asks for its earliest deadline: re-arming moves the timer. */
		hrtimer_start(&io->timer, ns_to_ktime(usecs * NSEC_PER_USEC),
			      HRTIMER_MODE_REL_PINNED_SOFT);
		return;
	}
	/* An earlier short deadline has been met: spare the run it would cost. */
	hrtimer_try_to_cancel(&io->timer);
	/* 0 means none: a deadline that falls on it is a jiffy late. */
	deadline = (jiffies + usecs_to_jiffies(usecs)) ?: 1;
	old = READ_ONCE(io->deadline);
	do {
		/* An earlier deadline stays (see struct mrc_qp_io). */
		if (old && time_before_eq(old, deadline))
			return;
	} while (!try_cmpxchg(&io->deadline, &old, deadline));
	/*
	 * A wheel timer pending for an earlier time stays (it goes off, finds
	 * this deadline still ahead and re-arms for it); one pending for a later
	 * time, or none, is set to this deadline (a path RTO of 10 ms left
	 * behind by a tail probe, MR-5.5.2, must not hold up the next message's
	 * tail probe, MR-5.3.4).
	 */
	timer_reduce(&io->wheel, deadline);
}

void mrc_qp_io_disarm(struct mrc_qp_io *io, unsigned int wants_seen)
{
	bool cancelled;

	/*
	 * An old deadline left in place would wake a worker for nothing: in a
	 * request/response exchange about once per message, preempting the
	 * process on the QP's CPU. Drop it (the wheel timer then goes off
	 * harmlessly), the hrtimer and a queued work; but if a kick or an arm
	 * came since the run's snapshot, what was dropped may be theirs (a post
	 * or a state change the run did not see, a later run's deadline): run
	 * the QP again.
	 */
	cancelled = hrtimer_try_to_cancel(&io->timer) == 1;
	cancelled |= xchg(&io->deadline, 0) != 0;
	/* Tested first: cancel_work() costs atomics and an IRQ-off section even
	 * when nothing is queued, which is nearly always. */
	if (work_pending(&io->work))
		cancelled |= cancel_work(&io->work);
	if (cancelled) {
		/* Pairs with the barriers in mrc_qp_io_kick and mrc_qp_io_arm. */
		smp_mb();
		if (atomic_read(&io->wants) != wants_seen && !READ_ONCE(io->dying))
			queue_work_on(mrc_qp_io_home(io), mrc_wq, &io->work);
	}
}

void mrc_qp_io_rx_push(struct mrc_qp_io *io, struct sk_buff *skb)
{
	WRITE_ONCE(io->home, smp_processor_id());
	skb_queue_tail(&io->rxq, skb);
}

struct sk_buff *mrc_qp_io_rx_pop(struct mrc_qp_io *io)
{
	return skb_dequeue(&io->rxq);
}

/*
 * The link spreads received packets over CPUs itself: several receive queues
 * (a NIC's RSS) or receive packet steering configured on the queue. Steering
 * them again only adds a hand-off: with RPS on a veth, MetaRoCE's steering
 * took a fifth off four QPs' READ streams (MR-10.3.5).
 */
static bool mrc_rx_spread(const struct sk_buff *skb)
{
	const struct net_device *dev = skb->dev;

	if (!dev || dev->real_num_rx_queues > 1)
		return true;
#ifdef CONFIG_RPS
	if (rcu_access_pointer(dev->_rx[0].rps_map))
		return true;
#endif
	return false;
}

/*
 * Spec: MR-10.3.5. A software link (or a NIC with one receive queue and no
 * RPS) hands a packet to the receive queue of the CPU that transmitted it, so
 * without steering the sender's transmission, the receiver's copy into memory
 * and the sender's handling of the ACK all run on one CPU while the others
 * idle. A large payload's copy (or a large READ's answer) goes to the next
 * online CPU; an ACK goes where its QP handles those, or if it has none, to
 * the CPU of its last doorbell, so that what a QP sends (clocked by ACKs and
 * responses, MR-10.3.3) keeps leaving from one CPU.
 */
bool mrc_qp_io_rx_steer(struct mrc_qp_io *io, struct sk_buff *skb, int arrival)
{
	int here = smp_processor_id();
	int to;

	if (mrc_rx_spread(skb))
		return false;
	switch (arrival) {
	case MRC_ARRIVAL_BULK:
		to = cpumask_next_wrap(here, cpu_online_mask);
		if (to != here && READ_ONCE(io->bulk_cpu) != to)
			WRITE_ONCE(io->bulk_cpu, to);
		break;
	case MRC_ARRIVAL_ACK:
		if (time_after(jiffies, READ_ONCE(io->bulk_tx) + 1))
			return false;
		to = READ_ONCE(io->bulk_cpu);
		if (to < 0)
			to = READ_ONCE(io->doorbell_cpu);
		break;
	default:
		return false;
	}
	if (to < 0 || to >= nr_cpu_ids || to == here || !cpu_online(to) || READ_ONCE(io->dying))
		return false;
	/* A backlog the other CPU does not keep up with is worked off here (the
	 * receive path's own backpressure), not queued without bound. */
	if (skb_queue_len_lockless(&io->rxq) >= MRC_QP_IO_STEERED)
		return false;
	/* Timers run where the datagrams are handled (MR-10.3.3). */
	WRITE_ONCE(io->home, to);
	skb_queue_tail(&io->rxq, skb);
	/* A BH work queued on another CPU raises its softirq there through an IPI. */
	queue_work_on(to, system_bh_wq, &io->steer_work);
	return true;
}

void mrc_qp_io_sent_bulk(struct mrc_qp_io *io)
{
	unsigned long now = jiffies;

	if (READ_ONCE(io->bulk_tx) != now)
		WRITE_ONCE(io->bulk_tx, now);
}

void mrc_qp_io_doorbell_here(struct mrc_qp_io *io)
{
	int here = raw_smp_processor_id();

	if (READ_ONCE(io->doorbell_cpu) != here)
		WRITE_ONCE(io->doorbell_cpu, here);
}

void mrc_qp_io_free(struct mrc_qp_io *io)
{
	/*
	 * A run that began before `dying` was seen may still arm the timer or
	 * queue the work once, so each is cancelled again after the other has
	 * finished; runs that begin later return at once.
	 */
	WRITE_ONCE(io->dying, true);
	smp_mb();
	/* The fault work kicks the run: it goes first. */
	cancel_work_sync(&io->fault_work);
	hrtimer_cancel(&io->timer);
	timer_delete_sync(&io->wheel);
	cancel_work_sync(&io->work);
	cancel_work_sync(&io->steer_work);
	hrtimer_cancel(&io->timer);
	timer_delete_sync(&io->wheel);
	cancel_work_sync(&io->work);
	cancel_work_sync(&io->steer_work);
	/* A run that was still going may have queued the fault work again. */
	cancel_work_sync(&io->fault_work);
	skb_queue_purge(&io->rxq);
	skb_queue_purge(&io->parked);
	dst_cache_destroy(&io->route);
	kfree(io);
}

int mrc_rx_cpu(void)
{
	return smp_processor_id();
}

unsigned int mrc_online_cpus(void)
{
	return num_online_cpus();
}

bool mrc_skb_rx_spread(const struct sk_buff *skb)
{
	return mrc_rx_spread(skb);
}

static DEFINE_PER_CPU(u8 *, mrc_staging);

void mrc_staging_free(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		kvfree(per_cpu(mrc_staging, cpu));
		per_cpu(mrc_staging, cpu) = NULL;
	}
}

int mrc_staging_alloc(size_t size)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		u8 *buf = kvzalloc(size, GFP_KERNEL);

		if (!buf) {
			mrc_staging_free();
			return -ENOMEM;
		}
		per_cpu(mrc_staging, cpu) = buf;
	}
	return 0;
}

u8 *mrc_staging_this_cpu(void)
{
	/* Bottom halves off (or in softirq): no other run on this CPU until the
	 * caller is done, and the CPU cannot change under it. */
	WARN_ON_ONCE(!in_softirq());
	return this_cpu_read(mrc_staging);
}

u64 mrc_now_ns(void)
{
	return ktime_get_ns();
}

void mrc_synchronize_rcu(void)
{
	synchronize_rcu();
}

static size_t mrc_umem_skip(struct ib_umem *umem, u64 offset)
{
	return ib_umem_offset(umem) + offset;
}

size_t mrc_umem_read(struct ib_umem *umem, u64 offset, void *buf, size_t len)
{
	return sg_pcopy_to_buffer(umem->sgt_append.sgt.sgl, umem->sgt_append.sgt.orig_nents,
				  buf, len, mrc_umem_skip(umem, offset));
}

size_t mrc_umem_write(struct ib_umem *umem, u64 offset, const void *buf, size_t len)
{
	return sg_pcopy_from_buffer(umem->sgt_append.sgt.sgl, umem->sgt_append.sgt.orig_nents,
				    buf, len, mrc_umem_skip(umem, offset));
}

bool mrc_umem_frags(struct ib_umem *umem, u64 offset, size_t len, struct mrc_frag *out,
		    unsigned int max, unsigned int *n)
{
	u64 skip = mrc_umem_skip(umem, offset);
	unsigned int k = *n, i;
	struct scatterlist *sg;

	for_each_sgtable_sg(&umem->sgt_append.sgt, sg, i) {
		u64 at;

		if (!len)
			break;
		if (skip >= sg->length) {
			skip -= sg->length;
			continue;
		}
		for (at = skip, skip = 0; at < sg->length && len; ) {
			u64 pos = sg->offset + at;
			struct page *page = sg_page(sg) + (pos >> PAGE_SHIFT);
			unsigned int off = pos & ~PAGE_MASK;
			size_t chunk = min3((size_t)(PAGE_SIZE - off), (size_t)(sg->length - at), len);

			if (k == max)
				goto undo;
			/* The skb's own reference: the page outlives the registration if
			 * the packet does. */
			get_page(page);
			out[k].page = page;
			out[k].off = off;
			out[k].len = chunk;
			k++;
			at += chunk;
			len -= chunk;
		}
	}
	if (len)
		goto undo;
	*n = k;
	return true;
undo:
	while (k > *n)
		put_page(out[--k].page);
	return false;
}

void mrc_frags_put(struct mrc_frag *frags, unsigned int n)
{
	while (n)
		put_page(frags[--n].page);
}

void mrc_frags_copy(const struct mrc_frag *frags, unsigned int n, u8 *out)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		memcpy_from_page(out, frags[i].page, frags[i].off, frags[i].len);
		out += frags[i].len;
	}
}

unsigned long mrc_copy_from_user(void *dst, u64 uaddr, size_t len)
{
	return copy_from_user(dst, u64_to_user_ptr(uaddr), len);
}

/* Room in front of a packet for the lower headers: the link layer's, then IPv6
 * (the larger IP header) and UDP. */
#define MRC_TX_HEADROOM (LL_MAX_HEADER + sizeof(struct ipv6hdr) + sizeof(struct udphdr))

struct sk_buff *mrc_tx_skb_alloc(unsigned int len, u8 **data)
{
	/* Called under the QP's engine spinlock. */
	struct sk_buff *skb = alloc_skb(MRC_TX_HEADROOM + len, GFP_ATOMIC);

	if (!skb)
		return NULL;
	skb_reserve(skb, MRC_TX_HEADROOM);
	*data = skb->data;
	return skb;
}

struct sk_buff *mrc_tx_skb_frags(const u8 *hdr, unsigned int hl, struct mrc_frag *frags,
				 unsigned int n)
{
	struct sk_buff *skb;
	unsigned int i, bytes = 0;

	if (n > MAX_SKB_FRAGS)
		return NULL;
	skb = alloc_skb(MRC_TX_HEADROOM + hl, GFP_ATOMIC);
	if (!skb)
		return NULL;
	skb_reserve(skb, MRC_TX_HEADROOM);
	skb_put_data(skb, hdr, hl);
	for (i = 0; i < n; i++) {
		/* The skb takes over the page reference. */
		skb_fill_page_desc(skb, i, frags[i].page, frags[i].off, frags[i].len);
		bytes += frags[i].len;
	}
	skb->len += bytes;
	skb->data_len += bytes;
	skb->truesize += bytes;
	/* Others (the registration's owner) may write these pages: anything that
	 * would change the payload in place must copy it first. */
	skb_shinfo(skb)->flags |= SKBFL_SHARED_FRAG;
	return skb;
}

/* Makes sure `skb` has room for the headers `dev` and IP/UDP put in front. */
static int mrc_tx_headroom(struct sk_buff *skb, struct net_device *dev, unsigned int ip_len)
{
	return skb_cow_head(skb, LL_RESERVED_SPACE(dev) + ip_len + sizeof(struct udphdr));
}

/*
 * A UD datagram to an IPv4 multicast group (MetaRoCE MR-3.6.3). The tunnel
 * transmit (iptunnel_xmit) raises the per-CPU transmit recursion count around
 * ip_local_out(), and ip_mc_output() loops a multicast packet back to the
 * host's own receivers only at recursion level 0 (sk_mc_loop(), which also
 * needs the socket's IP_MULTICAST_LOOP, see mrc_udp_open_cfg): sent that way,
 * the QPs of this host attached to the group would never get their copy. So the
 * UDP and IP headers are built here and the packet goes to ip_local_out()
 * directly, as rxe sends.
 */
static void mrc_udp_xmit4_mcast(struct sock *sk, struct rtable *rt, struct sk_buff *skb,
				__be32 saddr, __be32 daddr, u8 tos, __be16 sport, __be16 dport)
{
	struct udphdr *uh;
	struct iphdr *iph;
	int len;

	skb_scrub_packet(skb, false);
	__skb_push(skb, sizeof(*uh));
	skb_reset_transport_header(skb);
	len = skb->len;
	uh = udp_hdr(skb);
	uh->source = sport;
	uh->dest = dport;
	uh->len = htons(len);
	udp_set_csum(false, skb, saddr, daddr, len);
	memset(IPCB(skb), 0, sizeof(*IPCB(skb)));
	skb_dst_set(skb, &rt->dst);
	__skb_push(skb, sizeof(*iph));
	skb_reset_network_header(skb);
	iph = ip_hdr(skb);
	iph->version = 4;
	iph->ihl = sizeof(*iph) >> 2;
	iph->tos = tos;
	iph->frag_off = 0;
	iph->ttl = ip4_dst_hoplimit(&rt->dst);
	iph->protocol = IPPROTO_UDP;
	iph->saddr = saddr;
	iph->daddr = daddr;
	__ip_select_ident(sock_net(sk), iph, 1);
	skb->protocol = htons(ETH_P_IP);
	ip_local_out(sock_net(sk), sk, skb);
}

/* The route from `*saddr` (0: the route chooses, and says which in `*saddr`) to
 * `daddr` out of the device socket's bound device, or an ERR_PTR. */
static struct rtable *mrc_route4(struct sock *sk, __be32 *saddr, __be32 daddr)
{
	struct flowi4 fl = {};
	struct rtable *rt;

	fl.flowi4_oif = sk->sk_bound_dev_if;
	fl.saddr = *saddr;
	fl.daddr = daddr;
	fl.flowi4_proto = IPPROTO_UDP;
	rt = ip_route_output_key(sock_net(sk), &fl);
	if (!IS_ERR(rt))
		*saddr = fl.saddr;
	return rt;
}

/* Sends `skb` (see mrc_udp_xmit4_skb) along `rt`, whose reference it takes. */
static int mrc_udp_send4(struct sock *sk, struct rtable *rt, __be32 saddr, __be32 daddr,
			 u16 sport, u16 dport, u8 tos, struct sk_buff *skb, size_t len)
{
	int err;

	if (len)
		skb_put(skb, len); /* an skb of fragments is complete (and skb_put() would BUG) */
	err = mrc_tx_headroom(skb, rt->dst.dev, sizeof(struct iphdr));
	if (err) {
		ip_rt_put(rt);
		kfree_skb(skb);
		return err;
	}
	if (ipv4_is_multicast(daddr))
		mrc_udp_xmit4_mcast(sk, rt, skb, saddr, daddr, tos, htons(sport), htons(dport));
	else
		udp_tunnel_xmit_skb(rt, sk, skb, saddr, daddr, tos, ip4_dst_hoplimit(&rt->dst),
				    0, htons(sport), htons(dport), false, false, 0);
	return 0;
}

/*
 * The tunnel transmit counts its recursion per CPU (iptunnel_xmit), so it must
 * not migrate, and the route cache is per CPU: bottom halves stay off around
 * both, as in a device's xmit. The engine calls this under its _bh lock; a
 * caller in plain process context would leak the counter until the CPU drops
 * every packet it sends ("Dead loop on virtual device").
 */
int mrc_udp_xmit4_skb(struct mrc_qp_io *route, struct socket *sock, __be32 daddr, u16 sport,
		      u16 dport, u8 tos, struct sk_buff *skb, size_t len)
{
	struct rtable *rt = NULL;
	__be32 saddr = 0;
	int err;

	local_bh_disable();
	if (route) {
		/* A connected QP's destination changes only in a modify_qp before
		 * it sends; a change drops every CPU's entry. */
		if (unlikely(READ_ONCE(route->route_daddr) != daddr)) {
			dst_cache_reset(&route->route);
			WRITE_ONCE(route->route_daddr, daddr);
		}
		rt = dst_cache_get_ip4(&route->route, &saddr);
	}
	if (!rt) {
		rt = mrc_route4(sock->sk, &saddr, daddr);
		if (IS_ERR(rt)) {
			kfree_skb(skb);
			local_bh_enable();
			return PTR_ERR(rt);
		}
		if (route)
			dst_cache_set_ip4(&route->route, &rt->dst, saddr);
	}
	err = mrc_udp_send4(sock->sk, rt, saddr, daddr, sport, dport, tos, skb, len);
	local_bh_enable();
	return err;
}

int mrc_udp_xmit6_skb(struct socket *sock, const u8 saddr[16], const u8 daddr[16], u16 sport,
		      u16 dport, u8 tclass, struct sk_buff *skb, size_t len)
{
	struct sock *sk = sock->sk;
	struct flowi6 fl6 = {};
	struct dst_entry *dst;
	int err;

	fl6.flowi6_oif = sk->sk_bound_dev_if;
	memcpy(&fl6.saddr, saddr, 16);
	memcpy(&fl6.daddr, daddr, 16);
	fl6.flowi6_proto = IPPROTO_UDP;
	dst = ip6_dst_lookup_flow(sock_net(sk), sk, &fl6, NULL);
	if (IS_ERR(dst)) {
		kfree_skb(skb);
		return PTR_ERR(dst);
	}
	err = dst->error;
	if (len)
		skb_put(skb, len); /* an skb of fragments is complete (and skb_put() would BUG) */
	if (!err)
		err = mrc_tx_headroom(skb, dst->dev, sizeof(struct ipv6hdr));
	if (err) {
		dst_release(dst);
		kfree_skb(skb);
		return err;
	}
	/*
	 * The lookup chose the source address if the caller left it unspecified.
	 * Bottom halves off, as for IPv4 (mrc_udp_xmit4_skb).
	 */
	local_bh_disable();
	udp_tunnel6_xmit_skb(dst, sk, skb, dst->dev, &fl6.saddr, &fl6.daddr, tclass,
			     ip6_dst_hoplimit(dst), 0, htons(sport), htons(dport), false, 0);
	local_bh_enable();
	return 0;
}

void mrc_skb_addrs6(struct sk_buff *skb, u8 saddr[16], u8 daddr[16])
{
	if (skb->protocol == htons(ETH_P_IPV6)) {
		memcpy(saddr, &ipv6_hdr(skb)->saddr, 16);
		memcpy(daddr, &ipv6_hdr(skb)->daddr, 16);
	} else {
		memset(saddr, 0, 16);
		memset(daddr, 0, 16);
	}
}

void mrc_skb_addrs4(struct sk_buff *skb, __be32 *saddr, __be32 *daddr)
{
	if (skb->protocol == htons(ETH_P_IP)) {
		*saddr = ip_hdr(skb)->saddr;
		*daddr = ip_hdr(skb)->daddr;
	} else {
		*saddr = 0;
		*daddr = 0;
	}
}

void mrc_cq_notify(struct ib_cq *cq)
{
	if (cq->comp_handler)
		cq->comp_handler(cq, cq->cq_context);
}

void mrc_cq_event(struct ib_cq *cq, int event)
{
	struct ib_event ev = {};

	if (!cq->event_handler)
		return;
	ev.device = cq->device;
	ev.element.cq = cq;
	ev.event = event;
	cq->event_handler(&ev, cq->cq_context);
}

void mrc_srq_event(struct ib_srq *srq, int event)
{
	struct ib_event ev = {};

	if (!srq->event_handler)
		return;
	ev.device = srq->device;
	ev.element.srq = srq;
	ev.event = event;
	srq->event_handler(&ev, srq->srq_context);
}

void *mrc_nl_driver_table_start(struct sk_buff *msg)
{
	return nla_nest_start_noflag(msg, RDMA_NLDEV_ATTR_DRIVER);
}

void mrc_nl_driver_table_end(struct sk_buff *msg, void *table, bool ok)
{
	if (ok)
		nla_nest_end(msg, table);
	else
		nla_nest_cancel(msg, table);
}

/* ---- rings mapped into a process ---- */

struct mrc_ring_mem {
	struct rdma_user_mmap_entry rdma;
	void *kva;
};

struct mrc_ring_mem *mrc_ring_mem_new(struct ib_udata *udata, size_t size, int *err)
{
	struct ib_ucontext *uctx;
	struct mrc_ring_mem *mem;

	if (!udata) {
		*err = -EINVAL;
		return NULL;
	}
	uctx = container_of(udata, struct uverbs_attr_bundle, driver_udata)->context;
	size = PAGE_ALIGN(size);
	mem = kzalloc(sizeof(*mem), GFP_KERNEL);
	if (!mem) {
		*err = -ENOMEM;
		return NULL;
	}
	mem->kva = vmalloc_user(size);
	if (!mem->kva) {
		kfree(mem);
		*err = -ENOMEM;
		return NULL;
	}
	*err = rdma_user_mmap_entry_insert(uctx, &mem->rdma, size);
	if (*err) {
		vfree(mem->kva);
		kfree(mem);
		return NULL;
	}
	return mem;
}

void *mrc_ring_mem_kva(struct mrc_ring_mem *mem)
{
	return mem->kva;
}

u64 mrc_ring_mem_offset(struct mrc_ring_mem *mem)
{
	return rdma_user_mmap_get_offset(&mem->rdma);
}

void mrc_ring_mem_remove(struct mrc_ring_mem *mem)
{
	rdma_user_mmap_entry_remove(&mem->rdma);
}

int mrc_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *entry;
	struct mrc_ring_mem *mem;
	int ret;

	entry = rdma_user_mmap_entry_get(uctx, vma);
	if (!entry)
		return -EINVAL;
	mem = container_of(entry, struct mrc_ring_mem, rdma);
	if (vma->vm_end - vma->vm_start > entry->npages * PAGE_SIZE)
		ret = -EINVAL;
	else
		ret = remap_vmalloc_range(vma, mem->kva, 0);
	rdma_user_mmap_entry_put(entry);
	return ret;
}

void mrc_mmap_free(struct rdma_user_mmap_entry *entry)
{
	struct mrc_ring_mem *mem = container_of(entry, struct mrc_ring_mem, rdma);

	vfree(mem->kva);
	kfree(mem);
}

struct ib_udata *mrc_attrs_udata(struct uverbs_attr_bundle *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}

int mrc_udata_respond(struct ib_udata *udata, const void *src, size_t len)
{
	return ib_copy_to_udata(udata, (void *)src, min(len, udata->outlen));
}

u32 mrc_load_acquire_u32(const u32 *p)
{
	return smp_load_acquire(p);
}

void mrc_store_release_u32(u32 *p, u32 v)
{
	smp_store_release(p, v);
}

void mrc_rwlock_init(void *lock, const char *name, void *key)
{
#ifdef CONFIG_DEBUG_SPINLOCK
	__rwlock_init((rwlock_t *)lock, name, (struct lock_class_key *)key);
#else
	rwlock_init((rwlock_t *)lock);
#endif
}

/* As mrc_spin_lock_nosoftirq, for the reader side of an rwlock. */
bool mrc_read_lock_nosoftirq(void *lock)
{
	if (in_interrupt() || irqs_disabled()) {
		read_lock((rwlock_t *)lock);
		return false;
	}
	read_lock_bh((rwlock_t *)lock);
	return true;
}

void mrc_read_unlock_nosoftirq(void *lock, bool bh)
{
	if (bh)
		read_unlock_bh((rwlock_t *)lock);
	else
		read_unlock((rwlock_t *)lock);
}

bool mrc_write_lock_nosoftirq(void *lock)
{
	if (in_interrupt() || irqs_disabled()) {
		write_lock((rwlock_t *)lock);
		return false;
	}
	write_lock_bh((rwlock_t *)lock);
	return true;
}

void mrc_write_unlock_nosoftirq(void *lock, bool bh)
{
	if (bh)
		write_unlock_bh((rwlock_t *)lock);
	else
		write_unlock((rwlock_t *)lock);
}

bool mrc_spin_lock_nosoftirq(void *lock)
{
	if (in_interrupt() || irqs_disabled()) {
		spin_lock((spinlock_t *)lock);
		return false;
	}
	spin_lock_bh((spinlock_t *)lock);
	return true;
}

void mrc_spin_unlock_nosoftirq(void *lock, bool bh)
{
	if (bh)
		spin_unlock_bh((spinlock_t *)lock);
	else
		spin_unlock((spinlock_t *)lock);
}

bool mrc_spin_trylock_nosoftirq(void *lock, bool *bh)
{
	if (in_interrupt() || irqs_disabled()) {
		*bh = false;
		return spin_trylock((spinlock_t *)lock);
	}
	*bh = true;
	return spin_trylock_bh((spinlock_t *)lock);
}
