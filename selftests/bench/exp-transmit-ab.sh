#!/usr/bin/env bash
# experiment: A/B two module builds on ib_write_bw 64 KiB (1 and 4 QPs), alternating
# Run in the guest: tools/vm --flavour plain -- env AB_KOS="OLD.ko NEW.ko" bash selftests/bench/exp-transmit-ab.sh
# AB_MTUS="LINK:RC[:PARAM,PARAM] ..." (default "9000:9000") also alternates veth MTU /
# rc_mtu pairs, with optional extra module parameters (comma-separated);
# AB_TCP=1 adds iperf3 on the same link as the reference; AB_RPS=MASK sets both veths'
# receive packet steering CPU mask first; AB_NETEM="ARGS" puts netem ARGS on both veths;
# AB_NETEMS="none|loss 1%|..." alternates netem settings instead; AB_TOOLS="ib_write_bw|
# ib_read_bw" alternates perftest tools; AB_QPS (default "1 4") the QP counts; AB_ROUNDS
# (default 3) repeats the whole set. An AB_KOS entry may be KO:PARAM=V,PARAM=V (module
# parameters for that build's runs, e.g. the same .ko twice with different settings).
# AB_WRAPS="none|nice -n 19" alternates a command the client perftest runs under.
# AB_PT_ARGS adds perftest arguments to both sides (e.g. -e: completions by event).
# Each run prints MetaRoCE's port counters, and per CPU the packets the receive softirq
# processed and how often it ran out of budget, and ksoftirqd's CPU time.
. "$(dirname "$0")/exp-env.sh"
mk_hosts
link_mtu() { ip netns exec hostA ip link set veth0 mtu "$1"; ip netns exec hostB ip link set veth1 mtu "$1"; }
if [ -n "${AB_RPS:-}" ]; then
  hosts_rps "$AB_RPS"
  echo "rps_cpus: $(ip netns exec hostB cat /sys/class/net/veth1/queues/rx-0/rps_cpus)"
fi
if [ -n "${AB_NETEM:-}" ]; then
  ip netns exec hostA tc qdisc add dev veth0 root netem $AB_NETEM
  ip netns exec hostB tc qdisc add dev veth1 root netem $AB_NETEM
  echo "netem: $AB_NETEM"
