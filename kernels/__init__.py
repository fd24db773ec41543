"""hopgraph.kernels: the sparse-graph ops of SPEC "Engine kernels" (``density``, ``gain_knn``,
``gain_knn_rows``, ``sparse_diffusion`` for §1; ``hyperedge_max_propagate``, ``group_decay_propagate``,
``batched_ppr`` for §2; ``shapley_mc`` for §3), each with a Triton kernel, a CPU
implementation of the same semantics, and ``inner_product_topk`` (the exact dense search: torch code
without a Triton kernel, run on the device of its tensors), with one dispatch point
(:mod:`hopgraph.kernels.dispatch`). Kernels know nothing of
the layers above them; those call them only through :func:`call` or the op functions
below, which are :func:`call` with the CPU implementation's signature::

    from hopgraph import kernels
    pi, iterations = kernels.batched_ppr(P, priors, d=0.85, device="auto")
    with kernels.use_backend("cpu"):  # process-wide override (or HOPGRAPH_KERNEL_BACKEND=cpu)
        ...

Importing this package imports the CPU modules of the ops (torch, numpy, scipy), never
triton. Note that ``hopgraph.kernels.<op>`` is the op *function*; the op's module is
reached with ``from hopgraph.kernels.<op> import ...`` or ``importlib.import_module``.
"""
_other = None
if __name__ == "kernels":
    # This source folder was found as a top-level module named ``kernels``: Python started in the
    # repository's root has it on sys.path, and transformers imports the distribution of that name
    # (Hugging Face's ``kernels``) when installed. Hand the name over to that distribution if there
    # is one (hopgraph imports this folder only as ``hopgraph.kernels``); else load as before.
    import importlib.machinery
    import importlib.util
    import os
    import sys

    _here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _other = importlib.machinery.PathFinder.find_spec(
        "kernels", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here])
if _other is not None and _other.loader is not None:
    _module = importlib.util.module_from_spec(_other)
    sys.modules["kernels"] = _module
    _other.loader.exec_module(_module)
else:
    from .dispatch import BACKEND_ENV, call, get_op, op_function, registered_ops, resolve_device, use_backend

    density = op_function("density")
    gain_knn = op_function("gain_knn")
    gain_knn_rows = op_function("gain_knn_rows")
    sparse_diffusion = op_function("sparse_diffusion")
    hyperedge_max_propagate = op_function("hyperedge_max_propagate")
    group_decay_propagate = op_function("group_decay_propagate")
    batched_ppr = op_function("batched_ppr")
    shapley_mc = op_function("shapley_mc")
    inner_product_topk = op_function("inner_product_topk")

    OPS = ("density", "gain_knn", "gain_knn_rows", "sparse_diffusion", "hyperedge_max_propagate", "group_decay_propagate",
           "batched_ppr", "shapley_mc", "inner_product_topk")
    #: the ops with a Triton kernel (the others are torch code, which runs on any device as it is)
    TRITON_OPS = tuple(name for name in OPS if get_op(name).triton_path is not None)

    __all__ = ["BACKEND_ENV", "OPS", "TRITON_OPS", "call", "registered_ops", "resolve_device", "use_backend", *OPS]
