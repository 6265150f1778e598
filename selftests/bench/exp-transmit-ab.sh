#!/usr/bin/env bash
# experiment: A/B two module builds on ib_write_bw 64 KiB (1 and 4 QPs), alternating
# Run in the guest: tools/vm --flavour plain -- env AB_KOS="OLD.ko NEW.ko" bash selftests/bench/exp-transmit-ab.sh
HERE=$(cd "$(dirname "$0")/.." && pwd)
. $HERE/lib/ktap.sh; . $HERE/lib/net.sh
VB_LOGDIR=/tmp/vb; mkdir -p $VB_LOGDIR
. $HERE/lib/verbs.sh
mk_hosts
for d in "hostA veth0" "hostB veth1"; do set -- $d; ip netns exec $1 ip link set $2 mtu 9000; done
P=19000
run() { # KO QPS
  KO=$1 mrc_insmod rc_mtu=9000 ${AB_ARGS:-}
  ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
  ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
  ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
  P=$((P+1))
  ip netns exec hostB timeout 60 ${AB_TOOL:-ib_write_bw} -d mrcB -x $gb -p $P -F -s 65536 -q $2 -D 5 > /tmp/s.log 2>&1 &
  wait_for 20 vb_tcp_listening hostB $P
  s0=$(head -1 /proc/stat)
  ip netns exec hostA timeout 60 ${AB_TOOL:-ib_write_bw} -d mrcA -x $ga -p $P -F -s 65536 -q $2 -D 5 198.18.0.2 > /tmp/c.log 2>&1
  s1=$(head -1 /proc/stat); wait
  echo "=== $(basename $1) q$2: $(grep -A1 '#bytes' /tmp/c.log | tail -1 | awk '{print $4 " MB/s"}') $(echo "$s0" "$s1" | awk '{u=$13-$2; s=$15-$4; i=$16-$5; si=$19-$8; t=u+s+i+si+($17-$6)+($18-$7); printf "user %d sys %d softirq %d idle %d", 100*u/t, 100*s/t, 100*si/t, 100*i/t}')"
  rdma link del mrcA; rdma link del mrcB; rmmod rdma_metaroce
}
for i in 1 2 3; do
  for ko in ${AB_KOS:?AB_KOS="A.ko B.ko": the two module builds to compare}; do run $ko 1; run $ko 4; done
done
