#!/usr/bin/env bash
# experiment: where the guest's CPU goes during ib_write_bw / ib_read_bw 64 KiB on
# MetaRoCE, and during iperf3 on the same link (perf record -a, cpu-clock).
# Needs perf in the guest: a copy of the toolchain root with linux-perf installed,
# passed as METAROCE_ROOT (tools/lib.sh), e.g.
#   METAROCE_ROOT=/var/cache/metaroce/root-perf tools/vm --flavour plain -- \
#       env PROF_KO=out/x.ko bash selftests/bench/exp-profile.sh
# PROF_MTU="LINK:RC" (default 65535:32768), PROF_RPS=MASK (default 3), PROF_QPS=N
# (default 1), PROF_NETEM="netem args" (default none: the bare link; the bench's
# lossless baseline is "loss 0%"); PROF_RUN=S seconds of traffic (default 10),
# sampled from PROF_DELAY_MS after the programs start (default 2500, past their
# connection set-up) until PROF_SAMPLE seconds after (default 6.5; the larger). A
# profile of idle CPUs means the set-up took longer than the delay: raise both.
# Reports land in the run's out/vm-*/prof/.
. "$(dirname "$0")/exp-env.sh" prof
mk_hosts
m=${PROF_MTU:-65535:32768}
ip netns exec hostA ip link set veth0 mtu "${m%%:*}"; ip netns exec hostB ip link set veth1 mtu "${m%%:*}"
for d in "hostA veth0" "hostB veth1"; do set -- $d
  ip netns exec $1 sh -c "echo ${PROF_RPS:-3} > /sys/class/net/$2/queues/rx-0/rps_cpus"; done
[ -z "${PROF_NETEM:-}" ] || for d in "hostA veth0" "hostB veth1"; do set -- $d
  ip netns exec $1 tc qdisc add dev $2 root netem $PROF_NETEM; done
echo 0 > /proc/sys/kernel/kptr_restrict; cat /proc/modules > /dev/null; echo -1 > /proc/sys/kernel/perf_event_paranoid
report() { # NAME
  perf report -i /tmp/$1.data --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -50 > $OUTD/$1.sym.txt
  perf report -i /tmp/$1.data --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15 > $OUTD/$1.dso.txt
  perf report -i /tmp/$1.data --children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -70 > $OUTD/$1.children.txt
  perf report -i /tmp/$1.data --no-children --sort sym --stdio -g caller,0.5,callee --percent-limit 3 2>/dev/null | grep -v '^#' | grep -v '^$' | head -300 > $OUTD/$1.callers.txt
  # Every sample's stack, for selftests/bench/perf-fold.py on the host.
  perf script -i /tmp/$1.data -F comm,ip,sym 2>/dev/null | gzip > $OUTD/$1.script.gz
}
KO=${PROF_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod rc_mtu="${m#*:}" ${PROF_ARGS:-}
ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
# Samples the steady stream only. perf's own start-up takes seconds under TCG
# (half a minute on a slow host), so the programs start once perf is running:
# sample_start returns when perf has started its workload, which marks that with a
# file; the delay and the sampled span count from there.
sample_start() { # NAME
  rm -f /tmp/perf-on
  perf record -e cpu-clock -F 499 -a -g -D ${PROF_DELAY_MS:-2500} -o /tmp/$1.data -- \
    sh -c "touch /tmp/perf-on; exec sleep ${PROF_SAMPLE:-6.5}" > /dev/null 2>&1 &
  wait_for 300 test -e /tmp/perf-on
}
# perf may leave the module's addresses unresolved: keep its symbols to read them.
grep '\[rdma_metaroce\]' /proc/kallsyms | sort > $OUTD/module-kallsyms.txt
RUN=${PROF_RUN:-10}
P=19100
for tool in ${PROF_TOOLS:-ib_write_bw ib_read_bw}; do
  P=$((P+1))
  sample_start $tool
  ip netns exec hostB timeout $((RUN + 50)) $tool -d mrcB -x $gb -p $P -F -s 65536 -q ${PROF_QPS:-1} -D $RUN > /tmp/s.log 2>&1 &
  wait_for 20 vb_tcp_listening hostB $P
  ip netns exec hostA timeout $((RUN + 50)) $tool -d mrcA -x $ga -p $P -F -s 65536 -q ${PROF_QPS:-1} -D $RUN 198.18.0.2 > /tmp/c.log 2>&1 &
  wait
  echo "=== $tool: $(grep -A1 '#bytes' /tmp/c.log | tail -1 | awk '{print $4 " MB/s"}')"
  report $tool
done
rdma statistic show link mrcA/1 > $OUTD/counters-A.txt 2>&1
rdma link del mrcA; rdma link del mrcB; rmmod rdma_metaroce
P=$((P+1))
sample_start tcp
ip netns exec hostB timeout $((RUN + 20)) iperf3 -s -1 -p $P > /dev/null 2>&1 &
wait_for 20 vb_tcp_listening hostB $P
ip netns exec hostA timeout $((RUN + 20)) iperf3 -c 198.18.0.2 -p $P -t $RUN -f m > /tmp/tcp.log &
wait
echo "=== tcp: $(awk '/receiver/ {print $7 " Mbit/s"}' /tmp/tcp.log)"
report tcp
