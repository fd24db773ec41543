"""The components an index holds once and its pipelines share: corpus store, dense index,
BM25, extraction, title mentions."""
