"""Text-image placement (Xinyu et al.): three-way relevance and Hungarian assignment.

NumPy and SciPy only, so the pipeline and the server place images without importing torch;
the image-relevance model itself is in :mod:`searchsmith.models.image_relevance`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from searchsmith.models.errors import ValidationError


@dataclass(frozen=True)
class PlacementConfig:
    """Image placement: signal weights and the assignment threshold.

    The three signals are cosines in [-1, 1]; the combined score is their weighted mean over
    the signals that are present (weights renormalised), so ``threshold`` keeps its meaning
    whether or not captions or a query are available.
    """

    # The paper drops image-paragraph assignments scoring under 0.3.
    threshold: float = 0.3
    image_paragraph_weight: float = 0.5
    caption_paragraph_weight: float = 0.3
    image_query_weight: float = 0.2

    def __post_init__(self) -> None:
        ws = (self.image_paragraph_weight, self.caption_paragraph_weight, self.image_query_weight)
        if any(w < 0 for w in ws) or self.image_paragraph_weight <= 0:
            raise ValueError(f"placement weights must be >= 0 and image_paragraph_weight > 0, got {ws}")
        if not -1 <= self.threshold <= 1:
            raise ValueError(f"placement.threshold must be in [-1, 1] (a cosine), got {self.threshold}")


def _check_matrix(name: str, m: np.ndarray, shape: tuple[int, int] | None = None) -> np.ndarray:
    a = np.asarray(m, dtype=np.float64)
    if a.ndim != 2:
        raise ValidationError(f"{name}: expected a 2-D (paragraphs, images) matrix, got shape {a.shape}")
    if shape is not None and a.shape != shape:
        raise ValidationError(f"{name}: shape {a.shape} does not match image_paragraph {shape}")
    if not np.all(np.isfinite(a)):
        raise ValidationError(f"{name}: contains NaN or inf")
    return a


def combined_scores(image_paragraph: np.ndarray, caption_paragraph: np.ndarray | None = None,
                    image_query: np.ndarray | None = None,
                    config: PlacementConfig | None = None) -> np.ndarray:
    """Three-way relevance of each image to each paragraph, as a (P, I) matrix.

    Args:
        image_paragraph: (P, I) cosine of image embedding and paragraph embedding.
        caption_paragraph: (P, I) cosine of caption and paragraph (text tower), or None when
            no image has a caption; a NaN entry marks one image without a caption and takes
            that image's weight out of the mean.
        image_query: (I,) cosine of image and the user's query (the same for every paragraph),
            or None.
        config: the weights (:class:`PlacementConfig` defaults when None).

    Returns:
        (P, I) float64: the weighted mean of the present signals.
    """
    cfg = config or PlacementConfig()
    ip = _check_matrix("image_paragraph", image_paragraph)
    total = cfg.image_paragraph_weight * ip
    weight = np.full(ip.shape, cfg.image_paragraph_weight)
    if caption_paragraph is not None and cfg.caption_paragraph_weight > 0:
        cp = np.asarray(caption_paragraph, dtype=np.float64)
        if cp.shape != ip.shape:
            raise ValidationError(f"caption_paragraph: shape {cp.shape} does not match image_paragraph {ip.shape}")
        has = np.isfinite(cp)
        total = total + np.where(has, cfg.caption_paragraph_weight * np.nan_to_num(cp), 0.0)
        weight = weight + np.where(has, cfg.caption_paragraph_weight, 0.0)
    if image_query is not None and cfg.image_query_weight > 0:
        iq = np.asarray(image_query, dtype=np.float64).reshape(-1)
        if iq.shape != (ip.shape[1],) or not np.all(np.isfinite(iq)):
            raise ValidationError(f"image_query: expected {ip.shape[1]} finite scores (one per image), "
                                  f"got shape {iq.shape}")
        total = total + cfg.image_query_weight * iq[None, :]
        weight = weight + cfg.image_query_weight
    return total / weight


def assign_images(scores: np.ndarray, threshold: float) -> list[int | None]:
    """Place images next to paragraphs: Hungarian assignment, then drop weak pairs.

    Each paragraph gets at most one image and each image at most one paragraph (scipy
    ``linear_sum_assignment``; with more images than paragraphs some images stay unplaced).
    The solver maximises the summed score of the pairs that clear ``threshold`` (a pair
    under it counts as unplaced, worth nothing), so a weak pair can never push another
    image off a paragraph it fits; pairs under the threshold are then dropped. When every
    score clears the threshold this is the plain maximum-total-score assignment.

    Args:
        scores: (P, I) relevance of image i to paragraph p (e.g. :func:`combined_scores`).
        threshold: minimum score of a kept assignment (``PlacementConfig.threshold``).

    Returns:
        For each image, the paragraph index it is placed at, or None.
    """
    from scipy.optimize import linear_sum_assignment

    s = _check_matrix("scores", scores)
    n_par, n_img = s.shape
    out: list[int | None] = [None] * n_img
    if n_par == 0 or n_img == 0:
        return out
    # Kept pairs must be worth more than "unplaced" (0): shift only for a negative threshold.
    gain = np.where(s >= threshold, s - min(threshold, 0.0), 0.0)  # (P, I)
    rows, cols = linear_sum_assignment(gain, maximize=True)
    for p, i in zip(rows.tolist(), cols.tolist(), strict=True):
        if s[p, i] >= threshold:
            out[i] = p
    return out


__all__ = ["PlacementConfig", "assign_images", "combined_scores"]
