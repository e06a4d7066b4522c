"""Compute time and HBM traffic of one step on one GPU (the memory roofline's numerator).

The compute time is the step's hardware FLOPs over the achieved rate. HBM bytes are a
first-order count, not an operator model: every GEMM reads its weights once per pass
(forward, input gradient, weight gradient), stored activations are written in forward and
read in backward, and the optimizer reads and writes its state once per step.
"""

from __future__ import annotations

import numpy as np

from stepbudget.plan.derive import Plan
from stepbudget.plan.memory import activation_bytes_per_layer, model_state_bytes


def compute_s(plan: Plan) -> np.ndarray:
    """Forward + backward (+ recompute) time of all micro-batches: FLOPs / achieved rate."""
    return plan.hardware_flops_per_gpu / plan.flops_rate


def hbm_bytes(plan: Plan) -> np.ndarray:
    """Bytes read from and written to HBM per step per GPU (approximate, see module doc)."""
    sc = plan.scenario
    m, w = sc.model, sc.precision
    psi = plan.params_dense_per_gpu + plan.params_expert_per_gpu
    passes = plan.microbatches  # each micro-batch runs every local layer forward and backward once
    weights = 3 * passes * psi * w.params  # fwd, dgrad, wgrad each stream the weights (Korthikanti App. A)
    act_layer = activation_bytes_per_layer(
        m.seq_len / plan.cp, plan.micro_batch, m.hidden_size, m.num_heads, plan.tp,
        plan.sequence_parallel, plan.recompute, flash=True,
    )
    activations = 2 * passes * plan.layers_per_gpu * act_layer  # written in forward, read in backward
    state = model_state_bytes(psi, plan.dp_group, plan.dp_kind, grad_bytes=w.grads, param_bytes=w.params)
    optimizer = 2 * (state.params + state.grads + state.optimizer)  # read and written once per step
    return weights + activations + optimizer
