"""G3RAG (SPEC §1): the pipeline and what only it uses (the gain graph builders, its incremental
update, the name links)."""
from .pipeline import G3RAG, G3RAGFit, G3RAGSearch

__all__ = ["G3RAG", "G3RAGFit", "G3RAGSearch"]
