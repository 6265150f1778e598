#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The demo (guest side): two test hosts joined by a veth pair, a MetaRoCE device on
# each, and what RDMA tools show about them.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/net.sh"
show() { echo; echo "\$ $*"; "$@"; }

KO=${METAROCE_KO:-$HERE/../rdma_metaroce.ko}
echo "== loading rdma_metaroce"
modprobe -q udp_tunnel || true
insmod "$KO"
show modinfo -p "$KO"
echo; echo "== two hosts: hostA (veth0, 198.18.0.1) <-> hostB (veth1, 198.18.0.2)"
mk_hosts
ip -n hostA addr add 2001:2::1/64 dev veth0 nodad
ip -n hostB addr add 2001:2::2/64 dev veth1 nodad
show ip netns exec hostA rdma link add mrc0 type metaroce netdev veth0
show ip netns exec hostB rdma link add mrc1 type metaroce netdev veth1
show rdma link show
show rdma dev show
show ls /sys/class/infiniband
echo; echo "== GID table of mrc0 (filled by ib_core from veth0's addresses)"
for f in /sys/class/infiniband/mrc0/ports/1/gids/*; do
    i=${f##*/}
    t=$(cat "/sys/class/infiniband/mrc0/ports/1/gid_attrs/types/$i" 2>/dev/null || true)
    [ -n "$t" ] && printf '  gid %-3s %-40s %s\n' "$i" "$(cat "$f")" "$t"
done
show cat /sys/class/infiniband/mrc0/node_guid /sys/class/infiniband/mrc0/ports/1/link_layer /sys/class/infiniband/mrc0/ports/1/state
if ibv_devices 2>/dev/null | grep -q mrc; then show ibv_devices; show ibv_devinfo -d mrc0; else
    echo; echo "(ibv_devices: the userspace provider is not installed in this build yet)"; fi
echo; echo "== port state follows the netdev"
ip -n hostA link set veth0 down; show rdma link show mrc0/1
ip -n hostA link set veth0 up;   show rdma link show mrc0/1
echo; echo "== teardown"
show rdma link del mrc1
show rmmod rdma_metaroce
show rdma link show
dmesg | grep -i metaroce | tail -n 12
