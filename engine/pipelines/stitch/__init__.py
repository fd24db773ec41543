"""STITCH-RAG (SPEC §2) and the ppr_binary baseline: the pipelines and what only they use."""
