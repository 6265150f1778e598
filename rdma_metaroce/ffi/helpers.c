// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers for rdma_metaroce; see helpers.h. Forwarders only.
 */
#include <linux/module.h>
#include <linux/platform_device.h>
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
