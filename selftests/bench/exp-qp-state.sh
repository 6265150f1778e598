#!/usr/bin/env bash
# experiment: what bounds a steady 1-QP ib_write_bw / ib_read_bw 64 KiB stream. Samples
# both RC QPs' state (`rdma -dd resource show qp`: per-path cwnd, bytes in flight,
# srtt, rttvar; the reordering multiplier; the recovery counters: retransmissions,
# duplicates, path timeouts, losses declared, tail probes, RTOs; work requests held
# by the transport; `held_ns`/`runs`, how long the data path
# has held the QP) a few times inside the stream, so that a window-bound stream (in
# flight at cwnd), a message-window-bound one (32 messages in the transport), one
# bound by a QP's own lock (held_ns growing ~1 s per s) and one bound by none of them
# can be told apart.
# Run in the guest: tools/vm --flavour plain -- env QS_KO=out/x.ko \
#   bash selftests/bench/exp-qp-state.sh
# QS_QPS (default 1), QS_TOOLS (default "ib_write_bw ib_read_bw"), QS_NETEM="ARGS"
# netem on both veths; bench link conditions (veth MTU 65535, RPS over both vCPUs,
# rc_mtu=32768).
. "$(dirname "$0")/exp-env.sh"
mk_hosts
for d in "hostA veth0" "hostB veth1"; do set -- $d
  ip netns exec $1 ip link set $2 mtu 65535
  ip netns exec $1 sh -c "echo 3 > /sys/class/net/$2/queues/rx-0/rps_cpus"
  [ -z "${QS_NETEM:-}" ] || ip netns exec $1 tc qdisc add dev $2 root netem $QS_NETEM
done
KO=${QS_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod rc_mtu=32768 ${QS_ARGS:-}
ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
P=19400
for tool in ${QS_TOOLS:-ib_write_bw ib_read_bw}; do
  P=$((P+1))
  ip netns exec hostB timeout 60 $tool -d mrcB -x $gb -p $P -F -s 65536 -q ${QS_QPS:-1} -D 8 > /tmp/s.log 2>&1 &
  wait_for 20 vb_tcp_listening hostB $P
  ip netns exec hostA timeout 60 $tool -d mrcA -x $ga -p $P -F -s 65536 -q ${QS_QPS:-1} -D 8 198.18.0.2 > /tmp/c.log 2>&1 &
  client=$!
  # The stream's RC QPs are the ones with a connection (path0_cwnd present).
  wait_for 30 sh -c "rdma -dd resource show qp 2>/dev/null | grep -q path0_cwnd"
  for i in 1 2 3 4 5 6; do
    sleep 0.7  # sampling interval, not synchronisation: the stream runs either way
    echo "--- $tool sample $i"
    [ $i != 1 ] || rdma -dd resource show qp 2>/dev/null | head -40
    rdma -dd resource show qp 2>/dev/null | grep -Eo "(dev|link) mrc[AB].*lqpn [0-9]*|(drv_)?(held_ns|runs|sq_in_transport|rq_in_transport|reordering_multiplier|tx_retx|rx_dup|path_timeouts|path_timeouts_overtaken|lost_detected|tlp|rto|path[0-7]_cwnd|path[0-7]_inflight|path[0-7]_srtt_ns|path[0-7]_rttvar_ns) [0-9]*" | paste -sd' ' | sed -E "s/(dev|link) mrc/\n\1 mrc/g; s/drv_//g" | grep path0_cwnd
  done
  wait $client
  echo "=== $tool: $(grep -A1 '#bytes' /tmp/c.log | tail -1 | awk '{print $4 " MB/s"}')"
  wait
done
rdma statistic show link mrcA/1
