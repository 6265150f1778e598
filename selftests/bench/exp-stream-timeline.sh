#!/usr/bin/env bash
# experiment: a 64 KiB perftest stream's progress over time, to find stalls: every
# ~100 ms, both devices' byte and recovery counters with a timestamp (mrcB's with a
# "B_" prefix: for ib_read_bw, mrcB sends the data). Bench bandwidth conditions (veth
# MTU 65535, rc_mtu=32768, RPS on both CPUs, netem "loss 0%" unless TL_NETEM says
# otherwise). TL_QPS: QPs per stream (default 1).
#   tools/vm --flavour plain -- env TL_TOOLS="ib_read_bw ib_write_bw" bash selftests/bench/exp-stream-timeline.sh
# (TL_ROUNDS, default 2; TL_KO, default the tree's module; TL_ARGS: module parameters).
# Files land in the run's out/vm-*/timeline/: TOOL-qQPS-NETEM-ROUND.tsv (a line per sample:
# nanoseconds, then NAME=VALUE for each counter).
. "$(dirname "$0")/exp-env.sh" timeline
mk_hosts
ip netns exec hostA ip link set veth0 mtu 65535; ip netns exec hostB ip link set veth1 mtu 65535
hosts_rps 3
NETEM=${TL_NETEM:-loss 0%}
ip netns exec hostA tc qdisc add dev veth0 root netem $NETEM
ip netns exec hostB tc qdisc add dev veth1 root netem $NETEM
KEYS='rx_bytes|tx_bytes|retransmits|path_timeouts|tail_probes|path_probes|rto_timeouts|sack_recovered|rx_duplicates|repaths|acks_sent'
# counters DEV [PREFIX]: DEV's counters named in KEYS, as PREFIXname=value pairs.
counters() {
  rdma statistic show link $1/1 | tr -s ' \n' ' ' | grep -oE "\b($KEYS) [0-9]+" | sed "s/^/${2:-}/" | tr ' ' '=' | paste -sd' '
}
P=19300
for round in $(seq ${TL_ROUNDS:-2}); do
  for tool in ${TL_TOOLS:-ib_read_bw ib_write_bw}; do
    KO=${TL_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod rc_mtu=32768 ${TL_ARGS:-}
    ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
    ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
    ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
    P=$((P+1))
    ip netns exec hostB timeout 60 $tool -d mrcB -x $gb -p $P -F -s 65536 -q ${TL_QPS:-1} -D 8 > /tmp/s.log 2>&1 &
    wait_for 20 vb_tcp_listening hostB $P
    ip netns exec hostA timeout 60 $tool -d mrcA -x $ga -p $P -F -s 65536 -q ${TL_QPS:-1} -D 8 198.18.0.2 > /tmp/c.log 2>&1 &
    c=$!
    f=$OUTD/$tool-q${TL_QPS:-1}-$(echo "$NETEM" | tr -c 'a-z0-9.\n' '_')-$round.tsv
    : > $f
    while kill -0 $c 2>/dev/null; do
      echo "$(date +%s%N) $(counters mrcA) $(counters mrcB B_)" >> $f
      sleep 0.1
    done
    wait
    echo "=== $tool round $round: $(grep -A1 '#bytes' /tmp/c.log | tail -1 | awk '{print $4 " MB/s"}')"
    rdma link del mrcA; rdma link del mrcB; rmmod rdma_metaroce
  done
done
