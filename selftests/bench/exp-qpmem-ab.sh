#!/usr/bin/env bash
# experiment: kernel memory per idle connected RC QP (qpmem.py, as `make bench`
# measures it) for module builds side by side, on the bench's qpmem veths (MTU
# 1500) and on 65535-byte veths, both with rc_mtu=32768 (the bandwidth cases' link).
#   tools/vm --flavour plain -- env QPMEM_KOS="A.ko B.ko" bash selftests/bench/exp-qpmem-ab.sh
# Prints "== KO mtu MTU: qpmem QPS SLAB_KB VMALLOC_KB PERCPU_KB MEMFREE_KB SECONDS".
. "$(dirname "$0")/exp-env.sh"
mk_hosts
for mtu in 1500 65535; do
  ip -n hostA link set veth0 mtu $mtu; ip -n hostB link set veth1 mtu $mtu
  for ko in ${QPMEM_KOS:?}; do
    KO=$ko mrc_insmod rc_mtu=32768
    ip netns exec hostA rdma link add mrcA type metaroce netdev veth0
    ip netns exec hostB rdma link add mrcB type metaroce netdev veth1
    wait_for 10 vb_gid_index mrcA 198.18.0.1
    ga=$(vb_gid_index mrcA 198.18.0.1); gb=$(vb_gid_index mrcB 198.18.0.2)
    r=$(ip netns exec hostA python3 $HERE/bench/qpmem.py mrcA "$ga" mrcB "$gb" "${QPMEM_PAIRS:-500}" 2>&1 | grep '^qpmem')
    echo "== $(basename "$ko") mtu $mtu: ${r:-failed}"
    rdma link del mrcA; rdma link del mrcB; rmmod rdma_metaroce
  done
done
