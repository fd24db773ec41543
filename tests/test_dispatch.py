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
