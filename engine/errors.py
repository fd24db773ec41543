"""Exceptions raised by hopgraph for bad input and corrupt indexes."""


class HopgraphError(Exception):
    """Base class of every error hopgraph raises on purpose."""


class InputError(HopgraphError, ValueError):
    """Bad user input (corpus, embeddings, questions, parameters); the message names the input."""


class IndexFormatError(HopgraphError):
    """An index directory is missing, corrupt, or does not match what is asked of it."""