fi
P=19000
# Per line of /proc/stat ("cpu" = all CPUs, then each): "NAME user U sys S softirq SI
# idle I" in percent of the time between two snapshots (each from grep '^cpu').
cpu_shares() { # BEFORE AFTER
  paste -d' ' <(echo "$1") <(echo "$2") | awk '{u=$13-$2; s=$15-$4; i=$16-$5; si=$19-$8; t=u+s+i+si+($17-$6)+($18-$7); if (t == 0) t = 1; printf "%s user %d sys %d softirq %d idle %d\n", $1, 100*u/t, 100*s/t, 100*si/t, 100*i/t}'
}
# Per CPU: packets the receive softirq processed and how often it ran out of budget
# (time_squeeze: the rest went to the next round, or to ksoftirqd), from softnet_stat.
softnet() { local a b c rest; while read -r a b c rest; do echo "$((16#$a)) $((16#$c))"; done < /proc/net/softnet_stat; }
# ksoftirqd/N's CPU time (utime+stime, clock ticks), one per line.
ksoftirqd_ticks() {
  local d; for d in /proc/[0-9]*; do
    case $(cat "$d/comm" 2>/dev/null) in ksoftirqd/*) awk '{print $14 + $15}' "$d/stat";; esac
  done
}
run() { # KO[:PARAMS] QPS RC_MTU [PARAMS]
  local extra_ko=; [ "${1#*.ko:}" != "$1" ] && extra_ko=${1#*.ko:}
  KO=${1%%.ko:*}; KO=${KO%.ko}.ko mrc_insmod rc_mtu="$3" ${4//,/ } ${extra_ko//,/ } ${AB_ARGS:-}
  ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
  ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
  ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
  P=$((P+1))
  ip netns exec hostB timeout 60 ${AB_TOOL:-ib_write_bw} -d mrcB -x $gb -p $P -F -s 65536 -q $2 -D 5 ${AB_PT_ARGS:-} > /tmp/s.log 2>&1 &
  wait_for 20 vb_tcp_listening hostB $P
  c0=$(grep '^cpu' /proc/stat); n0=$(softnet); k0=$(ksoftirqd_ticks)
  ip netns exec hostA timeout 60 ${AB_WRAP:-} ${AB_TOOL:-ib_write_bw} -d mrcA -x $ga -p $P -F -s 65536 -q $2 -D 5 ${AB_PT_ARGS:-} 198.18.0.2 > /tmp/c.log 2>&1
  c1=$(grep '^cpu' /proc/stat); n1=$(softnet); k1=$(ksoftirqd_ticks); wait
  local shares; shares=$(cpu_shares "$c0" "$c1")
  echo "=== $(basename "$1") rc_mtu $3 ${4:-} q$2${AB_WRAP:+ ($AB_WRAP)}: $(grep -A1 '#bytes' /tmp/c.log | tail -1 | awk '{print $4 " MB/s"}') $(head -1 <<< "$shares" | cut -d' ' -f2-)"
  echo "    per CPU: $(tail -n +2 <<< "$shares" | paste -sd';')"
  echo "    softnet per CPU (packets squeezed): $(paste -d' ' <(echo "$n0") <(echo "$n1") | awk '{printf "%d %d; ", $3-$1, $4-$2}')ksoftirqd ticks: $(paste -d' ' <(echo "$k0") <(echo "$k1") | awk '{printf "%d ", $2-$1}')"
  echo "    counters: $(vb_nonzero_counters 'tx_packets|retransmits|tail_probes|path_probes|sack_recovered|path_timeouts|path_timeouts_overtaken|rx_duplicates|repaths|congestion_repaths|moved_paths|move_requests|rx_steered|rx_unlocked_copies')"
  rdma link del mrcA; rdma link del mrcB; rmmod rdma_metaroce
}
tcp() { # iperf3 on the same link, one stream, 5 s
  P=$((P+1))
  ip netns exec hostB timeout 30 iperf3 -s -1 -p $P > /dev/null 2>&1 &
  wait_for 20 vb_tcp_listening hostB $P
  echo "=== tcp link mtu $1: $(ip netns exec hostA timeout 30 iperf3 -c 198.18.0.2 -p $P -t 5 -f m | awk '/receiver/ {print $7 " Mbit/s"}')"
  wait
}
IFS='|' read -ra netems <<< "${AB_NETEMS:-none}"
for i in $(seq ${AB_ROUNDS:-3}); do
 for nm in "${netems[@]}"; do
  if [ -n "${AB_NETEMS:-}" ]; then
    for d in "hostA veth0" "hostB veth1"; do set -- $d; ip netns exec $1 tc qdisc del dev $2 root 2>/dev/null; done
    if [ "$nm" != none ]; then
      ip netns exec hostA tc qdisc add dev veth0 root netem $nm
      ip netns exec hostB tc qdisc add dev veth1 root netem $nm
    fi
    echo "##### netem: $nm"
  fi
  for m in ${AB_MTUS:-9000:9000}; do
    link_mtu "${m%%:*}"
    rc=${m#*:}; extra=; [ "$rc" != "${rc#*:}" ] && extra=${rc#*:} && rc=${rc%%:*}
    for ko in ${AB_KOS:?AB_KOS="A.ko B.ko": the two module builds to compare}; do
      IFS='|' read -ra tools <<< "${AB_TOOLS:-${AB_TOOL:-ib_write_bw}}"
      for AB_TOOL in "${tools[@]}"; do
        echo "--- $AB_TOOL"
        IFS='|' read -ra wraps <<< "${AB_WRAPS:-none}"
        for w in "${wraps[@]}"; do
          AB_WRAP=; [ "$w" = none ] || AB_WRAP=$w
          for q in ${AB_QPS:-1 4}; do run $ko $q "$rc" "$extra"; done
        done
      done
    done
    if [ -n "${AB_TCP:-}" ]; then tcp "${m%%:*}"; fi
  done
 done
done
