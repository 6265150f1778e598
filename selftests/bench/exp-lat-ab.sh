#!/usr/bin/env bash
# experiment: ib_send_lat 8 B on two MetaRoCE module builds and siw, alternating,
# bench conditions (veth MTU LAT_MTU, default 65535; MRC_ARGS default rc_mtu=32768; no RPS).
# Run in the guest: tools/vm --flavour plain -- env LAT_KOS="A.ko B.ko:reply_wait_us=0" bash selftests/bench/exp-lat-ab.sh
# (an entry may name module parameters for its runs; LAT_ITERS, default 2000;
# LAT_ROUNDS, default 3).
. "$(dirname "$0")/exp-env.sh"
modprobe siw
mk_hosts
ip -n hostA link set veth0 mtu "${LAT_MTU:-65535}"; ip -n hostB link set veth1 mtu "${LAT_MTU:-65535}"
ip netns exec hostA rdma link add siwA type siw netdev veth0
ip netns exec hostB rdma link add siwB type siw netdev veth1
P=19500
. $HERE/bench/lat-pair.sh
for i in $(seq ${LAT_ROUNDS:-3}); do
  for spec in ${LAT_KOS:?}; do
    # An entry is KO or KO:PARAM=V,PARAM=V (module parameters of that build's run).
    ko=${spec%%:*}; extra=; [ "$spec" != "$ko" ] && extra=${spec#*:}
    KO=$ko mrc_insmod ${MRC_ARGS:-rc_mtu=32768} ${extra//,/ }
    ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
    ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
    wait_for 10 vb_gid_index mrcA 198.18.0.1
    ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
    lat_pair "$(basename $ko)${extra:+ $extra}" mrcA mrcB "-x $gb" "-x $ga" -s 8 -n ${LAT_ITERS:-2000}
    rdma link del mrcA; rdma link del mrcB; rmmod rdma_metaroce
  done
  lat_pair siw siwA siwB "-R --bind_source_ip 198.18.0.2" "-R --bind_source_ip 198.18.0.1" -s 8 -n ${LAT_ITERS:-2000}
done
