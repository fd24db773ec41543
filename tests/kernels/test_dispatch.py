"""The kernels' one dispatch point: device resolution, backend choice and overrides (environment
variable, context manager), the op functions equal to ``call``, NumPy inputs at the kernel boundary,
and importing the kernels without Triton."""
import pytest

from hopgraph.kernels import dispatch


def test_resolve_device():
    assert dispatch.resolve_device("cpu") == "cpu"
    assert dispatch.resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(ValueError, match="device must be one of"):
        dispatch.resolve_device("tpu")
    if not dispatch.cuda_available():
        with pytest.raises(RuntimeError, match="torch sees no CUDA GPU"):
            dispatch.resolve_device("cuda")


def test_backend_choice_and_errors():
    op = dispatch.Op("x", cpu=lambda device: "cpu-ran")
    assert dispatch.backend_for(op, "cuda", None) == "cpu"  # no Triton kernel: CPU fallback
    with pytest.raises(NotImplementedError, match="has no Triton implementation"):
        dispatch.backend_for(op, "cpu", "triton")
    with pytest.raises(ValueError, match="backend must be"):
        dispatch.backend_for(op, "cpu", "opencl")
    op2 = dispatch.Op("y", cpu=lambda device: None, triton_path="hopgraph.kernels.dispatch:registered_ops")
    assert dispatch.backend_for(op2, "cuda", None) == "triton" and dispatch.backend_for(op2, "cpu", None) == "cpu"
    assert op2.triton is dispatch.registered_ops


def test_unknown_op_and_double_registration():
    with pytest.raises(KeyError, match="unknown kernel op 'no_such_op'"):
        dispatch.call("no_such_op")
    dispatch.register("_test_only_op", lambda device: device)
    try:
        assert dispatch.call("_test_only_op", device="cpu") == "cpu"
        with pytest.raises(ValueError, match="registered twice"):
            dispatch.register("_test_only_op", lambda device: device)
    finally:
        dispatch._OPS.pop("_test_only_op")


# ---------------------------------------------------------------------- backend override
import inspect  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

from hopgraph import kernels  # noqa: E402
from hopgraph.kernels import call  # noqa: E402

#: test-only ops: the "Triton" path is dispatch.resolve_device, which returns the device ("cpu")
WITH_TRITON, CPU_ONLY = "_test_with_triton", "_test_cpu_only"


@pytest.fixture
def test_ops(monkeypatch):
    monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
    dispatch.register(WITH_TRITON, lambda device: "cpu-path", triton="hopgraph.kernels.dispatch:resolve_device")
    dispatch.register(CPU_ONLY, lambda device: "cpu-path")
    yield
    dispatch._OPS.pop(WITH_TRITON)
    dispatch._OPS.pop(CPU_ONLY)


def ran(name: str, **kw) -> str:
    """Which path op ``name`` took: "triton" or "cpu"."""
    return "cpu" if call(name, device="cpu", **kw) == "cpu-path" else "triton"


def test_env_var_forces_the_backend(test_ops, monkeypatch):
    assert ran(WITH_TRITON) == "cpu"  # device rule
    monkeypatch.setenv(dispatch.BACKEND_ENV, "triton")
    assert ran(WITH_TRITON) == "triton"  # read at call time
    assert ran(CPU_ONLY) == "cpu"  # no Triton kernel: the CPU path, silently
    assert ran(WITH_TRITON, backend="cpu") == "cpu"  # an explicit backend wins
    with pytest.raises(NotImplementedError, match="has no Triton implementation"):
        call(CPU_ONLY, device="cpu", backend="triton")  # explicit: still an error
    monkeypatch.setenv(dispatch.BACKEND_ENV, " CPU ")
    assert ran(WITH_TRITON) == "cpu" and ran(WITH_TRITON, backend="triton") == "triton"
    monkeypatch.setenv(dispatch.BACKEND_ENV, "")  # empty = unset
    assert ran(WITH_TRITON) == "cpu"
    monkeypatch.setenv(dispatch.BACKEND_ENV, "cuda")
    with pytest.raises(ValueError, match=r"HOPGRAPH_KERNEL_BACKEND must be one of \('triton', 'cpu'\), got 'cuda'"):
        call(WITH_TRITON, device="cpu")


