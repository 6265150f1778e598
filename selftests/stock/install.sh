#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# MetaRoCE on Debian's stock kernel (guest side of tools/vm-stock): the running kernel
# is Debian's own image with its own modules; MetaRoCE is installed the way a Debian
# host installs it. STOCK_MODE dkms-host: the DKMS install ran on the build machine
# (selftests/stock/dkms-host.sh) and its result is layered over the modules directory;
# dkms-guest: Debian's headers, dkms and metaroce-dkms are installed here and DKMS
# builds for the running kernel. Then the provider package, modprobe, taint, links in
# two namespaces, stock rxe, verbs. Prints KTAP.
# Settings come from $METAROCE_OUT/stock.env (written by tools/vm-stock).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
# shellcheck disable=SC1091
. "$METAROCE_OUT/stock.env"
KVER=$(uname -r)
MODS=/lib/modules/$KVER
SYS=/sys/class/infiniband
LOG=$METAROCE_OUT/stock-install.log
# Verbs programs here use the installed provider package, not a build directory.
unset RDMAV_DRIVERS
: > "$LOG"

cleanup() {
    pkill -x ibv_rc_pingpong 2>/dev/null
    rdma link del mrc0 2>/dev/null; rdma link del mrc1 2>/dev/null
    rdma link del rxe0 2>/dev/null; rdma link del rxe1 2>/dev/null
    rm_hosts
}
trap cleanup EXIT

# logged CMD...: run with output appended to the install log (for the failure report).
logged() { echo "+ $*" >> "$LOG"; "$@" >> "$LOG" 2>&1; }
# GID index of a RoCE v2 IPv4 GID of DEV for ADDR-SUFFIX (e.g. c612:0001), or fail.
roce_gid_index() {
    local dev=$1 suffix=$2 f i
    for f in "$SYS/$dev"/ports/1/gids/*; do
        i=${f##*/}
        [ "$(cat "$SYS/$dev/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
        case "$(cat "$f")" in *"ffff:$suffix") echo "$i"; return 0 ;; esac
    done
    return 1
}
# pingpong DEV-A DEV-B GID-SUFFIX-A GID-SUFFIX-B SERVER-ADDR: ibv_rc_pingpong, server in
# hostB, client in hostA, bounded in time.
pingpong() {
    local ga gb
    ga=$(wait_for 10 roce_gid_index "$1" "$3" && roce_gid_index "$1" "$3") || { echo "no RoCE v2 GID on $1"; return 1; }
    gb=$(wait_for 10 roce_gid_index "$2" "$4" && roce_gid_index "$2" "$4") || { echo "no RoCE v2 GID on $2"; return 1; }
    B timeout 120 ibv_rc_pingpong -d "$2" -g "$gb" -n 100 > "$METAROCE_OUT/pingpong-$2.log" 2>&1 &
    local srv=$!
    sleep 2
    A timeout 100 ibv_rc_pingpong -d "$1" -g "$ga" -n 100 "$5" 2>&1 | tee "$METAROCE_OUT/pingpong-$1.log"
    local rc=${PIPESTATUS[0]}
    wait "$srv" || rc=1
    cat "$METAROCE_OUT/pingpong-$2.log"
    return "$rc"
}
export -f roce_gid_index wait_for A B
export SYS

ktap_header
ktap_diag "kernel $KVER, install mode ${STOCK_MODE}"

# --- the stock kernel ----------------------------------------------------------------------
check "the running kernel is Debian's stock $STOCK_KVER" \
    bash -c "[ '$KVER' = '$STOCK_KVER' ] && grep -q 'Debian' /proc/version"
check "the stock modules are available (modprobe rdma_rxe from the linux-modules package)" \
    bash -c "modprobe rdma_rxe && grep -q '^rdma_rxe ' /proc/modules"
taint_before=$(cat /proc/sys/kernel/tainted)

