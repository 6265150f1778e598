/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers for rdma_metaroce: the macros and static inline functions of the
 * kernel headers that Rust cannot call directly. Each is a one-line forwarder;
 * no driver logic lives here.
 */
#ifndef RDMA_METAROCE_HELPERS_H
#define RDMA_METAROCE_HELPERS_H

#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>

/* ib_alloc_device_with_net(): allocates `size` bytes whose head is a struct ib_device,
 * in the network namespace of `ndev`. */
struct ib_device *mrc_ib_alloc_device(size_t size, struct net_device *ndev);
/* ib_device_try_get() */
bool mrc_ib_device_try_get(struct ib_device *dev);
/* ib_get_curr_port_state() */
enum ib_port_state mrc_netdev_port_state(struct net_device *ndev);
/* netdev_notifier_info_to_dev() */
struct net_device *mrc_notifier_netdev(void *info);
/* dev_hold() / dev_put() */
void mrc_dev_hold(struct net_device *ndev);
void mrc_dev_put(struct net_device *ndev);
/* netdev_name(): the interface name, NUL-terminated. */
const char *mrc_netdev_name(const struct net_device *ndev);
/* ndev->type, ndev->mtu, ndev->ifindex */
unsigned short mrc_netdev_type(const struct net_device *ndev);
unsigned int mrc_netdev_mtu(const struct net_device *ndev);
int mrc_netdev_ifindex(const struct net_device *ndev);
/* The 6-byte hardware address, copied into `out`; false if the device has none. */
bool mrc_netdev_hw_addr(const struct net_device *ndev, u8 out[6]);
/* ibdev_info(dev, "%s", msg) */
void mrc_ibdev_info(const struct ib_device *dev, const char *msg);
/* num_possible_cpus() */
unsigned int mrc_num_possible_cpus(void);
/* THIS_MODULE of rdma_metaroce. */
struct module *mrc_this_module(void);

/* The platform device every MetaRoCE ib_device hangs under: its modalias
 * ("platform:rdma_metaroce") is what the rdma-core provider matches. Returns the
 * struct device, or NULL on failure. */
struct device *mrc_parent_register(void);
void mrc_parent_unregister(struct device *dev);
/* ib_device->dev.parent = parent */
void mrc_ib_set_parent(struct ib_device *ib, struct device *parent);
/* ib_umem_get_va(): pins user memory; NULL with *err set on failure. */
struct ib_umem *mrc_umem_get(struct ib_device *ib, u64 addr, size_t len, int access,
			     int *err);
/* ib_check_mr_access(): 0 or a negative errno. */
int mrc_check_mr_access(struct ib_device *ib, unsigned int flags);

struct socket;
struct sock;
struct sk_buff;
/* A kernel UDP socket on `port` (network byte order is handled here) in the
 * namespace of `ndev`, bound to that device, whose datagrams go to `rcv` with
 * `user` as the socket's user data (udp_tunnel encapsulation). NULL and *err on
 * failure. */
struct socket *mrc_udp_open(struct net_device *ndev, u16 port, void *user,
			    int (*rcv)(struct sock *sk, struct sk_buff *skb), int *err);
/* The same on IPv6 (v6-only), for peers addressed by IPv6 GIDs. */
struct socket *mrc_udp_open6(struct net_device *ndev, u16 port, void *user,
			     int (*rcv)(struct sock *sk, struct sk_buff *skb), int *err);
/* Releases the socket and waits until no receive callback can still run. */
void mrc_udp_close(struct socket *sock);
/* rcu_dereference_sk_user_data() */
void *mrc_sk_user_data(struct sock *sk);
/* The UDP payload of a received datagram (after skb_linearize()), its UDP source
 * port and whether the IP header's ECN field is CE. NULL if it cannot be read. */
const u8 *mrc_skb_udp_payload(struct sk_buff *skb, unsigned int *len, u16 *sport,
			      bool *ce);