def test_use_backend_context_manager(test_ops, monkeypatch):
    with dispatch.use_backend("triton"):
        assert ran(WITH_TRITON) == "triton" and ran(CPU_ONLY) == "cpu"
        assert ran(WITH_TRITON, backend="cpu") == "cpu"  # explicit argument > context manager
        with pytest.raises(NotImplementedError):
            call(CPU_ONLY, device="cpu", backend="triton")
        with kernels.use_backend("cpu"):  # nested: the innermost wins
            assert ran(WITH_TRITON) == "cpu"
        assert ran(WITH_TRITON) == "triton"
        monkeypatch.setenv(dispatch.BACKEND_ENV, "cpu")  # context manager > env var
        assert ran(WITH_TRITON) == "triton"
    assert ran(WITH_TRITON) == "cpu"
    monkeypatch.delenv(dispatch.BACKEND_ENV)
    with pytest.raises(RuntimeError), dispatch.use_backend("triton"):  # reset on an exception too
        raise RuntimeError
    assert dispatch.forced_backend() is None
    with pytest.raises(ValueError, match=r"use_backend\(backend\) must be one of \('triton', 'cpu'\), got 'gpu'"):
        with dispatch.use_backend("gpu"):
            pass


def test_use_backend_is_per_context(test_ops):
    """The override is a ContextVar: another thread does not see this thread's block."""
    seen = []
    with dispatch.use_backend("triton"):
        t = threading.Thread(target=lambda: seen.append(ran(WITH_TRITON)))
        t.start()
        t.join()
        assert ran(WITH_TRITON) == "triton"
    assert seen == ["cpu"]


