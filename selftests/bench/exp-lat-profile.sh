#!/usr/bin/env bash
# experiment: where the guest's CPU goes during ib_send_lat 8 B, MetaRoCE against siw
# (perf record -a, cpu-clock), bench latency conditions (veth MTU 65535, no RPS).
#   METAROCE_ROOT=/var/cache/metaroce/root-perf tools/vm --flavour plain -- \
#       env PROF_KO=out/x.ko bash selftests/bench/exp-lat-profile.sh
# Reports land in the run's out/vm-*/prof/.
. "$(dirname "$0")/exp-env.sh" prof
modprobe siw
mk_hosts
ip -n hostA link set veth0 mtu 65535; ip -n hostB link set veth1 mtu 65535
echo 0 > /proc/sys/kernel/kptr_restrict; cat /proc/modules > /dev/null; echo -1 > /proc/sys/kernel/perf_event_paranoid
report() { # NAME
  perf report -i /tmp/$1.data --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60 > $OUTD/$1.sym.txt
  perf report -i /tmp/$1.data --no-children --sort comm,dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -25 > $OUTD/$1.dso.txt
  perf report -i /tmp/$1.data --children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -90 > $OUTD/$1.children.txt
}
KO=${PROF_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod rc_mtu=32768 ${PROF_ARGS:-}
# perf leaves the module's addresses unresolved: keep its symbols, and each run's
# samples of the two test processes, for selftests/bench/perf-fold.py on the host.
grep '\[rdma_metaroce\]' /proc/kallsyms | sort > $OUTD/module-kallsyms.txt
# One transport's devices at a time: rdma_cm (siw's -R) would pick whichever device
# on the address comes first.
P=19700
. $HERE/bench/lat-pair.sh
N=${PROF_ITERS:-30000}
# Round 0 runs without perf (its sampling interrupts change the figures).
for round in 0 1 2; do
  for t in mrc siw; do
    pp=
    [ $round = 0 ] || { perf record -e cpu-clock -F 999 -a -g -o /tmp/$t$round.data -- sleep ${PROF_SECS:-60} > /dev/null 2>&1 & pp=$!; }
    if [ $t = mrc ]; then
      links add mrc metaroce; wait_for 10 vb_gid_index mrcA 198.18.0.1
      ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
      lat_pair mrc$round mrcA mrcB "-x $gb" "-x $ga" -s 8 -n $N
      rdma statistic show link mrcA/1 > $OUTD/counters-A$round.txt 2>&1
    else
      links add siw siw
      lat_pair siw$round siwA siwB "-R --bind_source_ip 198.18.0.2" "-R --bind_source_ip 198.18.0.1" -s 8 -n $N
    fi
    links del $t
    [ -z "$pp" ] || { kill -INT $pp; wait $pp; report $t$round
      perf script -i /tmp/$t$round.data --comms ib_send_lat -F comm,ip,sym 2>/dev/null | gzip > $OUTD/$t$round.script.gz; }
  done
done