/* One piece of a received datagram: `len` bytes at `data`. */
struct mrc_piece {
	const u8 *data;
	u32 len;
};
/* The UDP payload of a received datagram without joining its pieces: the linear
 * part (after making at least its first `pull` payload bytes linear, which may
 * copy them out of the fragments) is returned,
 * `*len` bytes long, and the page fragments that follow it go into
 * `more[0..*n_more]` (addressed through the direct map). A datagram whose pieces
 * cannot be described so (a frag list, more than `max` fragments, highmem or
 * unreadable fragments) is linearized instead (*n_more = 0). Source port and CE as
 * for mrc_skb_udp_payload(); NULL if it cannot be read. */
const u8 *mrc_skb_udp_pieces(struct sk_buff *skb, unsigned int pull, unsigned int *len,
			     struct mrc_piece *more, unsigned int max, unsigned int *n_more,
			     u16 *sport, bool *ce);
/* kfree_skb() */
void mrc_kfree_skb(struct sk_buff *skb);
/* A clone sharing the data (GFP_ATOMIC: the receive path); NULL without memory. */
struct sk_buff *mrc_skb_clone(struct sk_buff *skb);
/* Reports `event` (enum ib_event_type) on the SRQ through its event handler. */
void mrc_srq_event(struct ib_srq *srq, int event);
/* nla_nest_start(msg, RDMA_NLDEV_ATTR_DRIVER): opens the driver-details table of a
 * restrack entry; NULL when the message is full. */
void *mrc_nl_driver_table_start(struct sk_buff *msg);
/* nla_nest_end() / nla_nest_cancel() of that table. */
void mrc_nl_driver_table_end(struct sk_buff *msg, void *table, bool ok);

#endif

/* ---- Data path plumbing ---------------------------------------------------- */

/* The module's workqueue (alloc_workqueue() is a macro); every QP's protocol work
 * runs on it. Created at module init, destroyed at exit. */
int mrc_wq_init(void);
void mrc_wq_fini(void);

/* Per-QP I/O context: a work item that calls `run(owner)` in process context on
 * the module's workqueue, two timers that have it run later (an hrtimer that
 * calls it in softirq for deadlines under a jiffy, a timer-wheel timer that
 * queues the work for longer ones), a queue of received datagrams (whose
 * spinlock is IRQ-safe, so the softirq receive path may push to it) and the
 * route cache of a connected QP's transmissions. */
struct mrc_qp_io;
struct mrc_qp_io *mrc_qp_io_new(void *owner, void (*run)(void *owner),
				void (*fault)(void *owner));
/* Runs the work as soon as possible (queues it on the QP's home CPU; timers stay). */
void mrc_qp_io_kick(struct mrc_qp_io *io);
/* Runs the QP after `usecs`: when `precise` and under a jiffy from the hrtimer
 * (re-armed), else from the work at jiffy resolution, unless an earlier such
 * deadline is set (a disarm drops it). */
void mrc_qp_io_arm(struct mrc_qp_io *io, u64 usecs, bool precise);
/* How many kicks and arms there have been (a run's snapshot for mrc_qp_io_disarm,
 * taken under the QP's lock). */
unsigned int mrc_qp_io_wants(struct mrc_qp_io *io);
/* The engine has no deadline left: cancels the hrtimer, the deadline (a wheel
 * timer still pending goes off and does nothing) and a queued work, and runs the
 * QP again if a kick or an arm came after the snapshot `wants_seen`. */
void mrc_qp_io_disarm(struct mrc_qp_io *io, unsigned int wants_seen);
/* Queues a received skb (from softirq; this CPU becomes the work's home). Takes ownership. */
void mrc_qp_io_rx_push(struct mrc_qp_io *io, struct sk_buff *skb);
/* The oldest queued skb, or NULL. */
struct sk_buff *mrc_qp_io_rx_pop(struct mrc_qp_io *io);
/* What a received datagram is, for where its QP handles it (mrc_qp_io_rx_steer). */
enum mrc_arrival {
	/* Handled where it arrives. */
	MRC_ARRIVAL_HERE = 0,
	/* A packet carrying a large payload: copied on another CPU. */
	MRC_ARRIVAL_BULK = 1,
	/* An acknowledgement: handled on the CPU of the QP's last doorbell. */
	MRC_ARRIVAL_ACK = 2,
};
/* Queues a received skb for a run in softirq on another CPU, chosen by `arrival`
 * (the receive-side steering of spec MR-10.3.5); false, having done nothing, if
 * it should be handled on this CPU (the caller then pushes and runs). */
