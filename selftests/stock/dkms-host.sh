#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# DKMS install of MetaRoCE for Debian's stock kernel, the way a Debian host does it:
# Debian's linux-headers + dkms, then the metaroce-dkms package (its postinst runs
# `dkms install` for the kernel). Runs as root in a throwaway writable copy of the
# toolchain root (tools/vm-stock) whose /usr/lib/modules/KVER holds the stock modules,
# at native speed; the guest then loads the result. Prints KTAP.
# Settings: $METAROCE_OUT/stock.env (STOCK_KVER, STOCK_KDIR, STOCK_SRC, STOCK_DEBS,
# STOCK_PKGDIR). Leaves the module and a fresh module index in $METAROCE_OUT/modlayer.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
# shellcheck disable=SC1091
. "$METAROCE_OUT/stock.env"
KVER=$STOCK_KVER
MODS=/usr/lib/modules/$KVER
LOG=$METAROCE_OUT/dkms-host.log
: > "$LOG"
logged() { echo "+ $*" >> "$LOG"; "$@" >> "$LOG" 2>&1; }

ktap_header
ktap_diag "DKMS install for $KVER on the build machine (throwaway root)"
# shellcheck disable=SC2046
check "Debian's linux-headers-$KVER and dkms install (dpkg)" \
    logged dpkg -i --force-confold $(cat "$STOCK_DEBS")
check "the headers have no Rust artifacts (the case the package must handle)" \
    bash -c "[ -f $MODS/build/Module.symvers ] && [ ! -e $MODS/build/rust/libkernel.rmeta ]"
# The package prepares the Rust artifacts from linux-source itself (a few minutes,
# ~1.5 GB). tools/stock-kernel already did that with the package's own prepare-kdir from
# the same inputs, so by default its cache is seeded with them (prepare-kdir checks the
# inputs' stamp); STOCK_SEED=0 (tools/vm-stock --full-prepare) exercises the whole path.
if [ "${STOCK_SEED:-1}" = 1 ]; then
    mkdir -p "/var/lib/metaroce-dkms/$KVER"
    ln -sfn "$STOCK_KDIR" "/var/lib/metaroce-dkms/$KVER/build"
    ln -sfn "$STOCK_SRC" "/var/lib/metaroce-dkms/linux-source-$(dpkg-query -W -f='${Version}' linux-source-7.2)"
fi
start=$(date +%s)
check "metaroce-dkms installs; its postinst DKMS-builds rdma_metaroce for $KVER" \
    bash -c "dpkg -i $STOCK_PKGDIR/metaroce-dkms_*.deb >> $LOG 2>&1 && dkms status -k $KVER metaroce | tee -a $LOG | grep -q ': installed'"
ktap_diag "dpkg -i metaroce-dkms (DKMS build + install) took $(( $(date +%s) - start )) s"
if [ "${STOCK_SEED:-1}" = 1 ]; then
    check "the build reused the prepared Rust tree after checking its inputs" \
        grep -rq "reusing prepared tree" /var/lib/dkms/metaroce/
else
    check "the build prepared the Rust artifacts from /usr/src/linux-source-7.2.tar.xz" \
        bash -c "grep -rq 'prepared /var/lib/metaroce-dkms/$KVER/build for $KVER' /var/lib/dkms/metaroce/ && [ -f /var/lib/metaroce-dkms/$KVER/build/rust/libkernel.rmeta ]"
fi
mlog=$(find /var/lib/dkms/metaroce -name make.log 2>/dev/null | head -n1)
[ -n "$mlog" ] && cp "$mlog" "$METAROCE_OUT/dkms-make.log"
# objtool and modpost judge the object against this kernel's configuration (Debian's gcc
# build: objtool, retpolines, IBT); rustc's own lints are the same for every kernel and
# only reported here.
check "the DKMS build log has no objtool or modpost warnings (Debian's config)" \
    bash -c "[ -s '$METAROCE_OUT/dkms-make.log' ] && ! grep -E '(objtool|modpost|WARNING):' '$METAROCE_OUT/dkms-make.log'"
ktap_diag "other build warnings: $(grep -c 'warning:' "$METAROCE_OUT/dkms-make.log" 2>/dev/null) (see dkms-make.log)"
ko=$(ls "$MODS"/updates/dkms/rdma_metaroce.ko* 2>/dev/null | head -n1)
check "the module is installed in updates/dkms and indexed by depmod" \
    bash -c "[ -n '$ko' ] && grep -q '^updates/dkms/rdma_metaroce.ko[.a-z]*:.*ib_core' $MODS/modules.dep"
check "its vermagic is $KVER" bash -c "modinfo -F vermagic '$ko' | grep -q '^$KVER '"
check "DKMS signed it with its MOK (/var/lib/dkms/mok.pub)" \
    bash -c "modinfo -F signer '$ko' | grep -q 'DKMS module signing key'"
ktap_diag "module $ko, $(modinfo -F signer "$ko" 2>&1)"

# What the guest needs: the installed module and the new index files.
rm -rf "$METAROCE_OUT/modlayer" && mkdir -p "$METAROCE_OUT/modlayer"
cp -a "$MODS/updates" "$METAROCE_OUT/modlayer/"
for f in "$MODS"/modules.*; do
    [ "$f" -nt "$METAROCE_OUT/stock.env" ] && cp "$f" "$METAROCE_OUT/modlayer/"
done
check "module layer for the guest written" test -s "$METAROCE_OUT/modlayer/modules.dep"
check "dpkg -r metaroce-dkms removes the module again (dkms remove)" \
    bash -c "dpkg -r metaroce-dkms >> $LOG 2>&1 && ! ls $MODS/updates/dkms/rdma_metaroce.ko* 2>/dev/null && [ -z \"\$(dkms status metaroce)\" ]"
ktap_finish
