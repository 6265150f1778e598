// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers for rdma_metaroce; see helpers.h. Forwarders only.
 */
#include <linux/module.h>
#include <linux/platform_device.h>
#include <linux/udp.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <net/inet_ecn.h>
#include <net/udp_tunnel.h>
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

int mrc_check_mr_access(struct ib_device *ib, unsigned int flags)
{
	return ib_check_mr_access(ib, flags);
}

struct socket *mrc_udp_open(struct net_device *ndev, u16 port, void *user,
			    int (*rcv)(struct sock *sk, struct sk_buff *skb), int *err)
{
	struct udp_port_cfg cfg = {};
	struct udp_tunnel_sock_cfg tnl = {};
	struct socket *sock;

	cfg.family = AF_INET;
	cfg.local_ip.s_addr = htonl(INADDR_ANY);
	cfg.local_udp_port = htons(port);
	cfg.bind_ifindex = ndev->ifindex;
	*err = udp_sock_create4(dev_net(ndev), &cfg, &sock);
	if (*err)
		return NULL;
	tnl.sk_user_data = user;
	tnl.encap_type = 1;
	tnl.encap_rcv = rcv;
	setup_udp_tunnel_sock(dev_net(ndev), sock->sk, &tnl);
	return sock;
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
	*sport = ntohs(uh->source);
	if (skb->protocol == htons(ETH_P_IP))
		*ce = INET_ECN_is_ce(ip_hdr(skb)->tos);
	else
		*ce = INET_ECN_is_ce(ipv6_get_dsfield(ipv6_hdr(skb)));
	return (const u8 *)(uh + 1);
}

void mrc_kfree_skb(struct sk_buff *skb)
{
	kfree_skb(skb);
}
