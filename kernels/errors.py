"""The error base types of hopgraph, defined at the bottom layer so that the kernels can
raise them without importing anything above them.

There is exactly one :class:`InputError` class: the layers above re-export these
and add the errors that only they raise.
"""


class HopgraphError(Exception):
    """Base class of every error hopgraph raises on purpose."""


class InputError(HopgraphError, ValueError):
    """Bad user input (corpus, embeddings, questions, parameters); the message names the input."""


class DeviceUnavailable(HopgraphError, RuntimeError):
    """A device was asked for that this machine does not have (e.g. ``device="cuda"`` without a GPU)."""


class ToleranceWarning(UserWarning):
    """A tolerance was asked for below what the inputs' float type can resolve; the kernel used the
    resolvable floor instead (the message names the argument and the floor)."""
