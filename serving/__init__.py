"""searchsmith.serving: embedder, chunker, index, router, pipeline, server and profiling."""
