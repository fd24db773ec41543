"""hopgraph.kernels: sparse-graph ops, each with a Triton kernel, a CPU implementation
and one dispatch point (:mod:`hopgraph.kernels.dispatch`). Kernels know nothing of
pipelines; pipelines call them only through :func:`call`.
"""
from .dispatch import call, registered_ops, resolve_device

__all__ = ["call", "registered_ops", "resolve_device"]
