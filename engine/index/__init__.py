"""An index directory, opened and written by the engine alone (as Lucene's ``DirectoryReader`` and
``IndexWriter`` over its ``SegmentInfos``): :class:`IndexReader` pins a commit and reads its segments
into an :class:`IndexContent`; :class:`IndexWriter` commits a content whole or its changes since a
:class:`Committed` snapshot; :func:`merge_segments` merges segments as a
:class:`~hopgraph.engine.storage.MergePolicy` decides. The format itself (commit point, segment
list) is :mod:`hopgraph.engine.storage`'s: :class:`~hopgraph.engine.storage.SegmentInfos`."""
from .content import Committed, IndexContent
from .merge import MergeReport, merge_range, merge_segments
from .params import fit_params_only, validate_params
from .reader import IndexReader, read_commit
from .writer import IndexWriter, npy_bytes, write_segment

__all__ = ["Committed", "IndexContent", "IndexReader", "IndexWriter", "MergeReport", "fit_params_only", "merge_range",
           "merge_segments", "npy_bytes", "read_commit", "validate_params", "write_segment"]
