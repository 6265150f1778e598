#!/usr/bin/env bash
# gen-bindings.sh KDIR OUT — generate the raw Rust bindings for rdma_metaroce.
#
# Uses the exact clang flags the kernel used for its own `rust/bindings` (read from the
# saved command in KDIR), so struct layouts match the kernel the module is built for.
# Only the allowlisted RDMA / netdev / UDP-tunnel items (and what they reference) are
# emitted.
set -euo pipefail
KDIR=$(cd "$1" && pwd)
OUT=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
CMD="$KDIR/rust/bindings/.bindings_generated.rs.cmd"
[ -f "$CMD" ] || { echo "gen-bindings: $CMD missing: KDIR must be a prepared Rust-enabled kernel tree" >&2; exit 1; }

# The clang command line is what follows ' -- ' up to the first ' ; ' (the kernel's
# post-processing). Drop its dep-file and KBUILD_* name flags; parse shell quoting.
cflags=$(sed -n '1s/^[^:]*:= //p' "$CMD" | sed -e 's/^.* -- //' -e 's/ ; .*$//' \
         -e 's/-Wp,-MMD,[^ ]*//' -e "s/-D_*KBUILD_[A-Z]*=[^ ]*//g")
eval "set -- $cflags"
cflags_array=("$@")
BINDGEN=${BINDGEN:-bindgen}

allow_fn='ib_.*|_ib_alloc_device|rdma_.*|mrc_.*|register_netdevice_notifier|unregister_netdevice_notifier|get_device|put_device|udp_sock_create4|udp_sock_create6|setup_udp_tunnel_sock|udp_tunnel_sock_release|ip_local_out|ip6_local_out|ip_route_output_flow|addrconf_addr_eui48|ipv6_addr_.*|get_random_u32|rdma_alloc_hw_stats_struct'
allow_ty='ib_.*|mrc_qp_io|mrc_arrival|mrc_ring_mem|mrc_piece|mrc_frag|metaroce_.*|ib_umem|rdma_hw_stats|rdma_stat_desc|rdma_.*|uverbs_attr_bundle|net_device|notifier_block|netdev_cmd|ib_device_ops|udp_port_cfg|udp_tunnel_sock_cfg'
allow_var='IB_.*|METAROCE_.*|RDMA_.*|NETDEV_.*|ARPHRD_ETHER|NOTIFY_.*|E[A-Z0-9]+'

cd "$KDIR"
"$BINDGEN" "$HERE/bindings_helper.h" \
    --use-core --formatter prettyplease --ctypes-prefix core::ffi --no-layout-tests --no-doc-comments \
    --with-derive-default --no-debug '.*' --rust-target 1.85 \
    --enable-function-attribute-detection \
    --blocklist-type '__kernel_s?size_t' --blocklist-type __kernel_ptrdiff_t \
    --opaque-type xregs_state --opaque-type desc_struct --opaque-type arch_lbr_state \
    --opaque-type local_apic --opaque-type alt_instr --opaque-type x86_msi_data \
    --opaque-type x86_msi_addr_lo --opaque-type spinlock \
    --blocklist-function '__list_.*_report' \
    --raw-line 'pub type __kernel_size_t = usize; pub type __kernel_ssize_t = isize; pub type __kernel_ptrdiff_t = isize;' \
    --allowlist-function "$allow_fn" --allowlist-type "$allow_ty" --allowlist-var "$allow_var" \
    --default-enum-style consts \
    -o "$OUT.tmp" -- "${cflags_array[@]}" -DMODULE -DKBUILD_MODNAME=\"rdma_metaroce\" -I"$HERE"
mv "$OUT.tmp" "$OUT"
