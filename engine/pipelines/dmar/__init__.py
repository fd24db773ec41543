"""DMAR (SPEC §3): the pipeline and what only it uses (the knowledge graph, the GNN encoder, the fusion
gate, Shapley structural scores, reformulation)."""
from .pipeline import DMAR, DMARFit, DMARSearch

__all__ = ["DMAR", "DMARFit", "DMARSearch"]
