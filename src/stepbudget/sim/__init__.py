"""Discrete-event step simulator: task graphs on compute streams and max-min shared links.

``run_graph(graph, link_capacity_Bps) -> Timeline``; ``trace_events(timeline)`` for
Perfetto. Link sharing follows ``maxmin_rates`` (max-min fairness: the rule and its contract).
"""

from stepbudget.sim.engine import run_graph
from stepbudget.sim.graph import Task, TaskGraph, TaskKind, compute, join, transfer
from stepbudget.maxmin import FlowLinks, flows_to_csr, maxmin_rates, maxmin_rates_csr
from stepbudget.sim.timeline import Timeline, trace_events

__all__ = [
    "FlowLinks",
    "Task",
    "TaskGraph",
    "TaskKind",
    "Timeline",
    "compute",
    "flows_to_csr",
    "join",
    "maxmin_rates",
    "maxmin_rates_csr",
    "run_graph",
    "trace_events",
    "transfer",
]