bool mrc_qp_io_rx_steer(struct mrc_qp_io *io, struct sk_buff *skb, int arrival);
/* The QP's process rang its doorbell on this CPU: acknowledgements go there. */
void mrc_qp_io_doorbell_here(struct mrc_qp_io *io);
/* The QP sent a large packet: its ACKs are steered for the next jiffy or two. */
void mrc_qp_io_sent_bulk(struct mrc_qp_io *io);
/* Cancels the work and the timer (waiting for running ones), drops queued skbs,
 * frees. Process context; nobody may push or kick afterwards. */
void mrc_qp_io_free(struct mrc_qp_io *io);
/* Has `fault(owner)` run in process context (the QP's page-fault work, for
 * memory its run found not resident); nothing once the io is dying. */
void mrc_qp_io_fault(struct mrc_qp_io *io);
/* Keeps a received datagram refused for a page fault, to be handed in again
 * once the fault work has run (mrc_qp_io_unpark): true if kept, false (the
 * caller frees it) when MRC_QP_IO_PARKED are kept already. */
bool mrc_qp_io_park(struct mrc_qp_io *io, struct sk_buff *skb);
/* Moves the kept datagrams back to the receive queue, in their order. */
void mrc_qp_io_unpark(struct mrc_qp_io *io);

/* Spec MR-6.3.5: the CPU handling a received datagram (softirq: preemption is
 * off), how many CPUs are online, and whether the datagram's link spreads
 * received packets over CPUs (RSS or RPS). */
int mrc_rx_cpu(void);
unsigned int mrc_online_cpus(void);
bool mrc_skb_rx_spread(const struct sk_buff *skb);

/* One staging buffer of `size` zeroed bytes per possible CPU (kvzalloc), where the QPs'
 * runs build packets: each run uses its CPU's with bottom halves off, so two
 * never share one. 0 or -ENOMEM (then none is kept). */
int mrc_staging_alloc(size_t size);
/* Frees them (no run may be under way). */
void mrc_staging_free(void);
/* This CPU's staging buffer; the caller has bottom halves off (a QP's engine
 * lock) and uses it only until it turns them on again. */
u8 *mrc_staging_this_cpu(void);
/* ktime_get_ns() */
u64 mrc_now_ns(void);
/* synchronize_rcu() */
void mrc_synchronize_rcu(void);

/*
 * On-demand paging (ODP): a user MR whose pages are not pinned. ib_core keeps
 * the range under an mmu interval notifier; these wrap its calls, all in
 * PAGE_SIZE pages numbered from the first page of the range.
 */
struct ib_umem_odp;
struct page;
/* The kernel has on-demand paging (CONFIG_INFINIBAND_ON_DEMAND_PAGING). */
bool mrc_odp_supported(void);
/* ib_umem_odp_get() (IB_ACCESS_HUGETLB dropped: pages are always PAGE_SIZE
 * here); NULL with *err set on failure. Invalidations call `invalidate` (set
 * by mrc_odp_set_owner) for the owner. */
struct ib_umem_odp *mrc_odp_get(struct ib_device *ib, u64 addr, size_t len, int access,
				int *err);
/* Names the owner passed to `invalidate(owner, first, end)`, which an
 * invalidation of pages [first, end) calls with umem_mutex held before the
 * pages are released; NULL owner: none. Process context. */
void mrc_odp_set_owner(struct ib_umem_odp *odp, void *owner,
		       void (*invalidate)(void *owner, size_t first, size_t end));
/* Pages in the range, the registration's first byte's offset into the first,
 * and whether the registration may be written. */
