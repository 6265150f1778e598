#!/usr/bin/env bash
# experiment: perftest -e (completion events) with and without -D (duration mode),
# MetaRoCE against rxe: which combinations perftest itself refuses, and on which
# device. Prints each run's exit codes and the end of both sides' output.
# Run in the guest: tools/vm --flavour plain -- bash selftests/bench/exp-perftest-events.sh
# EV_KO: the module to load (default: the tree's rdma_metaroce.ko).
. "$(dirname "$0")/exp-env.sh"
mk_hosts
modprobe rdma_rxe
KO=${EV_KO:-$HERE/../rdma_metaroce.ko} mrc_insmod
ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
ip netns exec hostA rdma link add rxeA type rxe netdev veth0
ip netns exec hostB rdma link add rxeB type rxe netdev veth1
wait_for 10 vb_gid_index mrcA 198.18.0.1; wait_for 10 vb_gid_index rxeA 198.18.0.1
P=19500
for dev in mrc rxe; do
  ga=$(vb_gid_index ${dev}A 198.18.0.1); gb=$(vb_gid_index ${dev}B 198.18.0.2)
  for tool in ib_write_bw ib_send_bw ib_read_bw; do
  for opts in "-e -n 2000" "-e -D 3" "-D 3"; do
    P=$((P+1))
    ip netns exec hostB timeout 40 $tool -d ${dev}B -x $gb -p $P -F -s 65536 $opts > /tmp/s.log 2>&1 &
    srv=$!
    wait_for 20 vb_tcp_listening hostB $P
    ip netns exec hostA timeout 40 $tool -d ${dev}A -x $ga -p $P -F -s 65536 $opts 198.18.0.2 > /tmp/c.log 2>&1
    crc=$?
    wait $srv; src=$?
    echo "=== $dev $tool $opts: client rc $crc server rc $src"
    echo "--- client:"; grep -A2 "#bytes" /tmp/c.log; tail -3 /tmp/c.log
    echo "--- server:"; grep -A2 "#bytes" /tmp/s.log; tail -3 /tmp/s.log
  done
  done
done
dmesg | tail -5
