"""Load a model bundle and run it: ONNX Runtime (CUDA or CPU) or torch, one call signature.

``load_bundle(path)`` checks the bundle before anything runs:

1. ``manifest.json`` parses and its ``format_version`` is one this searchsmith reads
   (a newer bundle is refused with the fix: upgrade searchsmith);
2. every file listed in ``manifest["files"]`` exists with the recorded sha256 (a corrupt or
   truncated ``.onnx`` is refused naming the file);
3. the tokenizer folder is there and loads;
4. the model was trained (``"trained": true``: a fine-tuned run, or the pretrained embedder): an untrained head must never be served as
   if it were fine-tuned. ``allow_untrained=True`` is for benchmarks and tests.

Then it picks a backend. ``backend="auto"``: ONNX Runtime's CUDA provider when onnxruntime-gpu
and a GPU are present (with I/O binding: outputs are bound on the device and copied once),
else its CPU provider, else torch when ONNX Runtime is not installed. ``backend="torch"``
runs the original HF/torch weights, which a bundle holds only when exported with
``--torch-weights`` (folder ``torch/``); without them it is refused with that fix. The torch
graphs are the same modules the exporter traced (:mod:`searchsmith.models.onnx_graphs`), so
every backend runs the same pre- and post-processing (tokenization, batching, pooling,
greedy decoding, BIO decoding) written once here.

Every task method takes ``return_meta``; with it the result comes back as ``(result, meta)``,
``meta = {"truncated": [indices of inputs cut to max_length], "max_length": int, "tokens": int}``
(``tokens``: the input tokens the model ran, what a trace counts; a generation's meta adds
``tokens_out``, the tokens it generated).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, Union, Unpack, overload

import numpy as np
from searchsmith.models import __version__
from searchsmith.models.batching import pack_batches
from searchsmith.models.config import is_int
from searchsmith.models.encode_options import EncodeKeywords, encode_options
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.io import MANIFEST, read_json_object, sha256_file
from searchsmith.models.jsonl import check_unicode
from searchsmith.models.roles import CHAT_ROLES
from searchsmith.models.tasks import TASK_NAMES
from searchsmith.models.text import is_blank
from searchsmith.models.tokenizer import encode_pairs, input_meta

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image as PILImage
    from searchsmith.models.constrained import CopyConstraint, EditConstraint, GraphGrammar
    from searchsmith.models.qdg import QDG
    from searchsmith.models.reader import PassageAnswer, PassageLike
    from searchsmith.models.roles import (
        Citer,
        Decomposer,
        Embedder,
        EntitySpan,
        ImageScorer,
        Reader,
        Reranker,
        Turn,
    )
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
TOKENIZER_DIR = "tokenizer"
# Padded-token budget per graph call when load_bundle is given none: the torch embedder's
# defaults (larger budgets ran slower on the 2-core CPU, see serving/embedder.py), and less for
# ONNX Runtime on the CPU. Interleaved rounds on 2 cores: the int8 MiniLM embedder on 1,024
# mixed demo texts, 768 / 1024 / 2048 tokens: median 154 / 153 / 147 texts/s, and in another
# run 384 / 512 / 1024: 159 / 154 / 161 (the same within the noise); the trained reranker's
# int8 bundle on 960 (question, passage) pairs of up to 128 tokens, 384 / 512 / 768 / 1024:
# median 57.6 / 56.9 / 50.7 / 52.6 pairs/s, best 58.7 / 60.8 / 52.4 / 55.1.
DEFAULT_BATCH_TOKENS = {"torch-cpu": 2048, "onnx-cpu": 512, "cuda": 16384}
# A batch is closed before its real tokens fall below this share of its padded tokens.
PACK_MIN_PADDING_EFFICIENCY = 0.75
TORCH_DIR = "torch"
# Most intra-op threads a bundle may ask for, per CPU of the machine: past a few per core they
# only contend, and a huge count (1000000) hung model loading.
THREADS_PER_CPU = 4
_NP_DTYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
              "tensor(float16)": np.float16}


T = TypeVar("T")


def max_threads() -> int:
    """The most intra-op threads per bundle: ``THREADS_PER_CPU`` x ``os.cpu_count()``
    (``load_bundle``'s ``threads``, the config key ``bundles.threads``)."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def threads_over_cap(threads: int | None, key: str) -> str | None:
    """The message for ``threads`` above :func:`max_threads` (``key`` names the setting), or None."""
    cap = max_threads()
    if threads is None or threads <= cap:
        return None
    return (f"{key} must be at most {cap} ({THREADS_PER_CPU} x the {cap // THREADS_PER_CPU} CPUs of this machine; "
            f"more threads only contend), got {threads}; give the cores a bundle may use (bundles.threads), or "
            "null for the runtime's default")


#: what a bundle method returns: the value, or ``(value, meta)`` with ``return_meta=True``
WithMeta = Union[T, tuple[T, dict[str, object]]]  # noqa: UP007 - a generic alias needs Union here
#: one graph: feeds by input name -> the first output
Graph = Callable[[dict[str, np.ndarray]], np.ndarray]
#: a manifest as parsed from ``manifest.json`` (JSON values; read_manifest checks the keys)
Manifest = dict[str, Any]


# ----------------------------------------------------------------------------- graphs


class OrtGraph:
    """One ONNX Runtime session; ``__call__(feeds) -> first output`` as a NumPy array.

    On CUDA the inputs are bound from host memory and the output is bound on the device
    (I/O binding), so ONNX Runtime does not allocate a fresh host output per call.

    ``int8_weights``: the weight range of an int8 graph (``s8``/``s7``, the manifest's
    ``int8.weight_range``; None for other graphs). On a CPU whose u8 x s8 products saturate (no
    VNNI, :mod:`searchsmith.models.int8_cpu`), ``s8`` weights are re-quantised to 7 bits in
    memory before the session is made (``self.requantised`` says how many products).
    """

    def __init__(self, path: Path, providers: list[str | tuple[str, dict[str, str]]], threads: int | None,
                 arena: bool = True,
                 int8_weights: str | None = None) -> None:
        import onnxruntime as ort
        from searchsmith.models.int8_cpu import exact_u8s8, int8_isa

        opts = ort.SessionOptions()
        # Full optimisation at load: the file holds only the portable (basic) level,
        # since extended/layout fusions are specific to the machine and provider.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            opts.intra_op_num_threads = int(threads)
            opts.inter_op_num_threads = 1
        opts.enable_cpu_mem_arena = arena
        # No busy-waiting between ops: on a shared CPU spinning threads steal cores. MiniLM
        # cross-encoder, batch 32 x 138, 2 busy cores, spinning vs not: fused int8 3.9 vs
        # 3.4 s, fused fp32 8.4 vs 7.5 s, fp32 12.8 vs 10.4 s (unfused int8 went the other
        # way, 6.3 vs 7.6 s; the exporter always writes the fused graph).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        source: str | bytes = str(path)
        self.requantised = 0
        if int8_weights is not None and not exact_u8s8(int8_isa()):
            # no VNNI: 8-bit weights can saturate u8 x s8 products, so they get 7 bits here, and
            # ONNX Runtime's exact u8 x u8 kernel takes any weight beyond 7 bits left over
            opts.add_session_config_entry("session.x64quantprecision", "1")
            if int8_weights != "s7":
                import onnx
                from searchsmith.models.int8_cpu import requantize_s7

                model = onnx.load(str(path))
                self.requantised = requantize_s7(model)
                source = model.SerializeToString() if self.requantised else source
        try:
            self.session = ort.InferenceSession(source, sess_options=opts, providers=providers)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception classes
            raise BundleError(f"bundle {str(path.parent)!r}: {path.name} does not load in ONNX Runtime ({exc}); "
                              "re-export the bundle") from None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.on_cuda = self.session.get_providers()[0] == "CUDAExecutionProvider"

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        if not self.on_cuda:
            return self.session.run(None, feeds)[0]
        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        binding.bind_output(self.session.get_outputs()[0].name, "cuda")
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]


