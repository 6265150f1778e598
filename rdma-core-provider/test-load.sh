#!/usr/bin/env bash
# Host-side smoke test of the MetaRoCE provider; needs no kernel module and no
# RDMA hardware. Runs the root's own libibverbs 65 (through bubblewrap).
#
#   1. Symbols: the provider needs nothing from libibverbs beyond the public
#      IBVERBS_1.* ABI and the private IBVERBS_PRIVATE_65 ABI, and every
#      symbol resolves (ldd -r).
#   2. Loading and matching: ibv_devices, with env.sh's environment, runs
#      against a fake sysfs tree (SYSFS_PATH) holding three uverbs devices:
#        mrtest0  modalias platform:rdma_metaroce, uverbs ABI 1 -> listed
#        mrabi2   modalias platform:rdma_metaroce, uverbs ABI 2 -> refused
#        other0   modalias platform:something_else             -> not ours
#      This exercises libibverbs' real dlopen, registration and match path.
#      Control: without RDMAV_DRIVERS no stock provider claims mrtest0.
#   3. Install layout: `make install DESTDIR=...` output, overlaid on the root's
#      provider directory and /etc/libibverbs.d, is found with no environment.
#   4. Unit: `make check` (the cq_ex and ibv_wr_* emulation against stubbed
#      ibv_cmd_* helpers, under ASan/UBSan).
#
# Usage: rdma-core-provider/test-load.sh [BUILD_DIR]   (default rdma-core-provider/out;
#        it is (re)built first with ./build)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=${1:-$HERE/out}
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# (Re)build incrementally, so the test always sees the current sources.
"$HERE/build" "$OUT" >/dev/null 2>"$OUT.build.log" || { cat "$OUT.build.log" >&2; fail "build failed"; }
rm -f "$OUT.build.log"
OUT=$(cd "$OUT" && pwd)
SO=$(find "$OUT" -maxdepth 1 -name "libmetaroce-rdmav*.so" | head -n1)
PABI=${SO##*-rdmav}; PABI=${PABI%.so}
ROOT=$("$REPO/tools/mkroot")
CACHE=${METAROCE_CACHE:-/var/cache/metaroce}
command -v bwrap >/dev/null || fail "bubblewrap (bwrap) is needed"

# Run a command in the toolchain root. Extra bwrap arguments come first, up to "--".
inroot() {
    local extra=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do extra+=("$1"); shift; done
    shift
    bwrap --bind "$ROOT" / --dev /dev --proc /proc --ro-bind /sys /sys --tmpfs /tmp \
          --ro-bind "$OUT" "$OUT" --ro-bind "$CACHE" "$CACHE" --die-with-parent --unshare-net \
          --setenv PATH /usr/sbin:/usr/bin:/sbin:/bin --setenv LANG C.UTF-8 \
          "${extra[@]}" "$@"
}

# ---- 1. symbols ----
syms=$(inroot -- nm -D --undefined-only --with-symbol-versions "$SO")
bad=$(awk '$1 == "U" { print $2 }' <<<"$syms" \
      | grep -vE "@(GLIBC_[0-9.]+|IBVERBS_1\.[0-9]+|IBVERBS_PRIVATE_$PABI)$" || true)
[ -z "$bad" ] || fail "unexpected undefined symbols: $bad"
grep -q "verbs_register_driver_$PABI@IBVERBS_PRIVATE_$PABI" <<<"$syms" \
    || fail "provider does not reference verbs_register_driver_$PABI@IBVERBS_PRIVATE_$PABI"
n_priv=$(grep -c "@IBVERBS_PRIVATE_$PABI" <<<"$syms")
lddr=$(inroot -- ldd -r "$SO" 2>&1)
! grep -qiE "undefined symbol|not found" <<<"$lddr" || fail "ldd -r: $lddr"
inroot -- nm -D --defined-only "$SO" | grep -q " verbs_provider_metaroce$" \
    || fail "verbs_provider_metaroce is not exported"
pass "symbols: $n_priv from IBVERBS_PRIVATE_$PABI, the rest from GLIBC/IBVERBS_1.x; ldd -r clean"

# ---- 2. load and match through libibverbs against a fake sysfs ----
F=$(mktemp -d)
trap 'rm -rf "$F"' EXIT
mkdev() { # uverbsN ibdev abi modalias
    local uv=$F/sys/class/infiniband_verbs/$1 ib=$F/sys/class/infiniband/$2
    mkdir -p "$uv" "$ib/device" "$F/dev-ib/$1"
    echo "$2" > "$uv/ibdev"; echo "$3" > "$uv/abi_version"
    echo "231:$((192 + ${1#uverbs}))" > "$uv/dev"
    echo "1: CA" > "$ib/node_type"; echo "0002:c9ff:fe00:000${1#uverbs}" > "$ib/node_guid"
    echo "$4" > "$ib/device/modalias"
}
mkdir -p "$F/sys/class/infiniband_verbs"
echo 6 > "$F/sys/class/infiniband_verbs/abi_version"
mkdev uverbs0 mrtest0 1 platform:rdma_metaroce
mkdev uverbs1 mrabi2 2 platform:rdma_metaroce
mkdev uverbs2 other0 1 platform:something_else
# The character devices only need to exist (libibverbs stat()s them); directories
# make any attempt to open them fail cleanly.

eval "$("$HERE/env.sh" "$OUT")"
set +e
res=$(inroot --ro-bind "$F" "$F" --ro-bind "$F/dev-ib" /dev/infiniband \
             --setenv SYSFS_PATH "$F/sys" --setenv RDMAV_DRIVERS "$RDMAV_DRIVERS" \
             -- ibv_devices 2>&1)
rc=$?
set -e
printf '%s\n' "$res" | sed 's/^/    | /'
if grep -q "couldn't load driver" <<<"$res"; then
    fail "libibverbs could not load the provider"
fi
if ! grep -qE "^\s*mrtest0\s+0002c9fffe000000" <<<"$res"; then
    if [ -d /sys/class/infiniband ]; then
        echo "SKIP: this host has RDMA devices; libibverbs used netlink, not the fake sysfs"
        exit 0
    fi
    fail "ibv_devices (rc=$rc) did not list the fake MetaRoCE device mrtest0"
fi
grep -q "Driver metaroce does not support the kernel ABI of 2" <<<"$res" \
    || fail "the ABI-2 device was not refused by the metaroce driver"
! grep -qE "^\s*(mrabi2|other0)\s" <<<"$res" || fail "a device that is not a MetaRoCE ABI-1 device was listed"
pass "ibv_devices loaded $(basename "$SO") via RDMAV_DRIVERS, matched platform:rdma_metaroce, refused ABI 2, ignored other0"

fake=(--ro-bind "$F" "$F" --ro-bind "$F/dev-ib" /dev/infiniband --setenv SYSFS_PATH "$F/sys")
res=$(inroot "${fake[@]}" --unsetenv RDMAV_DRIVERS -- ibv_devices 2>&1 || true)
! grep -qE "^\s*mrtest0\s" <<<"$res" || fail "mrtest0 is listed without the MetaRoCE provider"
pass "control: without RDMAV_DRIVERS, no stock provider claims mrtest0"

# ---- 3. installed layout ----
S=$F/stage
UAPI=$(cd "$HERE/../rdma_metaroce/uapi" && pwd)
inroot --bind "$F" "$F" --ro-bind "$HERE" "$HERE" --ro-bind "$UAPI" "$UAPI" -- \
    make -s -C "$HERE" install O="$OUT" DESTDIR="$S" >/dev/null || fail "make install failed"
pdir=$(cd "$S" && ls -d usr/lib/*/libibverbs)
[ -f "$S/$pdir/$(basename "$SO")" ] && [ "$(cat "$S/etc/libibverbs.d/metaroce.driver")" = "driver metaroce" ] \
    || fail "make install did not stage /$pdir/$(basename "$SO") and /etc/libibverbs.d/metaroce.driver"
res=$(inroot "${fake[@]}" --unsetenv RDMAV_DRIVERS \
             --ro-bind "$S/$pdir/$(basename "$SO")" "/$pdir/$(basename "$SO")" \
             --ro-bind "$S/etc/libibverbs.d/metaroce.driver" /etc/libibverbs.d/metaroce.driver \
             -- ibv_devices 2>&1 || true)
grep -qE "^\s*mrtest0\s" <<<"$res" || { printf '%s\n' "$res"; fail "installed provider did not claim mrtest0"; }
pass "installed layout (/$pdir, /etc/libibverbs.d/metaroce.driver) works without environment"

# ---- 4. unit test of the emulation layers ----
"$REPO/tools/inroot" make -s -C "$HERE" check O="$OUT" || fail "make check"
