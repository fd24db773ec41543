"""hopgraph.engine: corpus, embedders, graph builders, pipelines, index storage, evaluation."""