size_t mrc_odp_npages(struct ib_umem_odp *odp);
size_t mrc_odp_first_offset(struct ib_umem_odp *odp);
bool mrc_odp_writable(struct ib_umem_odp *odp);
/* ib_umem_odp_map_dma_and_lock() over pages [first, first + n): makes them
 * present (writable if `write`) when `fault`, or records what is present now;
 * on success (0) umem_mutex is held until mrc_odp_unlock(). Sleeps. */
int mrc_odp_map_lock(struct ib_umem_odp *odp, size_t first, size_t n, bool write, bool fault);
/* With umem_mutex held: the page behind page `idx` (NULL if absent) and
 * whether it may be written. */
struct page *mrc_odp_page(struct ib_umem_odp *odp, size_t idx, bool *writable);
void mrc_odp_unlock(struct ib_umem_odp *odp);
/* ib_umem_odp_release(): no invalidation runs after it returns. Sleeps. */
void mrc_odp_release(struct ib_umem_odp *odp);
/* Copies `len` bytes between `buf` and `page` at `off` (to the page if
 * `to_page`), through a local mapping. Never sleeps. */
void mrc_page_copy(struct page *page, size_t off, void *buf, size_t len, bool to_page);

/* Copies between a pinned user MR and a kernel buffer: `offset` bytes from the
 * first byte of the registration. Returns the number of bytes copied. */
size_t mrc_umem_read(struct ib_umem *umem, u64 offset, void *buf, size_t len);
size_t mrc_umem_write(struct ib_umem *umem, u64 offset, const void *buf, size_t len);
/* copy_from_user(): 0 on success. Process context of the owning process only. */
unsigned long mrc_copy_from_user(void *dst, u64 uaddr, size_t len);

/* One page (part) of an outgoing packet's payload, with a reference held on it. */
struct mrc_frag {
	struct page *page;
	u32 off;
	u32 len;
};
/* Takes references to the pages behind `len` bytes at `offset` of `umem`, one
 * entry per page part, appended at `out[*n]` (advancing *n). All or nothing: false
 * (no reference kept, *n unchanged) if the range does not exist or needs more than
 * `max` entries in all. Never sleeps. */
bool mrc_umem_frags(struct ib_umem *umem, u64 offset, size_t len, struct mrc_frag *out,
		    unsigned int max, unsigned int *n);
/* Drops the references of `frags[0..n]`. */
void mrc_frags_put(struct mrc_frag *frags, unsigned int n);
/* Copies the bytes of `frags[0..n]` to `out`, in order. */
void mrc_frags_copy(const struct mrc_frag *frags, unsigned int n, u8 *out);
/* A new skb holding the packet whose headers are `hdr[0..hl]` and whose payload is
 * `frags[0..n]`, attached as page fragments (no copy): on success the skb owns the
 * frags' references; NULL (references still the caller's) when out of memory or
 * n > MAX_SKB_FRAGS. Send it with a `len` of 0. */
struct sk_buff *mrc_tx_skb_frags(const u8 *hdr, unsigned int hl, struct mrc_frag *frags,
				 unsigned int n);
/* A new skb with `len` bytes of tailroom behind room for every lower header;
 * `*data` is where the packet goes. The caller writes the packet there and passes
 * the skb to mrc_udp_xmit4_skb()/mrc_udp_xmit6_skb() or frees it. NULL when out of
 * memory (GFP_ATOMIC: callers hold a spinlock). */
struct sk_buff *mrc_tx_skb_alloc(unsigned int len, u8 **data);
/* Sends the first `len` bytes written into `skb` (from mrc_tx_skb_alloc(); with the
 * bytes it already holds, if any: an skb from mrc_tx_skb_frags()) as one
 * UDP/IPv4 datagram from the device socket `sock`, the route choosing the source
 * address: route lookup (oif = the socket's bound device), UDP and IP headers
 * (udp_tunnel_xmit_skb() -> ip_local_out()). `route`, the io context of a
 * connected QP (one destination: RC, UC) or NULL, caches the route while it stays
 * valid. Consumes `skb` in every case. Address in network byte order, ports in
 * host order, `tos` carries the ECN codepoint. 0 or -errno. */
