#!/usr/bin/env bash
# experiment: MetaRoCE vs siw vs rxe send latency, alternating, same load
# Run in the guest: tools/vm --flavour plain -- bash selftests/bench/exp-latency-three-transports.sh
# LAT_RPS="0 1" alternates receive packet steering off/on (both veths, every CPU);
# LAT_MTU sets both veths' MTU (e.g. 65535 with MRC_ARGS="rc_mtu=32768").
HERE=$(cd "$(dirname "$0")/.." && pwd)
. $HERE/lib/ktap.sh; . $HERE/lib/net.sh
KO=${METAROCE_KO:-$HERE/../rdma_metaroce.ko}
VB_LOGDIR=/tmp/vb; mkdir -p $VB_LOGDIR
. $HERE/lib/verbs.sh
mrc_insmod $KO ${MRC_ARGS:-}
modprobe siw; modprobe rdma_rxe
mk_hosts
[ -n "${LAT_MTU:-}" ] && ip -n hostA link set veth0 mtu "$LAT_MTU" && ip -n hostB link set veth1 mtu "$LAT_MTU"
ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
ip netns exec hostA rdma link add siwA type siw netdev veth0
ip netns exec hostB rdma link add siwB type siw netdev veth1
ip netns exec hostA rdma link add rxeA type rxe netdev veth0
ip netns exec hostB rdma link add rxeB type rxe netdev veth1
wait_for 10 vb_gid_index mrcA 198.18.0.1; wait_for 10 vb_gid_index rxeA 198.18.0.1
ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
ra=$(vb_gid_index rxeA 198.18.0.1); rb=$(vb_gid_index rxeB 198.18.0.2)
P=19000
. $HERE/bench/lat-pair.sh
rps() { local m=0; [ "$1" = 1 ] && m=$(all_cpus_mask)
  hosts_rps "$m"; echo "== rps $1"; }
for i in 1 2 3; do
 for r in ${LAT_RPS:-0}; do
  rps $r
  lat_pair metaroce mrcA mrcB "-x $gb" "-x $ga" -s 8 -n 2000
  lat_pair siw siwA siwB "-R --bind_source_ip 198.18.0.2" "-R --bind_source_ip 198.18.0.1" -s 8 -n 2000
  lat_pair rxe rxeA rxeB "-x $rb" "-x $ra" -s 8 -n 2000
  lat_pair metaroce-cm mrcA mrcB "-R --bind_source_ip 198.18.0.2" "-R --bind_source_ip 198.18.0.1" -s 8 -n 2000
 done
done
