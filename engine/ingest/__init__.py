"""Getting passages and embeddings in: file readers, chunking, precomputed embedding files,
streamed embedding to disk."""
