"""The protocol router (IMACS): a LinUCB contextual bandit choosing a preset per query.

Arms are the configured presets (at least ``turbo``: no rewrite or decomposition;
``small``; ``large``: every stage). Each query is described by a model-free 7-dimensional
task featurisation (:func:`task_features`, every value in [0, 1]):

====  =====================  =====================================================
dim   name                   value
====  =====================  =====================================================
0     bias                   1
1     length                 min(1, words / 32)
2     conversation depth     min(1, history turns / 4)
3     reference              1 when the query leans on the history (it, its, this, ...)
4     multi-hop cues         min(1, relative/conjunctive cues (of the, whose, which, and) / 2)
5     temporal               1 when it asks for a date or a time (when, year, date, ...)
6     identifier density     share of words with digits or ``. _ /`` (keys, paths, versions)
====  =====================  =====================================================

Per arm ``a``: ``A_a = ridge * I + sum x x^T`` (kept as its inverse) and ``b_a = sum r x``;
the choice is ``argmax_a theta_a . x + alpha * sqrt(x^T A_a^-1 x)`` with
``theta_a = A_a^-1 b_a``. ``feedback(query_id, quality)`` closes the loop with reward
``quality - cost_lambda * cost`` (the answer's measured cost, see ``CostConfig``) and a
Sherman-Morrison rank-one update of ``A_a^-1``; the state is saved atomically.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from searchsmith.models.config import is_number
from searchsmith.models.errors import BundleError, ValidationError
from searchsmith.models.io import write_json_atomic
from searchsmith.models.roles import Turn
from searchsmith.serving.pipeline.answer import Feedback
from searchsmith.serving.pipeline.config import ProtocolConfig

FEATURES = ("bias", "length", "conversation_depth", "reference", "multi_hop", "temporal",
            "identifier_density")
DIM = len(FEATURES)
STATE_VERSION = 1

_REFERENCE = re.compile(r"\b(it|its|it's|they|them|their|this|that one|these|those|there|he|she|his|her)\b", re.I)
_MULTIHOP = re.compile(r"\b(of the|whose|which|that|who|and|both|compare|than|after|before)\b", re.I)
_TEMPORAL = re.compile(r"\b(when|year|date|dates|timeline|history|released|since|until|ago|month)\b", re.I)


def task_features(query: str, history: Sequence[Turn] = ()) -> np.ndarray:
    """The 7-dim featurisation of the module docstring, (7,) float64 in [0, 1]."""
    words = query.split()
    n = max(1, len(words))
    ident = sum(1 for w in words if any(c.isdigit() for c in w) or any(c in "._/" for c in w.strip(".?!,")))
    return np.array([
        1.0,
        min(1.0, len(words) / 32),
        min(1.0, len(history) / 4),
        1.0 if _REFERENCE.search(query) else 0.0,
        min(1.0, len(_MULTIHOP.findall(query)) / 2),
        1.0 if _TEMPORAL.search(query) else 0.0,
        ident / n,
    ], dtype=np.float64)


def sherman_morrison(a_inv: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``(A + x x^T)^-1`` from ``A^-1`` in O(d^2): ``A^-1 - (A^-1 x)(A^-1 x)^T / (1 + x^T A^-1 x)``."""
    ax = a_inv @ x  # (d,) ; A^-1 is symmetric, so x^T A^-1 = (A^-1 x)^T
    return a_inv - np.outer(ax, ax) / (1.0 + float(x @ ax))


