#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# NVMe over Fabrics on MetaRoCE: the kernel's own RDMA storage ULPs, unmodified —
# nvmet-rdma exports a file-backed namespace, nvme-rdma connects to it through
# rdma_cm, and block I/O of several sizes crosses the MetaRoCE device (commands
# and small writes as SENDs with inline data, larger ones through
# fast-registration MRs the target reads and writes with RDMA READ / WRITE, and
# remote invalidation of those MRs).
#
# Both ULPs open their rdma_cm IDs in the initial network namespace, so the
# address lives there, on a dummy link (no traffic can leave the guest); the
# host and the target talk through one MetaRoCE device, as the kernel consumer
# test does. Skipped where the test kernel has no NVMe-oF (the debug flavour).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
ADDR=198.18.2.1
NQN=nqn.2026-12.org.metaroce:selftest
CFG=/sys/kernel/config/nvmet
# The namespace's backing file lives on a tmpfs of its own: nvmet takes the file's
# block size from its file system (the guest's /tmp may be a shared host mount).
MNT=/tmp/mrc-nvmeof
IMG=$MNT/ns1.img
SIZE_MB=64

nvme_ctrl() { # the controller connected to $NQN, e.g. nvme0
    local c
    for c in /sys/class/nvme/nvme*; do
        [ -e "$c/subsysnqn" ] && [ "$(cat "$c/subsysnqn")" = "$NQN" ] && { basename "$c"; return 0; }
    done
    return 1
}
nvme_ns() { # the block device of its namespace 1, e.g. /dev/nvme0n1 (the disk's
    # parent is the controller, or with native multipath the subsystem: both name the NQN)
    local b
    for b in /sys/block/nvme*n1; do
        [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && [ -b "/dev/${b##*/}" ] &&
            { echo "/dev/${b##*/}"; return 0; }
    done
    return 1
}
rc_qps() { rdma resource show qp link mrc0/1 | grep -c 'type RC'; }
cleanup() {
    local c
    c=$(nvme_ctrl) && echo 1 > "/sys/class/nvme/$c/delete_controller" 2>/dev/null
    rm -f "$CFG/ports/1/subsystems/$NQN" 2>/dev/null
    rmdir "$CFG/ports/1" "$CFG/subsystems/$NQN/namespaces/1" "$CFG/subsystems/$NQN" 2>/dev/null
    tc qdisc del dev lo root 2>/dev/null
    rmmod nvme_rdma nvmet_rdma nvmet nvme_fabrics 2>/dev/null
    rdma link del mrc0 2>/dev/null
    ip link del mrcnv0 2>/dev/null
    rmmod rdma_metaroce 2>/dev/null
    rm -f "$IMG"; umount "$MNT" 2>/dev/null; rmdir "$MNT" 2>/dev/null; true
}
trap cleanup EXIT
cleanup
ktap_header
if ! modprobe -n nvmet-rdma 2>/dev/null || ! modprobe -n nvme-rdma 2>/dev/null; then
    ktap_skip "NVMe-oF over MetaRoCE: kernel $(uname -r) has no nvmet-rdma / nvme-rdma (only the plain test kernel is built with them)"
    ktap_finish; exit 0
fi
mrc_insmod || { ktap_fail "load rdma_metaroce"; ktap_finish; exit 1; }
ip link add mrcnv0 type dummy && ip addr add $ADDR/24 dev mrcnv0 && ip link set mrcnv0 up
check "rdma link add mrc0 type metaroce netdev mrcnv0" rdma link add mrc0 type metaroce netdev mrcnv0
check "mrc0 has its RoCE v2 GID for $ADDR" wait_for 10 gid_idx mrc0 0000:0000:0000:0000:0000:ffff:c612:0201
rx0=$(rdma statistic show link mrc0/1 | sed -n 's/.* rx_packets \([0-9]*\).*/\1/p')

# Target: a 64 MiB file-backed namespace (buffered, so the file shows what arrived),
# 4 KiB blocks (tmpfs).
target_up() {
    modprobe nvmet-rdma || return 1
    mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config || return 1
    mkdir -p "$MNT" && mount -t tmpfs -o size=$((SIZE_MB + 8))M mrc-nvmeof "$MNT" &&
        truncate -s ${SIZE_MB}M "$IMG" || return 1
    mkdir "$CFG/subsystems/$NQN" && echo 1 > "$CFG/subsystems/$NQN/attr_allow_any_host" &&
        mkdir "$CFG/subsystems/$NQN/namespaces/1" &&
        echo "$IMG" > "$CFG/subsystems/$NQN/namespaces/1/device_path" &&
        echo 1 > "$CFG/subsystems/$NQN/namespaces/1/buffered_io" &&
        echo 1 > "$CFG/subsystems/$NQN/namespaces/1/enable" || return 1
    mkdir "$CFG/ports/1" && echo rdma > "$CFG/ports/1/addr_trtype" &&
        echo ipv4 > "$CFG/ports/1/addr_adrfam" && echo $ADDR > "$CFG/ports/1/addr_traddr" &&
        echo 4420 > "$CFG/ports/1/addr_trsvcid" &&
        ln -s "$CFG/subsystems/$NQN" "$CFG/ports/1/subsystems/$NQN"
}
check "nvmet-rdma exports a file-backed namespace on $ADDR:4420 (mrc0)" target_up
check "the target's rdma_cm ID listens on $ADDR:4420" wait_for 10 eval "rdma resource show cm_id | grep -q 'state LISTEN .*src-addr $ADDR:4420 '"

# Host: connect through /dev/nvme-fabrics (what nvme-cli writes), 2 I/O queues.
host_connect() {
    modprobe nvme-rdma || return 1
    echo "transport=rdma,traddr=$ADDR,trsvcid=4420,nqn=$NQN,nr_io_queues=2" > /dev/nvme-fabrics
}
check "nvme-rdma connects to the subsystem over MetaRoCE" host_connect
check "the namespace appears as a block device" wait_for 20 nvme_ns
DEV=$(nvme_ns) || DEV=
ktap_diag "controller $(nvme_ctrl), namespace ${DEV:-none}; $(rc_qps) RC QPs on mrc0"

# Data: random bytes through the block device with O_DIRECT at several request
# sizes (4 KiB rides inline in the command capsule; 128 KiB and 1 MiB go through
# registered MRs), read back through the device, and checked in the backing file.
# METAROCE_NVMEOF_MIB (default 16) sets the amount; the debug tier moves less.
MIB=${METAROCE_NVMEOF_MIB:-16}
src=$(mktemp)
dd if=/dev/urandom of="$src" bs=1M count=$MIB status=none
io_round() { # BS: write the $MIB MiB at offset 0 with requests of BS, read back, compare
    local bs=$1 back
    back=$(mktemp)
    dd if="$src" of="$DEV" bs="$bs" oflag=direct conv=fsync status=none &&
        dd if="$DEV" of="$back" bs="$bs" iflag=direct count=$((MIB * 1024 * 1024 / $(numfmt --from=iec "$bs"))) status=none &&
        cmp -s "$src" "$back"
    local rc=$?
    rm -f "$back"; return $rc
}
for bs in 4K 128K 1M; do
    if [ -n "$DEV" ]; then
        check "$MIB MiB written and read back intact through $DEV with $bs requests" io_round $bs
        dd if=/dev/urandom of="$src" bs=1M count=$MIB status=none   # fresh data for the next size
    else
        ktap_fail "$MIB MiB written and read back intact with $bs requests: no block device"
    fi
done
# Write once more and check the file itself, which the target wrote with what
# crossed MetaRoCE.
if [ -n "$DEV" ]; then
    dd if="$src" of="$DEV" bs=256K oflag=direct conv=fsync status=none
    check "the target's backing file holds exactly what the host wrote" \
        cmp -s -n $((MIB * 1024 * 1024)) "$src" "$IMG"
fi
# Under loss: host and target share the address, so their packets loop through lo;
# netem drops 1% of them there. Every request still completes, intact, with no
# controller reset (the block layer's timeout is 30 s; MetaRoCE recovers in
# milliseconds).
retx() { rdma statistic show link mrc0/1 | sed -n 's/.* retransmits \([0-9]*\).*/\1/p'; }
# What the host logs when a queue breaks: a failed work request (its first error
# completion), error recovery and reconnecting, a reset or a timeout.
NVME_TROUBLE='nvme nvme0: .*\(reset\|timeout\|failed with status\|error recovery\|Reconnecting\)'
if [ -n "$DEV" ]; then
    r0=$(retx)
    check "netem loss 1% on lo" tc qdisc add dev lo root netem loss 1%
    dd if=/dev/urandom of="$src" bs=1M count=$MIB status=none
    check "$MIB MiB written and read back intact with 128K requests under 1% loss" io_round 128K
    tc qdisc del dev lo root 2>/dev/null
    ktap_diag "under loss: $(( $(retx) - r0 )) retransmissions, $(dmesg | grep -c "$NVME_TROUBLE") NVMe errors, resets or timeouts"
    check "MetaRoCE retransmitted what netem dropped" test $(( $(retx) - r0 )) -gt 0
    check "no NVMe error recovery, timeouts or controller resets" eval "! dmesg | grep -q '$NVME_TROUBLE'"
fi
rm -f "$src"
rx=$(rdma statistic show link mrc0/1 | sed -n 's/.* rx_packets \([0-9]*\).*/\1/p')
ktap_diag "mrc0 received $((rx - rx0)) packets: $(rdma statistic show link mrc0/1 | tr -s ' \n' ' ' | cut -c1-600)"
check "the I/O crossed MetaRoCE (mrc0 received over 4096 packets)" test $((rx - rx0)) -gt 4096
# A READ response retransmitted after the target had it all and the host had
# invalidated the key (spec MR-5.6.5) is a refused access that harms nothing;
# any other is an error.
counter() { rdma statistic show link mrc0/1 | sed -n "s/.* $1 \([0-9]*\).*/\1/p"; }
ktap_diag "access_errors $(counter access_errors), of which stale READ responses $(counter stale_read_naks)"
check "no access errors on mrc0 but stale READ responses" test "$(counter access_errors)" = "$(counter stale_read_naks)"

# Teardown in the order an administrator would: host, target, link, module.
disconnect() { local c; c=$(nvme_ctrl) && echo 1 > "/sys/class/nvme/$c/delete_controller"; }
check "the host disconnects" disconnect
check "the controller is gone" wait_for 20 eval '! nvme_ctrl'
target_down() {
    rm "$CFG/ports/1/subsystems/$NQN" && rmdir "$CFG/ports/1" &&
        echo 0 > "$CFG/subsystems/$NQN/namespaces/1/enable" &&
        rmdir "$CFG/subsystems/$NQN/namespaces/1" "$CFG/subsystems/$NQN"
}
check "the target is taken down" target_down
check "rmmod nvme_rdma nvmet_rdma" rmmod nvme_rdma nvmet_rdma
check "no RC QPs left on mrc0" wait_for 10 eval '[ "$(rc_qps)" = 0 ]'
check "rdma link del mrc0" rdma link del mrc0
ip link del mrcnv0
check "rmmod rdma_metaroce after NVMe-oF" rmmod rdma_metaroce
ktap_finish
