#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Verbs objects through unmodified rdma-core: the provider matches MetaRoCE devices
# (whatever their name), ibv_devinfo reports the port, and contexts, PDs and CQs
# are created and destroyed with the errno rdma-core's tests expect on bad input.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/ktap.sh"
. "$HERE/../lib/net.sh"
KO=${METAROCE_KO:-$HERE/../../rdma_metaroce.ko}

cleanup() { rmmod rdma_metaroce 2>/dev/null; rm_hosts; }
trap cleanup EXIT
cleanup

ktap_header
insmod "$KO"
mk_hosts
A rdma link add mrc0 type metaroce netdev veth0
B rdma link add fabric7 type metaroce netdev veth1

check "ibv_devices lists mrc0" bash -c "ibv_devices | grep -qw mrc0"
check "the provider matches any link name (fabric7), by the parent's modalias" bash -c "ibv_devices | grep -qw fabric7 && grep -qx platform:rdma_metaroce /sys/class/infiniband/fabric7/device/modalias"
check "ibv_devinfo -v: port 1 PORT_ACTIVE, link layer Ethernet" bash -c "ibv_devinfo -v -d mrc0 > /tmp/devinfo && grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo && grep -q 'link_layer:.*Ethernet' /tmp/devinfo"
check "ibv_devinfo -v: active MTU 1024 on a 1500-byte netdev, max 4096" bash -c "grep -q 'max_mtu:.*4096' /tmp/devinfo && grep -q 'active_mtu:.*1024' /tmp/devinfo"
check "ibv_devinfo -v: a RoCE v2 GID for 198.18.0.1" bash -c "grep -E 'GID\[ *[0-9]+\]:.*::ffff:198.18.0.1, RoCE v2' /tmp/devinfo"
check "ibv_devinfo -v: device limits (max_qp, max_cqe, atomic_cap)" bash -c "grep -q 'max_qp:.*16384' /tmp/devinfo && grep -q 'max_cqe:.*65535' /tmp/devinfo && grep -q 'atomic_cap:.*ATOMIC_HCA' /tmp/devinfo"

py() { python3 - "$@"; }
check "pyverbs: open context, alloc PD, create and destroy CQs of several sizes" py <<'PY'
import pyverbs.device as d
from pyverbs.pd import PD
from pyverbs.cq import CQ, CompChannel
ctx = d.Context(name='mrc0')
pd = PD(ctx)
for n in (1, 16, 4096, 65535):
    cq = CQ(ctx, n)
    assert cq.cqe >= n, (n, cq.cqe)
    cq.close()
ch = CompChannel(ctx)
cq = CQ(ctx, 8, None, ch, 0)
cq.req_notify()
assert cq.poll(4) == (0, []), "a fresh CQ is empty"
cq.close(); ch.close(); pd.close(); ctx.close()
PY
check "pyverbs: a CQ larger than max_cqe fails with EINVAL" py <<'PY'
import errno
import pyverbs.device as d
from pyverbs.cq import CQ
from pyverbs.pyverbs_error import PyverbsRDMAError
ctx = d.Context(name='mrc0')
try:
    CQ(ctx, 1 << 20)
except PyverbsRDMAError as e:
    assert e.error_code == errno.EINVAL, e
else:
    raise SystemExit("CQ of 2^20 entries was accepted")
PY
check "rdma resource shows the PD and CQ while a context holds them" py <<'PY'
import subprocess
import pyverbs.device as d
from pyverbs.pd import PD
from pyverbs.cq import CQ
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 32)
out = subprocess.run(['rdma', 'resource', 'show', 'cq', 'dev', 'mrc0'], capture_output=True, text=True).stdout
assert 'cqe 32' in out, out
PY
check "a process exiting with objects open releases them (rmmod succeeds later)" py <<'PY'
import pyverbs.device as d
from pyverbs.pd import PD
from pyverbs.cq import CQ
ctx = d.Context(name='mrc0'); pd = PD(ctx); cq = CQ(ctx, 32)
import os; os._exit(0)
PY
check "rmmod with links, after all user contexts closed" rmmod rdma_metaroce
ktap_finish
