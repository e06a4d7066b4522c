"""MoE all-to-all: hiding ratio, routing skew -> traffic matrix, FAST schedule, completion times.

Data flow: ``gpu_traffic_matrix`` (routing.py) -> ``fast_schedule`` (schedule.py) ->
``alltoall_times`` (timing.py: lower bound, plain max-min all-to-all, FAST pipeline).
Formulas: docs/formulas.md 3.5, 7.1-7.3. SI units: bytes, seconds, bytes/s, FLOP/s.
"""

from .ratio import MoELayerTimes, hiding_ratio, moe_layer_times
from .routing import (
    NodeLimitedTraffic,
    SkewStats,
    busiest_gpu_factor,
    check_traffic_matrix,
    expert_loads,
    expert_placement,
    expert_popularity,
    gpu_traffic_matrix,
    node_limited_traffic,
    pair_skew_matrix,
    server_matrix,
    skew_stats,
)
from .schedule import (
    Balanced,
    Matching,
    FastSchedule,
    balance_intra_server,
    bvn_decompose,
    fast_schedule,
    min_stages,
    pad_to_equal_line_sums,
)
from .timing import (
    AllToAllTimes,
    FastTimes,
    alltoall_times,
    choose_unit_bytes,
    fast_alltoall_s,
    fast_alltoall_times,
    lower_bound_s,
    plain_alltoall_s,
)

__all__ = [
    "AllToAllTimes",
    "Balanced",
    "FastTimes",
    "Matching",
    "MoELayerTimes",
    "NodeLimitedTraffic",
    "FastSchedule",
    "SkewStats",
    "alltoall_times",
    "balance_intra_server",
    "busiest_gpu_factor",
    "bvn_decompose",
    "check_traffic_matrix",
    "choose_unit_bytes",
    "expert_loads",
    "expert_placement",
    "expert_popularity",
    "fast_alltoall_s",
    "fast_alltoall_times",
    "fast_schedule",
    "gpu_traffic_matrix",
    "hiding_ratio",
    "lower_bound_s",
    "min_stages",
    "moe_layer_times",
    "node_limited_traffic",
    "pair_skew_matrix",
    "pad_to_equal_line_sums",
    "plain_alltoall_s",
    "server_matrix",
    "skew_stats",
]
