# Test-host helpers: network namespaces joined by veth pairs (sourced).
# Addresses come only from 198.18.0.0/15 (RFC 2544) and 2001:2::/48 (RFC 5180).
# shellcheck shell=bash

# mk_hosts: hostA (veth0, 198.18.0.1) <-> hostB (veth1, 198.18.0.2)
mk_hosts() {
    ip netns add hostA
    ip netns add hostB
    ip link add veth0 netns hostA type veth peer name veth1 netns hostB
    ip -n hostA addr add 198.18.0.1/24 dev veth0
    ip -n hostB addr add 198.18.0.2/24 dev veth1
    ip -n hostA link set lo up
    ip -n hostB link set lo up
    ip -n hostA link set veth0 up
    ip -n hostB link set veth1 up
}

rm_hosts() {
    ip netns del hostA 2>/dev/null
    ip netns del hostB 2>/dev/null
    true
}

# hosts_rps MASK_A [MASK_B]: receive packet steering of veth0 (hostA) and veth1
# (hostB) over the CPUs in the hex masks (MASK_B defaults to MASK_A; 0 turns it
# off, so each veth handles a packet on the CPU that sent it).
hosts_rps() {
    ip netns exec hostA sh -c "echo $1 > /sys/class/net/veth0/queues/rx-0/rps_cpus" &&
        ip netns exec hostB sh -c "echo ${2:-$1} > /sys/class/net/veth1/queues/rx-0/rps_cpus"
}

# all_cpus_mask: the hex mask of every CPU (for hosts_rps).
all_cpus_mask() { printf %x $(( (1 << $(nproc)) - 1 )); }

A() { ip netns exec hostA "$@"; }
B() { ip netns exec hostB "$@"; }

# gid_idx DEV GID: the index of DEV's RoCE v2 GID equal to GID (sysfs form, e.g.
# 0000:0000:0000:0000:0000:ffff:c612:0001). One grep over the table: rxe has 1024
# entries, and a fork per entry takes minutes under TCG.
gid_idx() {
    local f i
    # shellcheck disable=SC2013  # sysfs paths have no spaces
    for f in $(grep -lx "$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null); do
        i=${f##*/}
        if [ "$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}
