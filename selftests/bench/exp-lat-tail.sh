#!/usr/bin/env bash
# experiment: the tail of ib_send_lat 8 B, MetaRoCE against siw, bench latency
# conditions (veth MTU 65535, rc_mtu=32768, no RPS): every round trip's latency
# in posting order (perftest -U), with MetaRoCE's counters around each run, for
# finding what the slowest round trips have in common on the host.
#   tools/vm --flavour plain -- env TAIL_ITERS=5000 bash selftests/bench/exp-lat-tail.sh
# (TAIL_KO: the module to load, default the tree's; TAIL_ARGS: module parameters).
# Files land in the run's out/vm-*/lattail/: NAME.log (perftest's client output),
# NAME.counters-before/after.
. "$(dirname "$0")/exp-env.sh" lattail
modprobe siw
mk_hosts
ip -n hostA link set veth0 mtu 65535; ip -n hostB link set veth1 mtu 65535
ip netns exec hostA rdma link add siwA type siw netdev veth0
ip netns exec hostB rdma link add siwB type siw netdev veth1
KO=${TAIL_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod rc_mtu=32768 ${TAIL_ARGS:-}
ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
wait_for 10 vb_gid_index mrcA 198.18.0.1
ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
P=19600
. $HERE/bench/lat-pair.sh
N=${TAIL_ITERS:-5000}
for round in 1 2 3; do
  rdma statistic show link mrcA/1 > $OUTD/mrc$round.counters-before 2>&1
  lat_pair mrc$round mrcA mrcB "-x $gb" "-x $ga" -s 8 -n $N -U
  cp /tmp/c.log $OUTD/mrc$round.log
  rdma statistic show link mrcA/1 > $OUTD/mrc$round.counters-after 2>&1
  lat_pair siw$round siwA siwB "-R --bind_source_ip 198.18.0.2" "-R --bind_source_ip 198.18.0.1" -s 8 -n $N -U
  cp /tmp/c.log $OUTD/siw$round.log
done
