#!/usr/bin/env bash
# experiment: where (which vCPU) the work of a 1-QP ib_write_bw 64 KiB stream runs, and
# whether its throughput follows the placement. Prints, per run, MB/s and each CPU's
# user/system/softirq/idle share, and where the perftest client ran.
# Run in the guest: tools/vm --flavour plain -- env PL_CASES="3:3:-:- 3:3:0:1" \
#   bash selftests/bench/exp-placement.sh
# PL_CASES: "RPS_A:RPS_B:CLIENT_CPU:SERVER_CPU ..." (rps_cpus masks of hostA's veth0 and
# hostB's veth1; "-" leaves a perftest process unpinned). PL_RUNS (default 3) runs per
# case; PL_KO a module build (default: the tree's);
# PL_TOOL (default ib_write_bw);
# PL_ARGS="PARAMS|PARAMS" module parameter sets, each loaded in turn;
# PL_TCP=1 adds iperf3 with the same placement; PL_NETEM="ARGS" netem on both veths.
. "$(dirname "$0")/exp-env.sh"
mk_hosts
for d in "hostA veth0" "hostB veth1"; do set -- $d; ip netns exec $1 ip link set $2 mtu 65535; done
if [ -n "${PL_NETEM:-}" ]; then
  for d in "hostA veth0" "hostB veth1"; do set -- $d; ip netns exec $1 tc qdisc add dev $2 root netem $PL_NETEM; done
fi
TOOL=${PL_TOOL:-ib_write_bw}
cpustat() { grep '^cpu[0-9]' /proc/stat; }
# share START END: per CPU "cpuN u/s/si/idle" in percent of that CPU's time.
share() {
  paste <(echo "$1") <(echo "$2") | awk '{n=NF/2; u=$(n+2)-$2+$(n+3)-$3; s=$(n+4)-$4; i=$(n+5)-$5+$(n+6)-$6; q=$(n+7)-$7; si=$(n+8)-$8;
    t=u+s+i+q+si; printf "%s u%d s%d irq%d si%d idle%d  ", $1, 100*u/t, 100*s/t, 100*q/t, 100*si/t, 100*i/t}'
}
connected() { [ -n "$(ip netns exec hostB ss -Htn state established "( sport = :$1 )")" ]; }
pin() { [ "$1" = - ] && echo || echo "taskset -c $1"; }
IFS='|' read -ra variants <<< "${PL_ARGS:-}"
for args in "${variants[@]:-}"; do
echo "##### module parameters: rc_mtu=32768 $args"
KO=${PL_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod rc_mtu=32768 $args
ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
P=19300
for c in ${PL_CASES:-3:3:-:-}; do
  IFS=: read -r ra rb cc sc <<< "$c"
  hosts_rps "$ra" "$rb"
  for r in $(seq ${PL_RUNS:-3}); do
    P=$((P+1))
    ip netns exec hostB timeout 60 $(pin $sc) $TOOL -d mrcB -x $gb -p $P -F -s 65536 -q 1 -D 5 > /tmp/s.log 2>&1 &
    wait_for 20 vb_tcp_listening hostB $P
    ip netns exec hostA timeout 60 $(pin $cc) $TOOL -d mrcA -x $ga -p $P -F -s 65536 -q 1 -D 5 198.18.0.2 > /tmp/c.log 2>&1 &
    cl=$!
    # The CPU shares are sampled over 3 s of the steady stream: from 1.5 s after the
    # control connection is up (QP set-up done) to 3 s later (the run lasts 5 s).
    wait_for 20 connected $P || true
    sleep 1.5; s0=$(cpustat); c0=$(ps -o psr= -p $(pgrep -n -x $TOOL) 2>/dev/null)
    sleep 3; s1=$(cpustat)
    wait $cl; wait
    echo "=== rps $ra/$rb client@$cc server@$sc: $(grep -A1 '#bytes' /tmp/c.log | tail -1 | awk '{print $4 " MB/s"}')  client on cpu${c0// /}  $(share "$s0" "$s1")"
    # Counters add up over the runs of one module load.
    echo "    counters: $(vb_nonzero_counters 'retransmits|path_timeouts|path_timeouts_overtaken|rx_duplicates')"
  done
  if [ -n "${PL_TCP:-}" ]; then
    P=$((P+1))
    ip netns exec hostB timeout 30 $(pin $sc) iperf3 -s -1 -p $P > /dev/null 2>&1 &
    wait_for 20 vb_tcp_listening hostB $P
    ip netns exec hostA timeout 30 $(pin $cc) iperf3 -c 198.18.0.2 -p $P -t 5 -f m > /tmp/tcp.log &
    cl=$!
    sleep 1.5; s0=$(cpustat); sleep 3; s1=$(cpustat)
    wait $cl; m=$(awk '/receiver/ {print $7 " Mbit/s"}' /tmp/tcp.log); wait
    echo "=== tcp rps $ra/$rb client@$cc server@$sc: $m  $(share "$s0" "$s1")"
  fi
done
rdma link del mrcA; rdma link del mrcB; rmmod rdma_metaroce
done
