#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""verbs_probe.py DEV: exit 0 if DEV supports the verbs ibv_rc_pingpong needs before
it talks to its peer (PD, MR, CQ, an RC QP moved to INIT, a posted receive), else print
which one fails and exit 1. Used to turn the
MetaRoCE pingpong step on by itself once the data path exists."""
import sys

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR
import pyverbs.libibverbs_enums as e

step = "open device"
try:
    ctx = Context(name=sys.argv[1])
    step = "ibv_alloc_pd"
    pd = PD(ctx)
    step = "ibv_reg_mr"
    mr = MR(pd, 4096, e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
    step = "ibv_create_cq"
    cq = CQ(ctx, 16)
    step = "ibv_create_qp (RC)"
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    step = "ibv_modify_qp (RESET->INIT)"
    attr = QPAttr()
    attr.port_num = 1
    attr.qp_access_flags = e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE
    qp.to_init(attr)
    step = "ibv_post_recv"
    qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
except Exception as err:  # pyverbs raises PyverbsRDMAError / PyverbsError
    print(f"{step} fails: {err}")
    sys.exit(1)
