"""STITCH-RAG (SPEC §2) and the ppr_binary baseline: the pipelines and what only they use (the topic
hypergraph, the localised walk, per-question sparse rows)."""
from .pipeline import STITCH, STITCHFit, STITCHSearch
from .ppr_binary import PPRBinary
from .walk import ChunkGraphFit, WalkSearch

__all__ = ["STITCH", "STITCHFit", "STITCHSearch", "PPRBinary", "ChunkGraphFit", "WalkSearch"]
