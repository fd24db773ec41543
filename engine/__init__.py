"""hopgraph.engine: corpus, embedders, shared components, parameters, graph builders, pipelines (SPEC §1-§3), index storage, evaluation; imports hopgraph.kernels, never the bindings."""