class LinUCBRouter:
    """LinUCB over named arms, with pending choices awaiting feedback and atomic persistence."""

    def __init__(self, arms: Sequence[str], config: ProtocolConfig) -> None:
        if not arms:
            raise ValidationError("protocol: no arms (presets) to choose from")
        self.arms = list(arms)
        self.config = config
        self.a_inv = {a: np.eye(DIM) / config.ridge for a in self.arms}
        self.b = {a: np.zeros(DIM) for a in self.arms}
        self.n = dict.fromkeys(self.arms, 0)
        self._pending: OrderedDict[str, tuple[str, np.ndarray, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # one save at a time, after _lock's snapshot
        if config.state_path and Path(config.state_path).is_dir():  # made after the config was checked
            raise BundleError(f"protocol.state_path {config.state_path}: is a folder; give the path of a JSON file "
                              "in it (e.g. bandit.json), or null to keep the bandit in memory")
        if config.state_path and Path(config.state_path).is_file():
            self.load(config.state_path)

    def ucb(self, x: np.ndarray) -> dict[str, float]:
        """Upper confidence bound of every arm for features ``x`` (7,)."""
        with self._lock:
            out = {}
            for a in self.arms:
                theta = self.a_inv[a] @ self.b[a]
                out[a] = float(theta @ x + self.config.alpha * np.sqrt(max(0.0, float(x @ self.a_inv[a] @ x))))
            return out

    def choose(self, x: np.ndarray) -> str:
        """The arm with the highest bound (ties: the earlier arm in the configured order)."""
        scores = self.ucb(x)
        return max(self.arms, key=lambda a: (scores[a], -self.arms.index(a)))

    def is_pending(self, query_id: str) -> bool:
        """Whether an answer with ``query_id`` is still waiting for its feedback."""
        with self._lock:
            return query_id in self._pending

    def remember(self, query_id: str, arm: str, x: np.ndarray, cost: float) -> bool:
        """Keep a choice until its feedback arrives (the oldest are forgotten past max_pending).

        An id already waiting keeps its first choice (two answers given the same id at once):
        its feedback rewards the choice it was sent for. Returns False then, True when kept."""
        with self._lock:
            if query_id in self._pending:
                return False
            self._pending[query_id] = (arm, np.asarray(x, dtype=np.float64), float(cost))
            while len(self._pending) > self.config.max_pending:
                self._pending.popitem(last=False)
        return True

    def update(self, arm: str, x: np.ndarray, reward: float) -> None:
        """Rank-one update of ``arm`` with features ``x`` and ``reward``."""
        if arm not in self.a_inv:
            raise ValidationError(f"protocol: unknown arm {arm!r}; arms are {self.arms}")
        with self._lock:
            self.a_inv[arm] = sherman_morrison(self.a_inv[arm], x)
            self.b[arm] = self.b[arm] + reward * x
            self.n[arm] += 1

    def feedback(self, query_id: str, quality: float) -> Feedback:
        """Reward the preset chosen for ``query_id``: ``quality - cost_lambda * cost``.

        Args:
            query_id: the ``query_id`` of an answer (in its trace).
            quality: the answer's quality, a number in [0, 1].

        Returns:
            ``{"query_id", "preset", "reward", "cost"}``.
        """
        if not isinstance(query_id, str) or not query_id:
            raise ValidationError(f"query_id: expected the query_id string of an answer, got {query_id!r:.60}")
        if not is_number(quality) or not 0.0 <= quality <= 1.0:
            raise ValidationError(f"quality: expected a number in [0, 1], got {quality!r}")
        with self._lock:
            item = self._pending.pop(query_id, None)
        if item is None:
            raise ValidationError(f"query_id: {query_id!r} is unknown or already rewarded "
                                  f"(the last {self.config.max_pending} answers can be rewarded)")
        arm, x, cost = item
        reward = float(quality) - self.config.cost_lambda * cost
        self.update(arm, x, reward)
        if self.config.state_path:
            self.save(self.config.state_path)
        return {"query_id": query_id, "preset": arm, "reward": round(reward, 6), "cost": round(cost, 6)}

    # -- persistence -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, object]:
        with self._lock:
            return {"version": STATE_VERSION, "features": list(FEATURES), "ridge": self.config.ridge,
                    "arms": {a: {"A_inv": self.a_inv[a].tolist(), "b": self.b[a].tolist(), "n": self.n[a]}
                             for a in self.arms}}

    def save(self, path: str | Path) -> None:
        """Write the state as JSON atomically (temporary file, then rename). Saves run one at a
        time, each of the state as it is then, so the file ends with the latest."""
        with self._save_lock:
            write_json_atomic(Path(path), self.state_dict())

    def load(self, path: str | Path) -> None:
        """Read a saved state; arms no longer configured are ignored, new ones start fresh."""
        p = Path(path)
        # the file may be the user's own (a typo in protocol.state_path): never suggest deleting it
        fix = "point protocol.state_path at a new file (or move this one away) to start afresh"
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise BundleError(f"protocol.state_path {p}: holds a JSON {type(data).__name__}, not a saved bandit "
                                  f"state (an object with 'version', 'features' and 'arms'); {fix}")
            if data.get("version") != STATE_VERSION or data.get("features") != list(FEATURES):
                raise BundleError(f"protocol.state_path {p}: version/features do not match this searchsmith "
                                  f"(expected version {STATE_VERSION}, features {list(FEATURES)}); {fix}")
            if not isinstance(data.get("arms"), dict):
                raise BundleError(f"protocol.state_path {p}: 'arms' is not an object of arm -> state; {fix}")
            loaded = {}
            for a, st in data["arms"].items():
                a_inv, b = np.asarray(st["A_inv"], dtype=np.float64), np.asarray(st["b"], dtype=np.float64)
                if (a_inv.shape != (DIM, DIM) or b.shape != (DIM,) or not np.all(np.isfinite(a_inv))
                        or not np.all(np.isfinite(b))):
                    raise BundleError(f"protocol.state_path {p}: arm {a!r} has the wrong shapes or non-finite "
                                      f"values; {fix}")
                loaded[a] = (a_inv, b, int(st["n"]))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise BundleError(f"protocol.state_path {p}: unreadable ({exc}); {fix}") from None
        with self._lock:
            for a, (a_inv, b, n) in loaded.items():
                if a in self.a_inv:
                    self.a_inv[a], self.b[a], self.n[a] = a_inv, b, n
