# SPDX-License-Identifier: GPL-2.0
"""RC QP set-up shared by the selftests' pyverbs snippets: the INIT and RTR
attributes that point a QP on mrc0 (198.18.0.1) at a peer QP on 198.18.0.2.
The snippets then check what the device does with them."""
from pyverbs.addr import AHAttr, GlobalRoute, GID
from pyverbs.qp import QPAttr

from pyverbs_compat import e

PEER_GID = '0000:0000:0000:0000:0000:ffff:c612:0002'  # 198.18.0.2
PEER_QPN = 0x1234
RQ_PSN = 0x111

RTR_MASK = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
            | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)


def modify_to_init(qp, access):
    """RESET -> INIT on port 1 with `access` as the remote access flags."""
    a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    a.qp_access_flags = access
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)


def peer_ah_attr(gid_index):
    """The address of the peer on 198.18.0.2 (a GRH through the local GID
    `gid_index`), for an RC QP's RTR attributes or an address handle."""
    gr = GlobalRoute(dgid=GID(PEER_GID), sgid_index=gid_index)
    return AHAttr(gr=gr, is_global=1, port_num=1)


def rtr_attr(gid_index, max_dest_rd_atomic):
    """INIT -> RTR attributes (use with RTR_MASK): the peer's address through
    the local GID `gid_index`, 1024-byte MTU, `max_dest_rd_atomic` READs."""
    a = QPAttr(qp_state=e.IBV_QPS_RTR, cur_qp_state=e.IBV_QPS_INIT, path_mtu=e.IBV_MTU_1024)
    a.dest_qp_num = PEER_QPN
    a.rq_psn = RQ_PSN
    a.max_dest_rd_atomic = max_dest_rd_atomic
    a.min_rnr_timer = 12
    a.ah_attr = peer_ah_attr(gid_index)
    return a
