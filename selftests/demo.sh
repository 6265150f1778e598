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
modprobe -q ip6_udp_tunnel || true
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
listening() { ip netns exec hostB ss -ltn | grep -q ":$1 "; }
# pair PORT SERVER... -- CLIENT... : server in hostB, client in hostA once it listens.
pair() {
    local port=$1 srv=() n; shift
    while [ "$1" != "--" ]; do srv+=("$1"); shift; done; shift
    ip netns exec hostB timeout 120 "${srv[@]}" > /tmp/demo-server.log 2>&1 &
    for n in $(seq 100); do listening "$port" && break; sleep 0.1; done
    echo; echo "\$ (hostA) $*"
    ip netns exec hostA timeout 120 "$@"
    wait
}
GA=$(gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0001)
GB=$(gid_idx mrc1 0000:0000:0000:0000:0000:ffff:c612:0002)
echo; echo "== an unmodified verbs program between the hosts (RoCE v2 GIDs $GA and $GB)"
pair 18515 ibv_rc_pingpong -d mrc1 -g "$GB" -c -n 100 -- ibv_rc_pingpong -d mrc0 -g "$GA" -c -n 100 198.18.0.2
pair 18515 ib_write_bw -d mrc1 -x "$GB" -F -n 500 --report_gbits -- ib_write_bw -d mrc0 -x "$GA" -F -n 500 --report_gbits 198.18.0.2
echo; echo "== rdma_cm: rping with data verification"
ip netns exec hostB timeout 120 rping -s -a 198.18.0.2 -C 20 > /tmp/demo-server.log 2>&1 &
for n in $(seq 300); do rdma resource show cm_id | grep -q "state LISTEN" && break; sleep 0.1; done
show ip netns exec hostA timeout 120 rping -c -v -a 198.18.0.2 -C 20 || true
wait || true
echo; echo "== the same transfer with netem dropping 1% and reordering on both veths"
ip netns exec hostA tc qdisc add dev veth0 root netem delay 1ms loss 1% reorder 10% 50%
ip netns exec hostB tc qdisc add dev veth1 root netem delay 1ms loss 1% reorder 10% 50%
pair 18515 ib_write_bw -d mrc1 -x "$GB" -F -n 500 --report_gbits -- ib_write_bw -d mrc0 -x "$GA" -F -n 500 --report_gbits 198.18.0.2
ip netns exec hostA tc qdisc del dev veth0 root
ip netns exec hostB tc qdisc del dev veth1 root
show rdma statistic show link mrc0/1
echo; echo "== port state follows the netdev"
ip -n hostA link set veth0 down; show rdma link show mrc0/1
ip -n hostA link set veth0 up;   show rdma link show mrc0/1
echo; echo "== teardown"
show rdma link del mrc1
show rmmod rdma_metaroce
show rdma link show
dmesg | grep -i metaroce | tail -n 12
