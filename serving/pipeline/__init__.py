"""The inference pipeline: rewrite, route, decompose, retrieve, de-duplicate, select, rerank,
generate, cite, timeline and images, one module per stage (see ``pipeline.py``)."""

from __future__ import annotations

from searchsmith.serving.pipeline.config import PipelineConfig, load_pipeline_config
from searchsmith.serving.pipeline.pipeline import Pipeline, load_pipeline

__all__ = ["Pipeline", "PipelineConfig", "load_pipeline", "load_pipeline_config"]
