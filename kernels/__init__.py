"""searchsmith.kernels: Triton kernels with torch twins, and the dispatch that picks between them."""