# A writable view of the stock modules directory (read-only from the host), as on a
# host: DKMS and depmod write into it. In dkms-host mode the DKMS result (the module in
# updates/dkms and the new module index) lies on top.
target=$(readlink -f "$MODS")
mkdir -p /run/metaroce-mods && mount -t tmpfs tmpfs /run/metaroce-mods
mkdir -p /run/metaroce-mods/upper /run/metaroce-mods/work
rm -f "$MODS" 2>/dev/null; mkdir -p "$MODS"
check "the modules directory is writable (overlay${STOCK_MODLAYER:+ with the DKMS result})" \
    mount -t overlay overlay -o "lowerdir=${STOCK_MODLAYER:+$STOCK_MODLAYER:}$target,upperdir=/run/metaroce-mods/upper,workdir=/run/metaroce-mods/work" "$MODS"

# --- installation ----------------------------------------------------------------------------
if [ "$STOCK_MODE" = dkms-guest ]; then
    # Debian's headers for the running kernel, dkms and their dependencies, as apt would
    # install them (downloaded on the host: the guest has no network).
    # shellcheck disable=SC2046
    check "Debian's linux-headers-$KVER and dkms install (dpkg)" \
        logged dpkg -i --force-confold $(cat "$STOCK_DEBS")
    check "the headers have no Rust artifacts (the case DKMS must handle)" \
        bash -c "[ -f $MODS/build/Module.symvers ] && [ ! -e $MODS/build/rust/libkernel.rmeta ]"
    # The Rust artifacts were prepared on the host by the package's own prepare-kdir from
    # the same inputs; seed the package's cache with them (a TCG guest would need hours).
    if [ "${STOCK_SEED:-1}" = 1 ]; then
        mkdir -p "/var/lib/metaroce-dkms/$KVER"
        ln -sfn "$STOCK_KDIR" "/var/lib/metaroce-dkms/$KVER/build"
        ln -sfn "$STOCK_SRC" "/var/lib/metaroce-dkms/linux-source-$(dpkg-query -W -f='${Version}' linux-source-7.2)"
    fi
    start=$(date +%s)
    check "metaroce-dkms installs and DKMS builds rdma_metaroce for $KVER" \
        bash -c "dpkg -i $STOCK_PKGDIR/metaroce-dkms_*.deb >> $LOG 2>&1 && dkms status -k $KVER metaroce | tee -a $LOG | grep -q ': installed'"
    ktap_diag "dpkg -i metaroce-dkms (DKMS build + install) took $(( $(date +%s) - start )) s"
    check "the DKMS build reused the prepared Rust tree (no linux-source rebuild)" \
        grep -rq "reusing prepared tree" /var/lib/dkms/metaroce/
else
    check "the DKMS-installed module is in updates/dkms" bash -c "ls $MODS/updates/dkms/rdma_metaroce.ko*"
fi
if ls "$STOCK_PKGDIR"/metaroce-ibverbs-provider_*.deb >/dev/null 2>&1; then
    check "metaroce-ibverbs-provider installs (provider + /etc/libibverbs.d/metaroce.driver)" \
        bash -c "dpkg -i --force-confnew $STOCK_PKGDIR/metaroce-ibverbs-provider_*.deb >> $LOG 2>&1 && [ -f /etc/libibverbs.d/metaroce.driver ] && ls /usr/lib/*/libibverbs/libmetaroce-rdmav*.so"
else
    ktap_skip "metaroce-ibverbs-provider installs (no provider package was built)"
fi
check "modinfo rdma_metaroce: vermagic is $KVER" \
    bash -c "modinfo -F vermagic rdma_metaroce | grep -q '^$KVER '"
ktap_diag "module file: $(modinfo -n rdma_metaroce 2>&1); signer: $(modinfo -F signer rdma_metaroce 2>&1)"

# --- load --------------------------------------------------------------------------------------
check "modprobe rdma_metaroce (resolves ib_core and the Rust kernel crate's symbols)" \
    bash -c "modprobe rdma_metaroce && grep -q '^rdma_metaroce ' /proc/modules"
