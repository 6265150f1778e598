# SPDX-License-Identifier: GPL-2.0
"""Flat verbs constants for the selftests' pyverbs snippets.

rdma-core 65's pyverbs exposes enums as classes (ibv_qp_type.IBV_QPT_RC, ...);
this gathers every member into one namespace of plain ints (`e.IBV_QPT_RC`) so
the test snippets read like C verbs code."""
import enum
import types

import pyverbs.libibverbs_enums as _E

e = types.SimpleNamespace()
for _cls in vars(_E).values():
    if isinstance(_cls, type) and issubclass(_cls, enum.Enum):
        for _m in _cls:
            setattr(e, _m.name, int(_m.value))
# A few constants are plain module integers rather than enum members
# (_IBV_ADVISE_MR_ADVICE_*, _IBV_ADVISE_MR_FLAG_FLUSH).
for _name, _v in vars(_E).items():
    if _name.lstrip('_').startswith('IBV_') and isinstance(_v, int) and not hasattr(e, _name):
        setattr(e, _name, _v)