class TorchGraph:
    """A torch module with the graph's signature: NumPy feeds in, NumPy output out."""

    def __init__(self, module: torch.nn.Module, input_names: list[str], device: str = "cpu",
                 fp16: bool = False) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.module = module.to(self.device).eval()
        self.fp16 = fp16 and self.device.type == "cuda"
        if self.fp16:
            self.module = self.module.half()
        self.input_names = input_names

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        args = []
        for name in self.input_names:
            t = torch.from_numpy(np.ascontiguousarray(feeds[name])).to(self.device)
            if self.fp16 and t.is_floating_point():
                t = t.half()
            args.append(t)
        with torch.inference_mode():
            out = self.module(*args)
        return out.float().cpu().numpy()


# ----------------------------------------------------------------------------- bundles


def _check_texts(texts: Any, what: str) -> list[str]:
    if isinstance(texts, str):
        raise ValidationError(f"{what}: expected a list of strings, got one string (wrap it in a list)")
    if not isinstance(texts, (list, tuple)):
        raise ValidationError(f"{what}: expected a list of strings, got {type(texts).__name__}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValidationError(f"{what}: item {i} is {type(t).__name__}, expected a string")
        check_unicode(t, f"{what}: item {i}")  # a lone surrogate: a raw tokenizer TypeError otherwise
    return list(texts)


def _check_text(text: Any, what: str) -> str:
    """One string argument (``what``: ``"score: query"``): a string without a lone surrogate."""
    if not isinstance(text, str):
        raise ValidationError(f"{what} is {type(text).__name__}, expected a string")
    return check_unicode(text, what)


def _check_max_nodes(max_nodes: Any, what: str) -> None:
    if max_nodes is not None and not is_int(max_nodes, 1):
        raise ValidationError(f"{what}: max_nodes must be an int >= 1 (or None: the bundle's), got {max_nodes!r:.40}")


def _check_pairs(pairs: Any, what: str) -> list[tuple[str, str]]:
    if not isinstance(pairs, (list, tuple)):
        raise ValidationError(f"{what}: expected a list of (str, str) pairs, got {type(pairs).__name__}")
    out = []
    for i, p in enumerate(pairs):
        if (not isinstance(p, (list, tuple)) or len(p) != 2
                or not isinstance(p[0], str) or not isinstance(p[1], str)):
            raise ValidationError(f"{what}: pair {i} is {p!r:.60}, expected a (str, str) tuple")
        out.append((check_unicode(p[0], f"{what}: pair {i}[0]"), check_unicode(p[1], f"{what}: pair {i}[1]")))
    return out


class Bundle:
    """What every task bundle shares: manifest, tokenizer, graphs, batching, truncation.

    Attributes:
        task: ``embed``, ``rerank``, ``decompose``, ``cite`` or ``images``.
        manifest: the parsed ``manifest.json``.
        backend: ``onnx-cpu``, ``onnx-cuda`` or ``torch``.
        max_length: tokens per input (longer inputs are truncated and reported in the meta).
        batch_size: most inputs per graph call.
        max_batch_tokens: padded tokens per graph call (inputs x longest input): inputs are
            sorted by length and packed under it, as the torch embedder does, so short inputs
            travel in large batches and long ones in small ones. None = no token budget.
    """

    TASK: ClassVar[str] = ""  # the registry's task name (models/tasks.py) of a subclass

    def __init__(self, path: Path, manifest: Manifest, tokenizer: PreTrainedTokenizerBase,
                 graphs: Mapping[str, Graph], backend: str,
                 batch_size: int = 32, max_batch_tokens: int | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self.task: str = manifest["task"]
        self.tokenizer = tokenizer
        self.graphs = graphs
        self.backend = backend
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_length = int(manifest["max_length"])

    def __repr__(self) -> str:
        return f"<{type(self).__name__} task={self.task} backend={self.backend} path={str(self.path)!r}>"

    # -- low level -----------------------------------------------------------------------
    def run_graph(self, name: str, feeds: Mapping[str, np.ndarray | Sequence[Sequence[int]]]) -> np.ndarray:
        """Run one graph on raw arrays, checked against the manifest's inputs.

        Args:
            name: a graph of ``manifest["graphs"]`` (e.g. ``model``, ``encoder``).
            feeds: input name -> array with the manifest's dtype and rank.

        Raises:
            ValidationError: unknown graph or input, missing input, wrong type, dtype or shape.
        """
        graphs = self.manifest["graphs"]
        if name not in graphs:
            raise ValidationError(f"run_graph: unknown graph {name!r}; this bundle has {sorted(graphs)}")
        if not isinstance(feeds, dict):
            raise ValidationError(f"run_graph {name}: feeds must be a dict of arrays, got {type(feeds).__name__}")
        specs = {i["name"]: i for i in graphs[name]["inputs"]}
        unknown = sorted(set(feeds) - set(specs))
        if unknown:
            raise ValidationError(f"run_graph {name}: unknown inputs {unknown}; expected {sorted(specs)}")
        out = {}
        sizes: dict[str, tuple[str, int]] = {}  # a named axis ("batch", "seq") -> (the input that set it, size)
        for iname, spec in specs.items():
            if iname not in feeds:
                raise ValidationError(f"run_graph {name}: input {iname!r} is missing; expected {sorted(specs)}")
            value = feeds[iname]
            if not isinstance(value, np.ndarray):
                raise ValidationError(f"run_graph {name}.{iname}: expected a numpy array, got {type(value).__name__}")
            if value.dtype != np.dtype(spec["dtype"]):
                raise ValidationError(f"run_graph {name}.{iname}: dtype {value.dtype}, expected {spec['dtype']} "
                                      f"(cast with .astype(np.{spec['dtype']}))")
            shape = spec["shape"]
            if value.ndim != len(shape):
                raise ValidationError(f"run_graph {name}.{iname}: shape {tuple(value.shape)} has {value.ndim} "
                                      f"dims, expected {len(shape)} ({shape})")
            for axis, (got, want) in enumerate(zip(value.shape, shape, strict=True)):
                if isinstance(want, int) and got != want:
                    raise ValidationError(f"run_graph {name}.{iname}: axis {axis} is {got}, expected {want} ({shape})")
                if got == 0:
                    raise ValidationError(f"run_graph {name}.{iname}: axis {axis} is empty; expected >= 1")
                if isinstance(want, str):
                    first, size = sizes.setdefault(want, (iname, got))
                    if got != size:
                        raise ValidationError(f"run_graph {name}.{iname}: axis {axis} ({want}) is {got} but "
                                              f"{first}'s is {size}; inputs sharing an axis name agree in size")
            self._check_feed_values(f"run_graph {name}.{iname}", iname, value)
            out[iname] = value
        seq = [v.shape[1] for k, v in out.items() if k in ("input_ids", "decoder_input_ids") and v.ndim == 2]
        if seq and name != "decoder" and seq[0] > self.max_length:
            raise ValidationError(f"run_graph {name}: sequence length {seq[0]} is over max_length "
                                  f"{self.max_length}; truncate the inputs")
        return self.graphs[name](out)

    def _check_feed_values(self, where: str, iname: str, value: np.ndarray) -> None:
        """Token ids within the tokenizer's vocabulary (ONNX Runtime fails deep in the graph
        on a larger one and reads a negative one from the end); attention masks of 0 and 1."""
        if iname.endswith("input_ids") and value.dtype.kind in "iu" and value.size:
            lo, hi, vocab = int(value.min()), int(value.max()), len(self.tokenizer)
            if lo < 0 or hi >= vocab:
                bad = lo if lo < 0 else hi
                raise ValidationError(f"{where}: token id {bad} is outside the vocabulary [0, {vocab}); "
                                      "make ids with the bundle's tokenizer")
        if iname.endswith("attention_mask") and value.dtype.kind in "iu" and value.size \
                and not np.isin(value, (0, 1)).all():
            raise ValidationError(f"{where}: values must be 0 or 1 (1 = a real token), got "
                                  f"{sorted(set(np.unique(value).tolist()) - {0, 1})[:3]}")

    def _tokenizer_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` under the tokenizer's lock (:func:`searchsmith.models.tokenizer.tokenizer_lock`):
        the server tokenizes on request threads and batcher threads at once."""
        from searchsmith.models.tokenizer import tokenizer_lock

        with tokenizer_lock(self.tokenizer):
            return fn(*args, **kwargs)

    def _count_tokens(self, text: str) -> int:
        """Tokens of ``text``, special tokens included, uncut."""
        return len(self._tokenizer_call(self.tokenizer, text, truncation=False)["input_ids"])

    def _encode_text(self, first: list[str], second: list[str] | None = None,
                     max_length: int | None = None,
                     batch_size: int | None = None) -> list[tuple[list[int], dict[str, np.ndarray]]]:
        """Tokenize (truncating), sort by length and pad per batch (of at most ``batch_size``
        inputs; default: the bundle's).

        Returns:
            ``(indices, feeds)`` per batch; ``feeds`` hold int64 (b, T) arrays.
        """
        limit = max_length or self.max_length
        kwargs: dict[str, Any] = {"truncation": True, "max_length": limit, "padding": False}
        if second is None:
            enc = self._tokenizer_call(self.tokenizer, first, **kwargs)
        else:
            # cut the passage, as in training; a first text over the limit alone cuts both
            enc = encode_pairs(self.tokenizer, first, second, limit, padding=False,
                               call=lambda a, b, **kw: self._tokenizer_call(self.tokenizer, a, b, **kw))
        ids = enc["input_ids"]
        types = enc.get("token_type_ids")
        cap = batch_size or self.batch_size
        budget = self.max_batch_tokens or cap * limit  # no budget: batch_size alone
        groups = pack_batches([len(x) for x in ids], budget, cap, PACK_MIN_PADDING_EFFICIENCY)
        pad = self.tokenizer.pad_token_id or 0
        batches = []
        for idx in groups:
            width = max(len(ids[i]) for i in idx)
            input_ids = np.full((len(idx), width), pad, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            token_types = np.zeros((len(idx), width), dtype=np.int64)
            for r, i in enumerate(idx):
                n = len(ids[i])
                input_ids[r, :n] = ids[i]
                mask[r, :n] = 1
                if types is not None:
                    token_types[r, :n] = types[i]
            batches.append((idx, {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_types}))
        return batches

    def _run_text(self, graph: str, batches: list[tuple[list[int], dict[str, np.ndarray]]], n: int,
                  ) -> np.ndarray:
        """Run ``graph`` over padded batches; rows back in input order.

        Per-token outputs ((b, T, ...), e.g. the citation tagger) have each batch's own width
        T; they are zero-padded to the widest batch, so row i is valid up to its own length.
        """
        names = {i["name"] for i in self.manifest["graphs"][graph]["inputs"]}
        results = [(idx, self.graphs[graph]({k: v for k, v in feeds.items() if k in names})) for idx, feeds in batches]
        if not results:
            return np.zeros((0,), dtype=np.float32)
        shape = list(results[0][1].shape[1:])
        if len(shape) >= 2:  # (T, ...): the widest batch
            shape[0] = max(res.shape[1] for _, res in results)
        out = np.zeros((n, *shape), dtype=np.float32)
        for idx, res in results:
            if len(shape) >= 2:
                out[idx, : res.shape[1]] = res
            else:
                out[idx] = res
        return out

    def _lengths(self, first: list[str], second: list[str] | None = None) -> list[int]:
        """Untruncated token count of each input (special tokens included)."""
        pair = () if second is None else (second,)
        enc = self._tokenizer_call(self.tokenizer, first, *pair, truncation=False, return_attention_mask=False,
                                   return_token_type_ids=False)
        return [len(ids) for ids in enc["input_ids"]]

    def _meta(self, result: Any, return_meta: bool, first: list[str], second: list[str] | None = None,
              max_length: int | None = None) -> Any:
        if not isinstance(return_meta, bool):  # "no" is truthy: a tuple where the result was expected
            raise ValidationError(f"return_meta must be True or False, got {return_meta!r:.40}")
        if not return_meta:
            return result
        return result, input_meta(self._lengths(first, second) if first else [], max_length or self.max_length)


class EmbedBundle(Bundle):
    """Sentence embeddings: mean pooling and L2 normalisation happen inside the graph."""

    TASK = "embed"

    def encode(self, texts: Sequence[str], return_meta: bool = False,
               **st_keywords: Unpack[EncodeKeywords]) -> WithMeta[np.ndarray]:
        """Embed ``texts`` -> (n, D) float32, unit rows, in input order.

        Takes sentence-transformers' ``encode`` keywords too (``prompt``, ``batch_size``,
        ``show_progress_bar`` (no bar here), ``convert_to_tensor``, ``convert_to_numpy``,
        ``normalize_embeddings=True``, ``precision="float32"``, ``truncate_dim``;
        :mod:`searchsmith.models.encode_options`).
        """
        dim = int(self.manifest["embedding_dim"])
        opts = encode_options(dim=dim, **st_keywords)
        texts = opts.texts(_check_texts(texts, "encode"))
        vecs = (self._run_text("model", self._encode_text(texts, batch_size=opts.batch_size), len(texts)) if texts
                else np.zeros((0, dim), np.float32))
        return self._meta(opts.finish(vecs.reshape(len(texts), dim)), return_meta, texts)


class RerankBundle(Bundle):
    """Cross-encoder relevance: one logit per (query, passage) pair, higher = more relevant."""

    TASK = "rerank"

    def __init__(self, path: Path, manifest: Manifest, tokenizer: PreTrainedTokenizerBase,
                 graphs: Mapping[str, Graph], backend: str, batch_size: int = 32,
                 max_batch_tokens: int | None = None) -> None:
        super().__init__(path, manifest, tokenizer, graphs, backend, batch_size, max_batch_tokens)
        from searchsmith.models.rerank_mix import RetrievalMix

        #: the calibrated share against the retrieval cosine the pipeline mixes with, or None
        self.retrieval_mix = RetrievalMix.from_json(self.manifest.get("retrieval_mix"))

    def score_pairs(self, pairs: Sequence[tuple[str, str]], return_meta: bool = False) -> WithMeta[np.ndarray]:
        """Logits (n,) float32 of (query, passage) pairs, in input order."""
        pairs = _check_pairs(pairs, "score_pairs")
        qs, ps = [q for q, _ in pairs], [p for _, p in pairs]
        if not pairs:
            return self._meta(np.zeros((0,), np.float32), return_meta, qs, ps)
        logits = self._run_text("model", self._encode_text(qs, ps), len(pairs)).reshape(-1)
        return self._meta(logits, return_meta, qs, ps)

    def score(self, query: str, passages: Sequence[str], return_meta: bool = False) -> WithMeta[np.ndarray]:
        """Logits (n,) of ``passages`` against ``query``."""
        _check_text(query, "score: query")
        passages = _check_texts(passages, "score")
        return self.score_pairs([(query, p) for p in passages], return_meta=return_meta)


class CiteBundle(Bundle):
    """Entity tagging (BIO) and source attribution (P(supports) per pair), post-processed as
    :class:`searchsmith.models.citation.CitationModel` does."""

    TASK = "cite"

    def __init__(self, path: Path, manifest: Manifest, tokenizer: PreTrainedTokenizerBase,
                 graphs: Mapping[str, Graph], backend: str, batch_size: int = 32,
                 max_batch_tokens: int | None = None) -> None:
        super().__init__(path, manifest, tokenizer, graphs, backend, batch_size, max_batch_tokens)
        self.labels: list[str] = list(self.manifest["labels"])
        self.support_threshold = float(self.manifest["thresholds"]["support_threshold"])
        self.tagger_max_length = int(self.manifest.get("tagger_max_length", self.max_length))
        from searchsmith.models.citation import CosineResidual

        self.cosine_residual = CosineResidual.from_json(self.manifest.get("cosine_residual"))

    def entities(self, sentences: Sequence[str], return_meta: bool = False) -> WithMeta[list[list[EntitySpan]]]:
        """Character spans ``(start, end, type)`` of the entities in each sentence."""
        from searchsmith.models.citation import decode_spans

        sentences = _check_texts(sentences, "entities")
        limit = self.tagger_max_length
        out: list[list[tuple[int, int, str]]] = []
        if sentences:
            enc = self._tokenizer_call(self.tokenizer, sentences, truncation=True, max_length=limit, return_offsets_mapping=True,
                                 return_special_tokens_mask=True)
            logits = self._run_text("tagger", self._encode_text(sentences, max_length=limit),
                                    len(sentences))  # (n, T, L)
            for i in range(len(sentences)):
                pred = logits[i, : len(enc["input_ids"][i])].argmax(-1).tolist()
                keep = [(tuple(o), p) for o, m, p in zip(enc["offset_mapping"][i], enc["special_tokens_mask"][i],
                                                          pred, strict=True) if not m]
                out.append(decode_spans([k[0] for k in keep], [k[1] for k in keep], self.labels))
        return self._meta(out, return_meta, sentences, max_length=limit)

    def attribute(self, pairs: Sequence[tuple[str, str]], return_meta: bool = False,
                  cosine: Sequence[float] | None = None) -> WithMeta[np.ndarray]:
        """P(supports) (n,) float32 for (sentence, source text) pairs; ``cosine`` (n,), the
        bi-encoder cosine of each pair, is required when the manifest has a ``cosine_residual``
        (:class:`searchsmith.models.citation.CosineResidual`) and ignored otherwise."""
        from searchsmith.models.citation import sigmoid

        pairs = _check_pairs(pairs, "attribute")
        a, b = [x for x, _ in pairs], [y for _, y in pairs]
        res = self.cosine_residual
        if res is not None:
            res.logits(np.zeros(len(pairs)), cosine)  # checks the cosines before the model runs
        probs = np.zeros((0,), np.float32)
        if pairs:
            logits = self._run_text("scorer", self._encode_text(a, b), len(pairs)).reshape(-1)
            probs = res.probs(logits, cosine) if res is not None else sigmoid(logits).astype(np.float32)
        return self._meta(probs, return_meta, a, b)


class DecomposeBundle(Bundle):
    """Greedy decoding over the encoder and decoder graphs, parsed like ``Decomposer``; for a
    ``tagger`` decomposer (``generation.arch``), the encoder graph and the manifest's depth
    head give each question word its depth, read back as a graph (models/qdg_spans.py)."""

    TASK = "decompose"

    def __init__(self, path: Path, manifest: Manifest, tokenizer: PreTrainedTokenizerBase,
                 graphs: Mapping[str, Graph], backend: str, batch_size: int = 32,
                 max_batch_tokens: int | None = None) -> None:
        super().__init__(path, manifest, tokenizer, graphs, backend, batch_size, max_batch_tokens)
        gen = self.manifest["generation"]
        self.tagger = gen.get("arch") == "tagger"
        self.depth_head: tuple[np.ndarray, np.ndarray] | None = None
        self.drop_levels = 0
        self.switch_penalty = 0.0
        self.choice_template = False
        self.add_head: tuple[np.ndarray, np.ndarray, list[str]] | None = None
        if self.tagger:
            from searchsmith.models.decomposer import check_depth_head

            try:
                head = check_depth_head(gen.get("depth_head"))
            except ValidationError as exc:
                raise BundleError(f"bundle {self.path}: manifest generation.depth_head: {exc}; re-export it") from None
            self.depth_head = (np.asarray(head["weight"], np.float32), np.asarray(head["bias"], np.float32))
            # with delete tags the head's labels are depth levels x kept / dropped
            if gen.get("tag_drop"):
                if len(head["bias"]) < 2 or len(head["bias"]) % 2:
                    raise BundleError(f"bundle {self.path}: manifest generation.tag_drop is set but the depth head has "
                                      f"{len(head['bias'])} labels, not depth levels x kept / dropped; re-export it")
                self.drop_levels = len(head["bias"]) // 2
            try:
                self.switch_penalty = float(gen.get("switch_penalty", 0.0))
            except (TypeError, ValueError):
                self.switch_penalty = -1.0
            if not self.switch_penalty >= 0.0:
                raise BundleError(f"bundle {self.path}: manifest generation.switch_penalty must be a number >= 0, "
                                  f"got {gen.get('switch_penalty')!r}; re-export it")
            self.choice_template = gen.get("choice_template", False)  # bundles exported before: off
            if not isinstance(self.choice_template, bool):
                raise BundleError(f"bundle {self.path}: manifest generation.choice_template must be true or false, "
                                  f"got {self.choice_template!r}; re-export it")
            if gen.get("add_head") is not None:  # add tags: a phrase written before a word
                from searchsmith.models.decomposer import check_add_head

                try:
                    add = check_add_head(gen["add_head"])
                except ValidationError as exc:
                    raise BundleError(f"bundle {self.path}: manifest generation.add_head: {exc}; re-export it") from None
                if np.asarray(add["weight"]).shape[1] != self.depth_head[0].shape[1]:
                    raise BundleError(f"bundle {self.path}: manifest generation.add_head is not as wide as the depth "
                                      "head; re-export it")
                self.add_head = (np.asarray(add["weight"], np.float32), np.asarray(add["bias"], np.float32),
                                 list(add["phrases"]))
        self.start_id = int(gen.get("decoder_start_token_id", -1))
        self.eos_id = int(gen.get("eos_token_id", -1))
        self.pad_id = int(gen.get("pad_token_id", 0))
        self.max_new_tokens = int(gen.get("max_target_tokens", 0))
        self.max_nodes = int(gen["max_nodes"])
        self.max_history_turns = int(gen["max_history_turns"])
        self.reply_words = int(gen.get("reply_words", 0))  # bundles exported before it: user turns only
        self.grammar: Any = None
        self.copy: Any = None
        from searchsmith.models.decomposer import check_rewrite_head, check_type_head
        from searchsmith.models.rewrite_edit import REWRITE_TARGETS

        self.rewrite_target = gen.get("rewrite_target", "full")
        if self.rewrite_target not in REWRITE_TARGETS:
            raise BundleError(f"bundle {self.path}: manifest generation.rewrite_target is "
                              f"{self.rewrite_target!r}, expected one of {list(REWRITE_TARGETS)}; re-export it")
        self.type_head = check_type_head(gen["type_head"]) if gen.get("type_head") else None
        self.rewrite_head = check_rewrite_head(gen["rewrite_head"]) if gen.get("rewrite_head") else None
        if gen.get("constrained"):
            from searchsmith.models.constrained import CopyConstraint, EditConstraint, GraphGrammar
            from searchsmith.models.decomposer import DECOMPOSE_PREFIX, REWRITE_PREFIX

            try:
                self.grammar = GraphGrammar(self.tokenizer, min(self.max_nodes, 9),
                                            gen.get("decompose_vocab", []), DECOMPOSE_PREFIX.strip(),
                                            max_tokens=self.max_new_tokens)
                rewrite_cls = EditConstraint if self.rewrite_target == "edit" else CopyConstraint
                self.copy = rewrite_cls(self.tokenizer, gen.get("rewrite_vocab", []),
                                        REWRITE_PREFIX.strip())
            except ValueError as exc:
                raise BundleError(f"bundle {self.path}: constrained decoding does not fit its "
                                  f"tokenizer ({exc}); re-export it") from None

    def generate(self, sources: Sequence[str], return_meta: bool = False,
                 constraint: GraphGrammar | CopyConstraint | EditConstraint | None = None,
                 use_type_head: bool = False) -> WithMeta[list[str]]:
        """Greedy generations for prefixed sources (``decompose: ...``), in input order.

        Same loop as ``transformers`` greedy ``generate``: start from the decoder start token,
        append the argmax, pad rows that have emitted eos, stop when all have or after
        ``max_target_tokens`` new tokens. With ``constraint`` (models/constrained.py), each
        row's argmax is taken over the tokens the constraint allows, as in
        ``Decomposer.generate``; with ``use_type_head`` (and a head in the manifest) the graph
        type is the head's choice over the encoder states.
        """
        from searchsmith.models.decomposer import predict_types

        sources = _check_texts(sources, "generate")
        if self.tagger:
            from searchsmith.models.decomposer import tag_generate

            return self._meta(tag_generate(sources, self.tag_graphs), return_meta, sources)
        texts = [""] * len(sources)
        generated = 0  # tokens generated, each row's up to its eos
        for idx, feeds in self._encode_text(sources):
            mask = feeds["attention_mask"]
            hidden = self.graphs["encoder"]({"input_ids": feeds["input_ids"], "attention_mask": mask})
            dec = np.full((len(idx), 1), self.start_id, dtype=np.int64)
            done = np.zeros(len(idx), dtype=bool)
            types: list[Any] = [None] * len(idx)
            if use_type_head and self.type_head is not None and constraint is not None:
                types = predict_types(self.type_head, hidden, mask)
            states = ([constraint.state_for([int(t) for t, m in zip(r, a, strict=True) if m], k)
                       for r, a, k in zip(feeds["input_ids"].tolist(), mask.tolist(), types, strict=True)]
                      if constraint is not None else None)
            for _ in range(self.max_new_tokens):
                logits = self.graphs["decoder"]({"decoder_input_ids": dec, "encoder_hidden_states": hidden,
                                                 "encoder_attention_mask": mask})  # (b, V)
                if states is not None:
                    masked = np.full_like(logits, -np.inf)
                    for r in range(len(idx)):
                        if not done[r]:
                            ok = constraint.allowed(states[r], [int(t) for t in dec[r, 1:]])
                            masked[r, ok] = logits[r, ok]
                    logits = masked
                nxt = np.where(done, self.pad_id, logits.argmax(-1)).astype(np.int64)
                dec = np.concatenate([dec, nxt[:, None]], axis=1)
                done |= nxt == self.eos_id
                if done.all():
                    break
            decoded = self._tokenizer_call(self.tokenizer.batch_decode, dec, skip_special_tokens=True,
                                                  clean_up_tokenization_spaces=True)
            for i, text in zip(idx, decoded, strict=True):
                texts[i] = text
            ended = dec[:, 1:] == self.eos_id
            generated += int(np.where(ended.any(1), ended.argmax(1) + 1, ended.shape[1]).sum())
        got = self._meta(texts, return_meta, sources)
        if return_meta:
            got[1]["tokens_out"] = generated
        return got

    def tag_depths(self, questions: Sequence[str]) -> list[list[int]]:
        """Per question, each word's label from the encoder graph and the depth head (tagger):
        its depth, or with ``generation.tag_drop`` its depth and delete tag."""
        return [labels for labels, _ in self.tag_labels(questions)]

    def tag_labels(self, questions: Sequence[str]) -> list[tuple[list[int], list[str]]]:
        """Per question, :meth:`tag_depths`' labels and each word's add phrase from
        ``generation.add_head`` (all "" without it), as ``Decomposer.tag_labels``."""
        from searchsmith.models.decomposer import adds_of, depths_of, tag_encode

        questions = _check_texts(questions, "tag_labels")
        if self.depth_head is None:
            raise BundleError(f"bundle {self.path}: not a tagger decomposer (generation.arch)")
        weight, bias = self.depth_head
        out: list[tuple[list[int], list[str]]] = []
        for start in range(0, len(questions), self.batch_size):
            chunk = list(questions[start:start + self.batch_size])
            enc, firsts = self._tokenizer_call(tag_encode, self.tokenizer, chunk, self.max_length, "np")
            hidden = self.graphs["encoder"]({"input_ids": enc["input_ids"].astype(np.int64),
                                             "attention_mask": enc["attention_mask"].astype(np.int64)}).astype(np.float32)
            logits = hidden @ weight.T + bias
            add_logits = hidden @ self.add_head[0].T + self.add_head[1] if self.add_head is not None else None
            for i in range(len(chunk)):
                adds = (adds_of(add_logits[i], firsts[i], self.add_head[2]) if self.add_head is not None
                        else [""] * len(firsts[i]))
                out.append((depths_of(logits[i], firsts[i], self.switch_penalty, self.drop_levels), adds))
        return out

    def tag_graphs(self, questions: Sequence[str], max_nodes: int | None = None) -> list[QDG]:
        """The tagger's graph of each question."""
        from searchsmith.models.qdg_spans import tagger_graph

        questions = _check_texts(questions, "tag_graphs")
        _check_max_nodes(max_nodes, "tag_graphs")
        cap = max_nodes or self.max_nodes
        return [tagger_graph(q, labels, cap, self.drop_levels, adds, self.choice_template)
                for q, (labels, adds) in zip(questions, self.tag_labels(questions), strict=True)]

    def decompose(self, question: str, max_nodes: int | None = None, return_meta: bool = False) -> WithMeta[QDG]:
        """The QDG of ``question`` (``terminal`` with the question when the output is unusable)."""
        from searchsmith.models.decomposer import decompose_source
        from searchsmith.models.qdg import parse_linear

        _check_text(question, "decompose: question")
        if is_blank(question):  # "\u0000" or zero-width characters alone too, as the pipeline refuses them
            raise ValidationError("decompose: question is empty; send a non-empty question")
        _check_max_nodes(max_nodes, "decompose")
        source = decompose_source(question)
        if self.tagger:
            return self._meta(self.tag_graphs([question], max_nodes)[0], return_meta, [question])
        text, meta = self.generate([source], return_meta=True, constraint=self.grammar,
                                   use_type_head=True)
        graph, _ = parse_linear(text[0], question, max_nodes=max_nodes or self.max_nodes)
        return (graph, meta) if return_meta else graph

    def rewrite(self, history: Sequence[Turn], query: str, return_meta: bool = False) -> WithMeta[str]:
        """``query`` made standalone given ``history`` (dicts with role/content, or strings).

        Without user history the query is returned as it is, as ``Decomposer.rewrite`` does.
        """
        from searchsmith.models.decomposer import (
            _conversation_texts,
            _user_turns,
            fitted_rewrite_source,
            last_reply,
        )

        _check_text(query, "rewrite: query")
        if is_blank(query):  # it was "rewritten" into " (Kestrel)"
            raise ValidationError("rewrite: query is empty; send the follow-up question to rewrite")
        if not isinstance(history, (list, tuple)):
            raise ValidationError(f"rewrite: history is {type(history).__name__}, expected a list of turns")
        for i, t in enumerate(history):  # a malformed turn was skipped without a word
            if isinstance(t, str):
                continue
            if not isinstance(t, Mapping) or not isinstance(t.get("content"), str) \
                    or t.get("role", "user") not in CHAT_ROLES:
                raise ValidationError(f"rewrite: history[{i}] must be a string or a {{role, content}} object with "
                                      f"role one of {list(CHAT_ROLES)} and a string content, got {t!r:.60}")
        check_unicode(list(history), "rewrite: history")
        turns = _user_turns(history)
        if not turns:
            return (query, input_meta([], self.max_length)) if return_meta else query
        source = fitted_rewrite_source(self._count_tokens, turns, query, self.max_history_turns, last_reply(history),
                                       self.reply_words, self.max_length)
        texts = _conversation_texts(history)  # where the rewrite's words (and their casing) come from
        if self.rewrite_head is not None:  # the rewrite tagger over the encoder's token states
            from searchsmith.models.decomposer import head_probs
            from searchsmith.models.rewrite_edit import head_rewrite

            enc = self._tokenizer_call(self.tokenizer, [source], truncation=True, max_length=self.max_length,
                                 return_offsets_mapping=True, return_tensors="np")
            hidden = self.graphs["encoder"]({"input_ids": enc["input_ids"].astype(np.int64),
                                             "attention_mask": enc["attention_mask"].astype(np.int64)})
            offsets = [tuple(int(v) for v in o) for o in enc["offset_mapping"][0]]
            head = self.rewrite_head
            out = head_rewrite(query, texts, source, offsets, head_probs(head, hidden[0]), head)
            return self._meta(out, return_meta, [source])
        if self.tagger:  # no decoder: without the rewrite tagger the query is kept
            return self._meta(query, return_meta, [source])
        text, meta = self.generate([source], return_meta=True, constraint=self.copy)
        if self.rewrite_target == "edit":
            from searchsmith.models.rewrite_edit import apply_edits

            out = apply_edits(query, text[0], texts)
        else:
            out = " ".join(text[0].split()) or query
        return (out, meta) if return_meta else out


class ReadBundle(Bundle):
    """Extractive question answering (``models/reader.py``): the short answer to a question
    from its passages, read in overlapping windows, with the passage it comes from."""

    TASK = "read"

    def __init__(self, path: Path, manifest: Manifest, tokenizer: PreTrainedTokenizerBase,
                 graphs: Mapping[str, Graph], backend: str,
                 batch_size: int = 32, max_batch_tokens: int | None = None) -> None:
        from searchsmith.models.reader import ReaderSettings

        super().__init__(path, manifest, tokenizer, graphs, backend, batch_size, max_batch_tokens)
        self.settings = ReaderSettings.from_json(self.manifest.get("reader") or {"max_length": self.max_length})
        self.min_score = float((self.manifest.get("thresholds") or {}).get("no_answer_threshold", 0.5))

    def logits(self, feeds: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start (b, T), end (b, T), kind (b, 4)) logits of padded window feeds."""
        names = {i["name"] for i in self.manifest["graphs"]["model"]["inputs"]}
        out = self.graphs["model"]({k: v for k, v in feeds.items() if k in names})  # (b, T, 6)
        return out[..., 0], out[..., 1], out[:, 0, 2:]

    def read_batch(self, questions: Sequence[str], passages: Sequence[Sequence[PassageLike]],
                   return_meta: bool = False) -> WithMeta[list[PassageAnswer]]:
        """One :class:`~searchsmith.models.reader.PassageAnswer` per question from its passages.

        Args:
            questions: the questions.
            passages: per question, its passages (strings, ``(title, text)`` pairs or
                ``{"title", "text"}`` dicts) in the order they are read.

        The meta's ``truncated`` lists the questions cut to ``max_question_tokens`` (a long
        context is never cut: it is read in windows).
        """
        from searchsmith.models.reader import as_passage, read_passages

        questions = _check_texts(questions, "read_batch")
        blank = [i for i, q in enumerate(questions) if is_blank(q)]
        if blank:  # it still found an answer ("2021") to nothing asked
            raise ValidationError(f"read_batch: question {blank[0]} is empty (nothing but spaces, control or "
                                  "zero-width characters); ask something")
        if not isinstance(passages, (list, tuple)) or len(passages) != len(questions):
            raise ValidationError(f"read_batch: expected one list of passages per question ({len(questions)}), "
                                  f"got {type(passages).__name__} of {len(passages) if isinstance(passages, (list, tuple)) else '?'}")
        for i, ps in enumerate(passages):  # a string would be read a character at a time
            if not isinstance(ps, (list, tuple)):
                raise ValidationError(f"read_batch: passages[{i}] is {type(ps).__name__}, expected a list of "
                                      "passages" + (" (wrap the string in a list)" if isinstance(ps, str) else ""))
            check_unicode(list(ps), f"read_batch: passages[{i}]")
        items = [[as_passage(p, f"read_batch passages[{i}][{j}]") for j, p in enumerate(ps)]
                 for i, ps in enumerate(passages)]
        with_tok = self._tokenizer_call
        out, wins = with_tok(lambda: read_passages(self.logits, self.tokenizer, questions, items, self.settings,
                                                   self.batch_size))
        if not return_meta:
            return out
        return out, {"truncated": wins.questions_cut, "max_length": self.max_length, "tokens": wins.tokens,
                     "max_question_tokens": self.settings.max_question_tokens, "windows": len(wins.windows)}

    def read(self, question: str, passages: Sequence[PassageLike],
             return_meta: bool = False) -> WithMeta[PassageAnswer]:
        """The :class:`~searchsmith.models.reader.PassageAnswer` to ``question`` from ``passages``."""
        _check_text(question, "read: question")
        if not isinstance(passages, (list, tuple)):
            raise ValidationError(f"read: passages is {type(passages).__name__}, expected a list of passages"
                                  + (" (wrap the string in a list)" if isinstance(passages, str) else ""))
        got = self.read_batch([question], [passages], return_meta=return_meta)
        return (got[0][0], got[1]) if return_meta else got[0]


class ImagesBundle(Bundle):
    """Dual encoder: texts and images to the same normalised space."""

    TASK = "images"

    def encode_text(self, texts: Sequence[str], return_meta: bool = False) -> WithMeta[np.ndarray]:
        """(n, d) float32 unit rows."""
        texts = _check_texts(texts, "encode_text")
        dim = int(self.manifest["embedding_dim"])
        vecs = self._run_text("text", self._encode_text(texts), len(texts)) if texts else np.zeros((0, dim), np.float32)
        return self._meta(vecs.reshape(len(texts), dim), return_meta, texts)

    def fit_image(self, image: PILImage) -> PILImage:
        """``image`` as the model reads it: RGB, resized to its input size (what :meth:`preprocess`
        does first; a fitted image passes through it unchanged). A server keeps these, not the
        full-size images it decoded."""
        from PIL import Image

        if not isinstance(image, Image.Image):
            raise ValidationError(f"fit_image: image is {type(image).__name__}, expected a PIL.Image.Image "
                                  "(PIL.Image.fromarray makes one of an array)")
        pre = self.manifest["preprocess"]
        size = int(pre["image_size"])
        resample = getattr(Image.Resampling, pre.get("resample", "BILINEAR"))
        rgb = image.convert("RGB")
        return rgb if rgb.size == (size, size) else rgb.resize((size, size), resample)

    def preprocess(self, images: Sequence[PILImage]) -> np.ndarray:
        """PIL images -> (m, 3, H, W) float32: RGB, resized, scaled to [0, 1], normalised."""
        pre = self.manifest["preprocess"]
        size = int(pre["image_size"])
        mean = np.asarray(pre["mean"], dtype=np.float32).reshape(3, 1, 1)
        std = np.asarray(pre["std"], dtype=np.float32).reshape(3, 1, 1)
        out = np.zeros((len(images), 3, size, size), dtype=np.float32)
        for i, im in enumerate(images):
            arr = np.asarray(self.fit_image(im), dtype=np.float32) / 255.0
            out[i] = (arr.transpose(2, 0, 1) - mean) / std
        return out

    def encode_images(self, images: Sequence[PILImage], return_meta: bool = False) -> WithMeta[np.ndarray]:
        """(m, d) float32 unit rows of PIL images."""
        from PIL import Image

        if not isinstance(images, (list, tuple)):
            raise ValidationError(f"encode_images: expected a list of PIL images, got {type(images).__name__}")
        for i, im in enumerate(images):
            if not isinstance(im, Image.Image):
                raise ValidationError(f"encode_images: item {i} is {type(im).__name__}, expected a PIL.Image.Image")
        dim = int(self.manifest["embedding_dim"])
        out = np.zeros((len(images), dim), dtype=np.float32)
        for s in range(0, len(images), self.batch_size):
            pixels = self.preprocess(images[s:s + self.batch_size])
            out[s:s + len(pixels)] = self.graphs["vision"]({"pixel_values": pixels})
        meta = {**input_meta([], self.max_length), "images": len(images)}  # pixels, no tokens
        return (out, meta) if return_meta else out


# task (models/tasks.py) -> its bundle class; tests/models/test_tasks.py checks it covers the registry
BUNDLE_CLASSES: dict[str, type[Bundle]] = {cls.TASK: cls for cls in (EmbedBundle, RerankBundle, DecomposeBundle,
                                                                     CiteBundle, ReadBundle, ImagesBundle)}


# ----------------------------------------------------------------------------- loading


def read_manifest(path: Path) -> Manifest:
    """Parse and check ``manifest.json`` (format version, task, required keys).

    Raises:
        BundleError: missing, not JSON, newer format, unknown task, missing keys.
    """
    mpath = path / MANIFEST
    if not path.is_dir():
        raise BundleError(f"bundle: {str(path)!r} is not a folder; export one with: searchsmith export RUN_DIR --out DIR")
    if not mpath.is_file():
        raise BundleError(f"bundle: {str(path)!r} has no {MANIFEST}; it is not a searchsmith bundle "
                          "(export one with: searchsmith export RUN_DIR --out DIR)")
    manifest = read_json_object(mpath, "bundle", fix="re-export the bundle", error=BundleError)
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise BundleError(f"bundle: {mpath} format_version is {version!r}, expected an int >= 1")
    if version > FORMAT_VERSION:
        raise BundleError(
            f"bundle: {str(path)!r} has format_version {version} (written by searchsmith "
            f"{manifest.get('searchsmith_version', '?')}); this searchsmith {__version__} reads up to "
            f"{FORMAT_VERSION}. Upgrade searchsmith (pip install -U searchsmith) or re-export with this version")
    if "task" not in manifest and isinstance(manifest.get("format"), str):  # another searchsmith folder's manifest
        raise BundleError(f"bundle: {str(path)!r} is not a model bundle: its {MANIFEST} says format "
                          f"{manifest['format']!r} (an index folder: pass it as --index, or Index.load in Python); "
                          "bundles come from searchsmith export RUN_DIR --out DIR")
    for key in ("task", "graphs", "files", "max_length", "trained"):
        if key not in manifest:
            raise BundleError(f"bundle: {mpath} has no {key!r}; re-export the bundle")
    if manifest["task"] not in TASK_NAMES:
        raise BundleError(f"bundle: task {manifest['task']!r} in {mpath} is not one of {list(TASK_NAMES)}")
    problems = _manifest_problems(manifest)
    if problems:
        raise BundleError(f"bundle: {mpath} was edited or damaged ({'; '.join(problems[:3])}); re-export the bundle "
                          "(searchsmith export RUN_DIR --out DIR)")
    return manifest


def _manifest_problems(manifest: dict[str, Any]) -> list[str]:
    """What is wrong with the shape of a bundle manifest's fields the runtime reads (empty when
    nothing): each of the type the export writes."""
    out = []
    for key, low in (("max_length", 8), ("embedding_dim", 1)):
        if key in manifest and not is_int(manifest[key], low):
            out.append(f"{key}: expected an int >= {low}, got {manifest[key]!r:.40}")
    graphs = manifest["graphs"]
    if not isinstance(graphs, dict) or not graphs:
        out.append("graphs: expected a non-empty {name: {file, inputs, outputs}}")
    else:
        for name, graph in graphs.items():
            if not isinstance(graph, dict) or not isinstance(graph.get("file"), str) \
                    or not isinstance(graph.get("inputs"), list) \
                    or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in graph["inputs"]):
                out.append(f"graphs.{name}: expected {{file, inputs: [{{name, dtype}}], ...}}")
    if "dtype" in manifest and manifest["dtype"] not in ("fp32", "fp16", "int8"):
        out.append(f"dtype: expected fp32, fp16 or int8, got {manifest['dtype']!r:.40}")
    if "pooling" in manifest and manifest["pooling"] not in ("mean", "cls"):
        out.append(f"pooling: expected mean or cls, got {manifest['pooling']!r:.40}")
    return out


def verify_files(path: Path, manifest: Manifest) -> None:
    """Check every file of ``manifest["files"]`` against its sha256.

    Raises:
        BundleError: a file is missing or its sha256 differs (names the file).
    """
    files = manifest["files"]
    if not isinstance(files, dict) or not files:
        raise BundleError(f"bundle: {path / MANIFEST} lists no files; re-export the bundle")
    for graph in manifest["graphs"].values():
        if graph.get("file") not in files:
            raise BundleError(f"bundle {str(path)!r}: graph file {graph.get('file')!r} is not in the manifest's "
                              "sha256 list; re-export the bundle")
    if not (path / TOKENIZER_DIR).is_dir() or not any(f.startswith(TOKENIZER_DIR + "/") for f in files):
        raise BundleError(f"bundle: {str(path)!r} has no tokenizer (folder {TOKENIZER_DIR}/); re-export the "
                          "bundle, or copy the tokenizer files of the trained model there")
    for rel, digest in sorted(files.items()):
        f = path / rel
        if not f.is_file():
            what = "tokenizer file" if rel.startswith(TOKENIZER_DIR + "/") else "file"
            raise BundleError(f"bundle: {what} {rel!r} listed in the manifest is missing from {str(path)!r}; "
                              "the copy is incomplete: copy the whole bundle folder again or re-export")
        if sha256_file(f) != digest:
            raise BundleError(f"bundle {str(path)!r}: {rel!r} is corrupt or truncated (sha256 differs from the "
                              "manifest); copy the bundle again or re-export it")


def _pick_backend(backend: str, device: str, path: Path, manifest: dict[str, Any]) -> str:
    if backend not in ("auto", "onnx", "torch"):
        raise ConfigError(f"load_bundle: backend {backend!r} is not one of ['auto', 'onnx', 'torch']")
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"load_bundle: device {device!r} is not one of ['auto', 'cpu', 'cuda']")
    has_torch = (path / TORCH_DIR).is_dir()
    if backend == "torch":
        if not has_torch:
            raise BundleError(f"bundle: {str(path)!r} holds no torch weights (folder {TORCH_DIR}/); use "
                              "backend='onnx', or re-export with --torch-weights")
        return "torch"
    try:
        import onnxruntime as ort
    except ImportError:
        if backend == "onnx" or not has_torch:
            raise BundleError("load_bundle: onnxruntime is not installed (pip install onnxruntime, or "
                              "onnxruntime-gpu for CUDA)") from None
        return "torch"
    cuda_ep = "CUDAExecutionProvider" in ort.get_available_providers()
    if device == "cuda" and not cuda_ep:
        if backend == "auto" and has_torch:
            return "torch"
        raise BundleError("load_bundle: device='cuda' needs onnxruntime-gpu with a GPU (CUDAExecutionProvider "
                          "is not available); install onnxruntime-gpu, use device='cpu', or export with "
                          "--torch-weights and use backend='torch'")
    if cuda_ep and device in ("auto", "cuda"):
        return "onnx-cuda"
    return "onnx-cpu"


def _torch_graphs(path: Path, manifest: dict[str, Any], tokenizer: Any, device: str) -> dict[str, TorchGraph]:
    from searchsmith.models import onnx_graphs as og

    root = path / TORCH_DIR
    task = manifest["task"]
    if task == "embed":
        specs = og.embedder_graphs(root, tokenizer, manifest.get("pooling", "mean"))
    elif task == "rerank":
        specs = og.rerank_graphs(root, tokenizer)
    elif task == "cite":
        specs = og.cite_graphs(root, tokenizer)
    elif task == "decompose":
        specs = og.decompose_graphs(root, tokenizer)
    elif task == "read":
        specs = og.read_graphs(root, tokenizer)
    else:
        specs, _ = og.image_graphs(root)
    fp16 = manifest.get("dtype") == "fp16"
    return {name: TorchGraph(s.module, s.inputs, device, fp16) for name, s in specs.items()}


@overload
def load_bundle(path: str | os.PathLike, device: str = ..., backend: str = ..., threads: int | None = ..., *,
                task: Literal["embed"], allow_untrained: bool = ..., batch_size: int = ...,
                max_batch_tokens: int | None = ..., memory_arena: bool = ...) -> Embedder: ...
@overload
def load_bundle(path: str | os.PathLike, device: str = ..., backend: str = ..., threads: int | None = ..., *,
                task: Literal["rerank"], allow_untrained: bool = ..., batch_size: int = ...,
                max_batch_tokens: int | None = ..., memory_arena: bool = ...) -> Reranker: ...
@overload
def load_bundle(path: str | os.PathLike, device: str = ..., backend: str = ..., threads: int | None = ..., *,
                task: Literal["decompose"], allow_untrained: bool = ..., batch_size: int = ...,
                max_batch_tokens: int | None = ..., memory_arena: bool = ...) -> Decomposer: ...
@overload
def load_bundle(path: str | os.PathLike, device: str = ..., backend: str = ..., threads: int | None = ..., *,
                task: Literal["cite"], allow_untrained: bool = ..., batch_size: int = ...,
                max_batch_tokens: int | None = ..., memory_arena: bool = ...) -> Citer: ...
@overload
def load_bundle(path: str | os.PathLike, device: str = ..., backend: str = ..., threads: int | None = ..., *,
                task: Literal["read"], allow_untrained: bool = ..., batch_size: int = ...,
                max_batch_tokens: int | None = ..., memory_arena: bool = ...) -> Reader: ...
@overload
def load_bundle(path: str | os.PathLike, device: str = ..., backend: str = ..., threads: int | None = ..., *,
                task: Literal["images"], allow_untrained: bool = ..., batch_size: int = ...,
                max_batch_tokens: int | None = ..., memory_arena: bool = ...) -> ImageScorer: ...
@overload
def load_bundle(path: str | os.PathLike, device: str = ..., backend: str = ..., threads: int | None = ..., *,
                task: None = ..., allow_untrained: bool = ..., batch_size: int = ...,
                max_batch_tokens: int | None = ..., memory_arena: bool = ...) -> Bundle: ...
def load_bundle(path: str | os.PathLike, device: str = "auto", backend: str = "auto",
                threads: int | None = None, *, task: str | None = None, allow_untrained: bool = False,
                batch_size: int = 32, max_batch_tokens: int | None = None, memory_arena: bool = True) -> Bundle:
    """Verify a bundle and load it for inference.

    Args:
        path: the bundle folder (``searchsmith export ... --out``).
        task: the task the caller needs (``rerank``...): a bundle of another task is refused
            with the fix, and the return type is the role's Protocol (``models/roles.py``).
            None = any task.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        backend: ``auto`` (ONNX Runtime, torch only without onnxruntime), ``onnx`` or ``torch``.
        threads: intra-op threads (None = ONNX Runtime's / torch's default), at most
            :func:`max_threads` (4 x the machine's CPUs).
        allow_untrained: load a bundle whose model was never fine-tuned (benchmarks, tests).
        batch_size: most inputs per graph call.
        max_batch_tokens: padded tokens per graph call; None = the default for the device
            (``DEFAULT_BATCH_TOKENS``: 512 for ONNX Runtime on the CPU, 2048 for torch on the CPU, as
            the torch embedder, 16384 on CUDA).
        memory_arena: ONNX Runtime's CPU memory arena (off trades speed for a lower peak).

    Returns:
        A task bundle (``b.task`` says which): EmbedBundle, RerankBundle, DecomposeBundle,
        CiteBundle or ImagesBundle.

    Raises:
        BundleError: corrupt, incomplete, newer, untrained or unloadable bundle, or one of
            another task than ``task``.
        ConfigError: unknown device or backend; a batch_size, max_batch_tokens or threads
            that is not a positive int; threads above :func:`max_threads`.
    """
    from searchsmith.models.tokenizer import load_tokenizer

    for name, value, optional in (("batch_size", batch_size, False), ("max_batch_tokens", max_batch_tokens, True),
                                  ("threads", threads, True)):
        if optional and value is None:
            continue
        if not is_int(value, 1):
            raise ConfigError(f"load_bundle: {name} must be an int >= 1{' or None' if optional else ''}, "
                              f"got {value!r}")
    for name, flag in (("allow_untrained", allow_untrained), ("memory_arena", memory_arena)):
        if not isinstance(flag, bool):  # allow_untrained="no" is truthy: it let an untrained model through
            raise ConfigError(f"load_bundle: {name} must be True or False, got {flag!r:.40}")
    if task is not None and task not in TASK_NAMES:
        raise ConfigError(f"load_bundle: task must be one of {list(TASK_NAMES)} or None, got {task!r:.40}")
    over = threads_over_cap(threads, "load_bundle: threads")
    if over:
        raise ConfigError(over)
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise BundleError(f"bundle: expected the path of a bundle folder (a str or pathlib.Path), got {path!r:.60}")
    path = Path(path)
    manifest = read_manifest(path)
    if task is not None and manifest["task"] != task:
        from searchsmith.models.tasks import get

        raise BundleError(f"bundle: {str(path)!r} is a {manifest['task']!r} bundle, not the {get(task).name!r} "
                          f"bundle wanted here ({get(task).summary}); export one with: searchsmith export RUN_DIR "
                          "--out DIR")
    verify_files(path, manifest)
    if manifest["trained"] is not True and not allow_untrained:
        raise BundleError(f"bundle: {str(path)!r} holds a model that was never fine-tuned (trained_steps="
                          f"{manifest.get('trained_steps')}); it would serve noise. Train it (searchsmith train "
                          "RECIPE.yaml), export the run, and load that bundle")
    chosen = _pick_backend(backend, device, path, manifest)
    try:
        tokenizer = load_tokenizer(path / TOKENIZER_DIR)
    except (OSError, ValueError) as exc:
        raise BundleError(f"bundle: the tokenizer in {str(path / TOKENIZER_DIR)!r} does not load ({exc}); "
                          "re-export the bundle") from None
    if chosen == "torch":
        import torch

        dev = "cuda" if device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
        if threads:
            torch.set_num_threads(int(threads))
        graphs: dict[str, Any] = _torch_graphs(path, manifest, tokenizer, dev)
    else:
        providers: list[Any] = ["CPUExecutionProvider"]
        if chosen == "onnx-cuda":
            providers = [("CUDAExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"}),
                         "CPUExecutionProvider"]
        # int8 bundles from before the weight range was recorded have 8-bit weights
        int8_weights = ((manifest.get("int8") or {}).get("weight_range", "s8")
                        if manifest.get("dtype") == "int8" else None)
        graphs = {name: OrtGraph(path / g["file"], providers, threads, memory_arena, int8_weights)
                  for name, g in manifest["graphs"].items()}
        _say_int8_requantised(path, manifest, graphs)
    if max_batch_tokens is None:
        on_gpu = chosen == "onnx-cuda" or (chosen == "torch" and graphs_on_cuda(graphs))
        max_batch_tokens = DEFAULT_BATCH_TOKENS["cuda" if on_gpu else "torch-cpu" if chosen == "torch" else "onnx-cpu"]
    return BUNDLE_CLASSES[manifest["task"]](path, manifest, tokenizer, graphs, chosen, batch_size, max_batch_tokens)


def _say_int8_requantised(path: Path, manifest: dict[str, Any], graphs: dict[str, OrtGraph]) -> None:
    """One log line when loading re-quantised an int8 bundle's weights for this CPU."""
    done = sum(g.requantised for g in graphs.values())
    if done:
        from searchsmith.models.int8_cpu import int8_isa

        log.info("bundle %s: int8 weights exported full range (s8) on %s; this CPU (%s) has no VNNI, so %d "
                 "products were re-quantised to 7 bits in memory (their u8 x s8 sums would saturate). "
                 "Re-export the bundle on this machine for 7-bit weights quantised from fp32",
                 path.name, (manifest.get("int8") or {}).get("exported_on", "an unrecorded CPU"),
                 int8_isa() or "unknown", done)


def graphs_on_cuda(graphs: Mapping[str, Graph]) -> bool:
    """Whether torch graphs run on CUDA."""
    return any(getattr(getattr(g, "device", None), "type", None) == "cuda" for g in graphs.values())


__all__ = ["BUNDLE_CLASSES", "Bundle", "CiteBundle", "DecomposeBundle", "EmbedBundle", "FORMAT_VERSION",
           "ImagesBundle", "OrtGraph", "ReadBundle", "RerankBundle", "THREADS_PER_CPU", "TorchGraph", "load_bundle",
           "max_threads", "read_manifest", "threads_over_cap", "verify_files"]
