"""G3RAG (SPEC §1): the pipeline and what only it uses."""
