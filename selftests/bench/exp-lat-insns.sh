#!/usr/bin/env bash
# experiment: guest instructions per ib_send_lat round trip (8 B), MetaRoCE against
# siw, counted by QEMU (tools/insn-count) rather than timed: the count of a code path
# does not move with the host's load, so small changes show.
#   METAROCE_VM_INSN_COUNT=1 tools/vm --flavour plain -- \
#       env INSN_KO=out/x.ko bash selftests/bench/exp-lat-insns.sh
#   python3 tools/insn-count/fold.py out/vm-plain-.../
# Each transport runs twice, INSN_SHORT then INSN_LONG round trips, each run between
# two snapshots; the difference of the two runs' counts, divided by the difference of
# their round trips, is the steady state's cost of one round trip (start-up, connection
# set-up and teardown cancel out). Bench latency conditions: veth MTU 65535, no RPS.
. "$(dirname "$0")/exp-env.sh" insns
modprobe siw
mk_hosts
ip -n hostA link set veth0 mtu 65535; ip -n hostB link set veth1 mtu 65535
echo 0 > /proc/sys/kernel/kptr_restrict
KO=${INSN_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod rc_mtu=32768 ${INSN_ARGS:-}
# Symbols for the fold: the kernel's and both modules' (loaded by now).
sort /proc/kallsyms > $OUTD/kallsyms.txt
snap_k=0
snapshot() { # LABEL: the plugin answers snap-req-K with snap-K.txt
  snap_k=$((snap_k+1))
  touch $METAROCE_OUT/snap-req-$snap_k
  wait_for 60 test -e $METAROCE_OUT/snap-$snap_k.txt || { echo "no snapshot $snap_k"; exit 1; }
  echo "$snap_k $1" >> $OUTD/snapshots.txt
  # What instructions do not show: interrupts, softirqs, context switches, idle time.
  { cat /proc/interrupts; cat /proc/softirqs; cat /proc/stat; } > $OUTD/proc-$snap_k.txt
}
P=19800
. $HERE/bench/lat-pair.sh
SHORT=${INSN_SHORT:-1000} LONG=${INSN_LONG:-6000}
echo "short $SHORT long $LONG" > $OUTD/iters.txt
for t in mrc siw; do
  if [ $t = mrc ]; then
    links add mrc metaroce; wait_for 10 vb_gid_index mrcA 198.18.0.1
    ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
    run() { lat_pair mrc-$1 mrcA mrcB "-x $gb" "-x $ga" -s 8 -n $1; }
  else
    links add siw siw
    run() { lat_pair siw-$1 siwA siwB "-R --bind_source_ip 198.18.0.2" "-R --bind_source_ip 198.18.0.1" -s 8 -n $1; }
  fi
  for n in $SHORT $LONG; do
    snapshot "$t $n start"; run $n | tee -a $OUTD/lat.txt; snapshot "$t $n end"
  done
  [ $t = mrc ] && rdma statistic show link mrcA/1 > $OUTD/counters-A.txt 2>&1
  links del $t
done