taint_after=$(cat /proc/sys/kernel/tainted)
new_taint=$(( taint_after & ~taint_before ))
ktap_diag "taint before $taint_before, after $taint_after"
# Allowed: O (out-of-tree, 4096) and E (unsigned module, 8192). Nothing else: no W, no D.
check "loading taints only O/E (out-of-tree, unsigned)" test $(( new_taint & ~(4096 | 8192) )) -eq 0
check "the kernel log has the module's load message" bash -c "dmesg | grep -q 'rdma_metaroce: loaded'"

# --- links in two namespaces ------------------------------------------------------------------
mk_hosts
check "rdma link add mrc0 type metaroce netdev veth0 (in hostA)" A rdma link add mrc0 type metaroce netdev veth0
check "rdma link add mrc1 type metaroce netdev veth1 (in hostB)" B rdma link add mrc1 type metaroce netdev veth1
# (nldev names a port's netdev only to callers in the netdev's namespace.)
check "rdma link shows mrc0/1 and mrc1/1 ACTIVE on their veths" bash -c "
    ip netns exec hostA rdma link show mrc0/1 | grep -q 'state ACTIVE.*netdev veth0' &&
    ip netns exec hostB rdma link show mrc1/1 | grep -q 'state ACTIVE.*netdev veth1'"
ktap_diag "$(rdma link show | tr '\n' ';')"
check "mrc0 has a RoCE v2 GID for 198.18.0.1" wait_for 10 roce_gid_index mrc0 c612:0001

# --- the stock rxe alongside (UDP 4791 vs MetaRoCE's 4792) ----------------------------------------
ip link add veth2 netns hostA type veth peer name veth3 netns hostB
A ip addr add 198.18.1.1/24 dev veth2; A ip link set veth2 up
B ip addr add 198.18.1.2/24 dev veth3; B ip link set veth3 up
check "rdma link add rxe0/rxe1 (stock rdma_rxe) in hostA/hostB" \
    bash -c "ip netns exec hostA rdma link add rxe0 type rxe netdev veth2 && ip netns exec hostB rdma link add rxe1 type rxe netdev veth3"
check "ibv_devices lists rxe0 (rdma-core on the stock kernel)" bash -c "A ibv_devices | grep -qw rxe0"
check "ibv_rc_pingpong over stock rxe between the namespaces" pingpong rxe0 rxe1 c612:0101 c612:0102 198.18.1.2
check "the verbs probe (PD, MR, CQ, RC QP, INIT, post_recv) passes on stock rxe0" A python3 "$HERE/verbs_probe.py" rxe0

# --- verbs over MetaRoCE -------------------------------------------------------------------------------
# Runs by itself once the verbs path exists: the provider lists mrc0 and the kernel
# does what ibv_rc_pingpong needs before it talks to its peer (PD, MR, CQ, RC QP to
# INIT, post_recv; verbs_probe.py, itself checked on rxe0). Until then the
# step is skipped with the reason.
if ! A ibv_devices 2>/dev/null | grep -qw mrc0; then
    ktap_skip "ibv_rc_pingpong over MetaRoCE (ibv_devices does not list mrc0: no verbs provider)"
elif ! why=$(A python3 "$HERE/verbs_probe.py" mrc0 2>&1); then
    ktap_skip "ibv_rc_pingpong over MetaRoCE (no data path yet: $(echo "$why" | tail -n1))"
else
    check "ibv_rc_pingpong over MetaRoCE between the namespaces" pingpong mrc0 mrc1 c612:0001 c612:0002 198.18.0.2
fi

# --- teardown --------------------------------------------------------------------------------------------
rdma link del rxe0; rdma link del rxe1
check "rdma link del mrc0 and mrc1" bash -c "rdma link del mrc0 && rdma link del mrc1 && [ ! -e $SYS/mrc0 ] && [ ! -e $SYS/mrc1 ]"
check "rmmod rdma_metaroce" bash -c "rmmod rdma_metaroce && ! grep -q '^rdma_metaroce ' /proc/modules"
if [ "$STOCK_MODE" = dkms-guest ]; then
    check "dpkg -r metaroce-dkms removes the module (dkms remove)" \
        bash -c "dpkg -r metaroce-dkms >> $LOG 2>&1 && ! modinfo rdma_metaroce >/dev/null 2>&1"
fi
ktap_finish
