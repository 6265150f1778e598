/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Headers bindgen reads to produce rdma_metaroce/ffi/bindings_generated.rs.
 * Only items matched by the allowlists in gen-bindings.sh are emitted (plus the
 * types they reference).
 */
#include <linux/netdevice.h>
#include <linux/if_arp.h>
#include <linux/inetdevice.h>
#include <net/addrconf.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_umem.h>
#include <rdma/rdma_netlink.h>
#include <rdma/restrack.h>
#include <rdma/uverbs_ioctl.h>
#include <net/udp_tunnel.h>
#include <net/route.h>
#include "helpers.h"
#include "../uapi/rdma_user_metaroce.h"
