#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The data-path suite (metaroce_data.sh) with fewer iterations, for the debug kernel:
# KASAN, lockdep and kmemleak make every packet several times dearer under emulation,
# and what the debug tier is for is the splat check over the same code paths.
export VB_ITERS=${VB_ITERS:-30} VB_RPING_COUNT=${VB_RPING_COUNT:-100} VB_TIMEOUT=${VB_TIMEOUT:-240}
export VB_LOSSY_RR_ITERS=${VB_LOSSY_RR_ITERS:-2000}
exec bash "$(dirname "$0")/metaroce_data.sh" "$@"