def test_use_backend_runs_real_triton_kernels(monkeypatch):
    """A forced "triton" reaches the real kernels (interpreter on CPU tensors): spy on the Triton path."""
    import hopgraph.kernels.sparse_diffusion_triton as tri_module

    calls = []
    original = tri_module.sparse_diffusion_triton
    monkeypatch.setattr(tri_module, "sparse_diffusion_triton", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    args = small_inputs()["sparse_diffusion"]
    plain = call("sparse_diffusion", *args, device="cpu")
    with kernels.use_backend("triton"):
        forced = call("sparse_diffusion", *args, device="cpu")
    assert calls == [1]
    np.testing.assert_allclose(forced, plain, rtol=1e-6)


# ---------------------------------------------------------------------- op functions
def small_inputs() -> dict[str, tuple]:
    """Small valid positional inputs of every op (NumPy; the torch ops' arrays as tensors)."""
    g = np.random.default_rng(0)
    X = g.standard_normal((9, 5)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    # graph for sparse_diffusion
    indptr = np.array([0, 2, 3, 3, 5], np.int64)
    indices = np.array([1, 2, 0, 0, 3], np.int32)
    data = np.array([0.5, 1.0, 2.0, 1.0, 0.25], np.float32)
    # hypergraph: edges {0,1,2}, {2,3}, {4}
    edge_indptr = np.array([0, 3, 5, 6], np.int64)
    edge_nodes = np.array([0, 1, 2, 2, 3, 4], np.int32)
    node_incidence = np.argsort(edge_nodes, kind="stable").astype(np.int32)
    node_indptr = np.r_[0, np.cumsum(np.bincount(edge_nodes, minlength=5))].astype(np.int64)
    A = g.random((2, 5)).astype(np.float32)
    A[A < 0.3] = 0
    S = g.random((2, 3)).astype(np.float32)
    # name groups: {0, 2, 4}, {1, 3}
    node_group = np.array([0, 1, 0, 1, 0], np.int64)
    node_t = np.array([0, 3, 5, 6, 9], np.int64)
    group_nodes = np.argsort(node_group, kind="stable").astype(np.int32)
    group_indptr = np.array([0, 3, 5], np.int64)
    alpha = np.array([1.2, 0.8], np.float32)
    w = g.random((2, 5)).astype(np.float32)
    # PPR on a ring plus a chord, column-stochastic
    W = sp.csr_matrix((np.ones(7), ([1, 2, 3, 4, 5, 0, 3], [0, 1, 2, 3, 4, 5, 0])), shape=(6, 6))
    P = sp.csr_matrix(W.multiply(1.0 / np.asarray(W.sum(0))))
    priors = np.zeros((2, 6), np.float32)
    priors[0, 0], priors[1, [2, 4]] = 1.0, 0.5
    # Shapley: B=2 queries, G=3 subgraphs, U=4 nodes, C=2 candidates
    sets = (g.random((2, 3, 4)) < 0.5).astype(np.float32)
    n_sub = np.array([3, 2], np.int64)
    cand = (g.random((2, 2, 4)) < 0.5).astype(np.float32)
    best = g.random((2, 2, 3)).astype(np.float32)
    return {
        "density": (X,),
        "gain_knn": (X, 3, 0.0, 1.0),
        "gain_knn_rows": (X[:2], X, 3, 0.0, 1.0),
        "sparse_diffusion": (np.array([[0, 3], [1, -1]]), None, indptr, indices, data, 4),
        "hyperedge_max_propagate": (A, S, edge_indptr, edge_nodes, node_indptr, node_incidence),
        "group_decay_propagate": (A, w, node_group, node_t, group_indptr, group_nodes, alpha),
        "batched_ppr": (P, priors),
        "shapley_mc": (sets, n_sub, cand, best),
        "inner_product_topk": (X[:2], torch.from_numpy(X), 4),
    }


def to_torch(args: tuple) -> tuple:
    return tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)


def assert_same(a, b) -> None:
    """Exact equality of op results: tensors, arrays, CSR and tuples of them."""
    if isinstance(a, tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


TORCH_OPS = ("hyperedge_max_propagate", "group_decay_propagate", "batched_ppr", "shapley_mc")


def test_every_registered_op_is_a_function():
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(kernels.__path__):  # registers every op there is
        importlib.import_module(f"hopgraph.kernels.{mod.name}")
    assert set(kernels.OPS) == set(dispatch.registered_ops()) == set(small_inputs())
    for name in kernels.OPS:
        fn = getattr(kernels, name)
        op = dispatch.get_op(name)
        assert callable(fn) and fn.__name__ == name and fn.__module__ == "hopgraph.kernels"
        params = inspect.signature(fn).parameters
        cpu_params = [p for p in inspect.signature(op.cpu).parameters.values() if p.name != "device"]
        assert list(params.values())[:len(cpu_params)] == cpu_params  # the CPU signature ...
        assert params["device"].kind is params["backend"].kind is inspect.Parameter.KEYWORD_ONLY  # ... + these
        assert params["device"].default == "auto" and params["backend"].default is None
        assert inspect.cleandoc(op.cpu.__doc__) in fn.__doc__ and f"call({name!r}" in fn.__doc__


#: ops whose interpreted Triton kernels take seconds on the small inputs
SLOW_TRITON = ("batched_ppr", "shapley_mc")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_TRITON else n
                                  for n in sorted(small_inputs())])
def test_op_function_equals_call(name, monkeypatch):
    args = small_inputs()[name]
    if name in TORCH_OPS:
        args = to_torch(args)
    assert_same(getattr(kernels, name)(*args, device="cpu"), call(name, *args, device="cpu"))
    if name in kernels.TRITON_OPS:
        assert_same(getattr(kernels, name)(*args, device="cpu", backend="triton"),
                    call(name, *args, device="cpu", backend="triton"))
    seen = []  # device= and backend= reach the one dispatch point
    monkeypatch.setattr(dispatch, "call", lambda n, *a, **kw: seen.append((n, len(a), kw)))
    getattr(kernels, name)(*args, device="cpu", backend="triton")
    getattr(kernels, name)(*args)
    assert seen == [(name, len(args), {"device": "cpu", "backend": "triton"}),
                    (name, len(args), {"device": "auto", "backend": None})]


def test_op_function_validates_like_call():
    with pytest.raises(ValueError, match="device must be one of"):
        kernels.density(small_inputs()["density"][0], device="tpu")
    with pytest.raises(ValueError, match="backend must be one of"):
        kernels.density(small_inputs()["density"][0], backend="opencl")


