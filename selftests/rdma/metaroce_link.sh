#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# MetaRoCE device lifecycle: module parameters, `rdma link add/del`, bad input,
# GIDs (IPv4 and IPv6), port state following the netdev, NETDEV_UNREGISTER, and
# module unload with live links. Runs as root inside the test VM; prints KTAP.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}
SYS=/sys/class/infiniband

cleanup() { rmmod rdma_metaroce 2>/dev/null; rm_hosts; }
trap cleanup EXIT
cleanup

has_dev() { [ -e "$SYS/$1" ]; }
no_dev() { [ ! -e "$SYS/$1" ]; }
port_state() { rdma link show "$1/1" | grep -o 'state [A-Z_]*' | cut -d' ' -f2; }
# gid_of DEV TYPE ADDR-PREFIX: some GID of that type whose text starts with the prefix.
gid_of() {
    local dev=$1 type=$2 prefix=$3 f i
    for f in "$SYS/$dev"/ports/1/gids/*; do
        i=${f##*/}
        [ "$(cat "$SYS/$dev/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "$type" ] || continue
        case "$(cat "$f")" in "$prefix"*) return 0 ;; esac
    done
    return 1
}

ktap_header

# --- module and parameters -------------------------------------------------------
PARAMS="udp_port num_paths cc_target_delay_us reply_wait_us ack_delay_us ack_every initial_rtt_us min_path_rto_us min_rto_us max_rto_us init_window max_window ecn_gain_shift rc_mtu zero_copy_tx steer_bytes unlocked_copy_bytes"
check "modinfo lists the parameters ($PARAMS)" \
    bash -c "p=\$(modinfo -p '$KO'); for n in $PARAMS; do grep -q \"^\$n:\" <<< \"\$p\" || exit 1; done"
check "modinfo carries the rdma-link-metaroce alias" bash -c "modinfo -F alias '$KO' | grep -qx rdma-link-metaroce"
check_fails "loading with udp_port=4791 (RoCEv2's port) is refused" mrc_insmod udp_port=4791
check_fails "loading with num_paths=0 is refused" mrc_insmod num_paths=0
check_fails "loading with rc_mtu=255 (below MetaRoCE's smallest MTU) is refused" mrc_insmod rc_mtu=255
check_fails "loading with rc_mtu=65001 (above MetaRoCE's largest MTU) is refused" mrc_insmod rc_mtu=65001
check_fails "loading with zero_copy_tx=2 is refused" mrc_insmod zero_copy_tx=2
check_fails "loading with reply_wait_us above ack_delay_us is refused" mrc_insmod ack_delay_us=100 reply_wait_us=101
check_fails "loading with max_rto_us below min_path_rto_us is refused" mrc_insmod min_path_rto_us=20000 max_rto_us=19999
check_fails "loading with max_window=1023 (below a packet) is refused" mrc_insmod max_window=1023
check_fails "loading with ack_every=0 is refused" mrc_insmod ack_every=0
check_fails "loading with ack_every=256 is refused" mrc_insmod ack_every=256
check_fails "loading with ecn_gain_shift=17 is refused" mrc_insmod ecn_gain_shift=17
check_fails "loading with initial_rtt_us=0 is refused" mrc_insmod initial_rtt_us=0
loads_and_unloads() { mrc_insmod "$@" && rmmod rdma_metaroce; }
check "module loads with every timer and window parameter at its range's edge" \
    loads_and_unloads ack_delay_us=1000000 reply_wait_us=1000000 ack_every=255 initial_rtt_us=10000000 \
    min_path_rto_us=60000000 min_rto_us=1 max_rto_us=600000000 init_window=1024 \
    max_window=268435456 ecn_gain_shift=0 cc_target_delay_us=10000000
check "module loads with defaults" mrc_insmod

# --- link add / del ---------------------------------------------------------------
mk_hosts
check "rdma link add mrc0 type metaroce netdev veth0 (in hostA)" A rdma link add mrc0 type metaroce netdev veth0
check "mrc0 appears in /sys/class/infiniband and rdma dev" bash -c "has_dev() { [ -e $SYS/\$1 ]; }; has_dev mrc0 && rdma dev show mrc0 | grep -q 'mrc0'"
# rdma link names the netdev only to callers in the netdev's own namespace.
check "rdma link shows mrc0/1 ACTIVE on veth0 (from hostA)" bash -c "ip netns exec hostA rdma link show mrc0/1 | grep 'state ACTIVE' | grep -q 'netdev veth0'"
check "port 1 link layer is Ethernet" grep -qx Ethernet "$SYS/mrc0/ports/1/link_layer"
check "node GUID is the EUI-64 of veth0's MAC" bash -c "
    mac=\$(ip -n hostA -br link show veth0 | awk '{print \$3}')
    IFS=: read -r a b c d e f <<< \"\$mac\"
    want=\$(printf '%02x%s:%sff:fe%s:%s%s' \$((0x\$a ^ 2)) \$b \$c \$d \$e \$f)
    [ \"\$(cat $SYS/mrc0/node_guid)\" = \"\$want\" ]"
check "GID table has a RoCE v2 entry for 198.18.0.1" wait_for 10 gid_of mrc0 "RoCE v2" "0000:0000:0000:0000:0000:ffff:c612:0001"
A ip addr add 2001:2::1/64 dev veth0 nodad
check "IPv6 address 2001:2::1 appears as a RoCE v2 GID" wait_for 10 gid_of mrc0 "RoCE v2" "2001:0002:0000:0000:0000:0000:0000:0001"
check "rdma link add on hostB's veth1 (second namespace) makes mrc1" B rdma link add mrc1 type metaroce netdev veth1
check "both devices are listed by rdma dev" bash -c "rdma dev | grep -q '^[0-9]*: mrc0' && rdma dev | grep -q '^[0-9]*: mrc1'"

# --- bad input ----------------------------------------------------------------------
check_fails "a second device on the same netdev is refused" A rdma link add mrc9 type metaroce netdev veth0
ip -n hostB link add dummy0 type dummy
check_fails "a duplicate name on a fresh netdev is refused" B rdma link add mrc0 type metaroce netdev dummy0
check_fails "a missing netdev is refused" A rdma link add mrc7 type metaroce netdev nosuch0
check_fails "a non-Ethernet netdev (loopback) is refused" A rdma link add mrc8 type metaroce netdev lo

# --- port state follows the netdev -----------------------------------------------------
A ip link set veth0 down
check "port goes DOWN with its netdev" bash -c "rdma link show mrc0/1 | grep -q 'state DOWN'"
A ip link set veth0 up
check "port is ACTIVE again when the netdev comes back" bash -c "rdma link show mrc0/1 | grep -q 'state ACTIVE'"

# --- removal paths -------------------------------------------------------------------------
check "rdma link del mrc1 removes it" bash -c "rdma link del mrc1 && [ ! -e $SYS/mrc1 ]"
B rdma link add mrc1 type metaroce netdev veth1
ip -n hostA link del veth0   # deletes the pair: NETDEV_UNREGISTER for veth0 and veth1
check "deleting the netdev unregisters its devices (NETDEV_UNREGISTER)" wait_for 20 bash -c "[ ! -e $SYS/mrc0 ] && [ ! -e $SYS/mrc1 ]"
rm_hosts; mk_hosts
A rdma link add mrc0 type metaroce netdev veth0
B rdma link add mrc1 type metaroce netdev veth1
check "rmmod with two live links tears both down" bash -c "rmmod rdma_metaroce && [ ! -e $SYS/mrc0 ] && [ ! -e $SYS/mrc1 ]"

ktap_finish
