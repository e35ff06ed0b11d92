"""searchsmith.training: the recipe runner, datasets, losses and metrics."""