int mrc_udp_xmit4_skb(struct mrc_qp_io *route, struct socket *sock, __be32 daddr, u16 sport,
		      u16 dport, u8 tos, struct sk_buff *skb, size_t len);
/* The same over IPv6 from the IPv6 device socket (an all-zero `saddr` lets the
 * route choose); `tclass` carries the ECN codepoint. Consumes `skb`. */
int mrc_udp_xmit6_skb(struct socket *sock, const u8 saddr[16], const u8 daddr[16], u16 sport,
		      u16 dport, u8 tclass, struct sk_buff *skb, size_t len);
/* The IPv6 source and destination of a received datagram, zero if not IPv6. */
void mrc_skb_addrs6(struct sk_buff *skb, u8 saddr[16], u8 daddr[16]);
/* The IPv4 source and destination of a received datagram (network order), 0 if
 * it is not IPv4. */
void mrc_skb_addrs4(struct sk_buff *skb, __be32 *saddr, __be32 *daddr);

/* cq->comp_handler(cq, cq->cq_context), if set. */
void mrc_cq_notify(struct ib_cq *cq);
/* Reports `event` (enum ib_event_type) on the CQ through its event handler. */
void mrc_cq_event(struct ib_cq *cq, int event);

/*
 * Rings mapped into a process (see uapi/rdma_user_metaroce.h). The memory is
 * vmalloc_user()ed (zeroed, page-aligned) and published as an rdma mmap entry of
 * the udata's ucontext; ib_core frees it through mmap_free once the owner removed
 * the entry and the last mapping is gone.
 */
struct mrc_ring_mem;
/* Allocates `size` bytes and inserts them for mmap; NULL on failure (*err set). */
struct mrc_ring_mem *mrc_ring_mem_new(struct ib_udata *udata, size_t size, int *err);
void *mrc_ring_mem_kva(struct mrc_ring_mem *mem);
u64 mrc_ring_mem_offset(struct mrc_ring_mem *mem);
/* Withdraws the mapping offset; the memory lives until the last munmap. */
void mrc_ring_mem_remove(struct mrc_ring_mem *mem);
/* ib_device_ops.mmap / mmap_free. */
int mrc_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma);
void mrc_mmap_free(struct rdma_user_mmap_entry *entry);
/* The driver udata of a create_cq call (NULL for kernel consumers). */
struct ib_udata *mrc_attrs_udata(struct uverbs_attr_bundle *attrs);
/* Copies `len` bytes of driver response, truncated to what the caller has room
 * for; returns 0 or -EFAULT. */
int mrc_udata_respond(struct ib_udata *udata, const void *src, size_t len);
/* smp_load_acquire / smp_store_release on a ring counter shared with a process. */
u32 mrc_load_acquire_u32(const u32 *p);
void mrc_store_release_u32(u32 *p, u32 v);
/*
 * Takes a spinlock so that no softirq on this CPU can run while it is held:
 * with bottom halves disabled when called from task context with them enabled,
 * plainly otherwise (in softirq, in a BH-disabled section, or with interrupts
 * off, where local_bh_enable() would be illegal). Returns whether it disabled
 * bottom halves, for the matching unlock.
 */
bool mrc_spin_lock_nosoftirq(void *lock);
void mrc_spin_unlock_nosoftirq(void *lock, bool bh);
bool mrc_spin_trylock_nosoftirq(void *lock, bool *bh);
/* A reader-writer spinlock (rwlock_t) taken as the spinlock helpers above take theirs. */
void mrc_rwlock_init(void *lock, const char *name, void *key);
bool mrc_read_lock_nosoftirq(void *lock);
void mrc_read_unlock_nosoftirq(void *lock, bool bh);
bool mrc_write_lock_nosoftirq(void *lock);
void mrc_write_unlock_nosoftirq(void *lock, bool bh);