@pytest.mark.slow
def test_importing_kernels_does_not_import_triton():
    code = "import sys, hopgraph.kernels as k; k.OPS; assert 'triton' not in sys.modules, 'triton imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------- NumPy at the kernel boundary
@pytest.mark.parametrize("backend", ["cpu", pytest.param("triton", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", TORCH_OPS)
def test_numpy_and_torch_inputs_give_identical_results(name, backend):
    args = small_inputs()[name]
    from_numpy = call(name, *args, device="cpu", backend=backend)
    from_torch = call(name, *to_torch(args), device="cpu", backend=backend)
    assert_same(from_numpy, from_torch)
    assert_same(getattr(kernels, name)(*args, device="cpu", backend=backend), from_torch)


def test_numpy_keyword_arguments_are_converted():
    P, priors = small_inputs()["batched_ppr"]
    region = np.ones_like(priors, dtype=bool)
    region[1, 5] = False
    a = call("batched_ppr", P, priors=priors, region=region, device="cpu")
    b = call("batched_ppr", P, priors=torch.from_numpy(priors), region=torch.from_numpy(region), device="cpu")
    assert_same(a, b)
    assert float(a[0][1, 5]) == 0.0


def test_as_tensor():
    from hopgraph.engine.errors import InputError
    from hopgraph.kernels.tensors import as_tensor

    t = torch.arange(3)
    assert as_tensor(t, torch.float64) is t  # tensors pass unchanged
    a = np.arange(6, dtype=np.int32).reshape(2, 3)[:, ::2]  # not contiguous
    out = as_tensor(a)
    assert out.dtype == torch.int32 and out.tolist() == [[0, 2], [3, 5]]
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    assert as_tensor(ro, torch.float32).data_ptr() == ro.ctypes.data  # shared, no copy, no warning
    assert as_tensor([1.5, 2.0], torch.float32).dtype == torch.float32
    with pytest.raises(InputError, match="priors must be a numeric array or tensor"):
        as_tensor(np.array(["a"]), name="priors")
    with pytest.raises(InputError, match="shapley_mc: n_sub must be a numeric array"):
        call("shapley_mc", np.zeros((1, 1, 1)), np.array([None]), np.zeros((1, 1, 1)), np.zeros((1, 1, 1)),
             device="cpu")


def test_register_checks_tensor_names():
    with pytest.raises(ValueError, match=r"tensors \['B'\] are not parameters"):
        dispatch.register("_test_bad_tensors", lambda A, device="cpu": A, tensors=("A", "B"))
    assert "_test_bad_tensors" not in dispatch.registered_ops()


def test_transfers_counted_at_the_kernel_boundary():
    """A host array given to a kernel counts as one host→device crossing (declared tensor or not), a
    tensor on the device passes through as the same object and counts nothing, a kernel's own
    conversions count nothing, and a result brought back with ``as_numpy`` counts one."""
    from hopgraph.kernels.tensors import as_numpy, as_tensor
    from hopgraph.kernels.transfers import counting_transfers

    seen = {}

    def op(A, B, device="cpu"):
        seen["A"], seen["B"] = A, B
        as_tensor(np.ones(3))  # inside the kernel: not the caller's transfer
        return as_numpy(A)

    dispatch.register("_test_counted", op, tensors=("A",))
    try:
        t, host = torch.ones(4), np.arange(5.0)
        with counting_transfers() as count:
            out = call("_test_counted", t, host, device="cpu")
            as_numpy(torch.zeros(2))
        assert seen["A"] is t and seen["B"] is host  # a tensor is passed on, not copied
        assert [c.name for c in count.to_device] == ["_test_counted: B"] and count.htod_bytes == host.nbytes
        assert count.dtoh == 1 and count.dtoh_bytes == 8 and out.tolist() == [1.0] * 4
        with counting_transfers() as count:
            call("_test_counted", np.ones(2), (np.ones(3), np.ones(1)), device="cpu")
        assert [c.name for c in count.to_device] == ["_test_counted: A", "_test_counted: B[0]", "_test_counted: B[1]"]
        call("_test_counted", np.ones(2), host, device="cpu")  # not counting: nothing recorded, nothing raised
    finally:
        dispatch._OPS.pop("_test_counted")
