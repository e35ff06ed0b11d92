"""The pipeline's YAML config: one frozen dataclass per stage, loaded strictly.

Every paper threshold is a default here, never a literal in a stage:

* de-duplication at cosine >= 0.8 and keep the best 70 % of passages (Xinyu et al.);
* citation: embedding-cosine fallback at 0.6;
* timeline: near-duplicate events merged at cosine 0.9;
* images: Hungarian assignment kept at relevance >= 0.3;
* chunks of 350 tokens with 25 % overlap are the index's (``searchsmith index``).

Every model bundle is optional (``bundles.*: null``): without one the stage uses its
offline fallback, so the pipeline runs with an index alone. Load with
:func:`load_pipeline_config` (``searchsmith ask --config FILE key.sub=value``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from searchsmith.models.config import check_count, check_number, is_int, is_number, load_config
from searchsmith.models.runtime import threads_over_cap
from searchsmith.serving.index import MAX_TITLED
from searchsmith.serving.router import RouterConfig

MAX_RETRIEVE_K = 1000  # chunks one node may retrieve (each is reranked, deduplicated and read for citations)

Strategy = Literal["auto", "direct", "parallel", "planning"]
STRATEGIES = ("direct", "parallel", "planning")

#: A cosine threshold above 1 is reached by no cosine: ``searchsmith eval ablate`` switches the
#: citation fallback and the timeline merge off with 1.01 (serving/ablation.py). Larger values
#: are refused as typos (2 for 0.2).
COSINE_OFF = 1.01


@dataclass(frozen=True)
class BundlesConfig:
    """Model bundles from ``searchsmith export`` (loaded with ``models.runtime.load_bundle``).

    Attributes:
        embedder: ``embed`` bundle that embeds questions and sentences in place of the index's
            torch embedder (a cold ``searchsmith ask`` then needs no torch). It must be exported
            from the index's embedding model; an fp32 bundle gives the same vectors.
        decomposer: ``decompose`` bundle: conversation rewrite and the QDG.
        reranker: ``rerank`` bundle; without one the retrieval order is kept.
        citation: ``cite`` bundle; without one, embedding cosine attributes sentences.
        images: ``images`` bundle; without one, captions are compared with paragraphs.
        reader: ``read`` bundle (extractive QA): with ``generation.backend: auto`` (the
            default) or ``reader`` the answer is its short answer and the sentence supporting
            it; it is also the answer an LLM backend falls back to. Without one, the extractive
            generator's sentences.
        device: ``auto`` = CUDA when available.
        backend: ``auto`` = ONNX when the bundle has it.
        threads: intra-op threads per bundle (None = the runtime's default), 1 to
            ``models.runtime.max_threads()`` (4 x the machine's CPUs: more only contend).
        gate_rewrite: use the decomposer's rewrites only when the retrieval they drive
            (held-out nDCG@10 of each turn's answer passage) beats the heuristic rewrite's and
            the raw query's (the heuristic rewrite is used instead).
        gate_decompose: skip the decomposer's graphs when its recorded held-out node-text F1
            is below keeping the question as one terminal node (the question is used as is).
        gate_rerank: skip the reranker unless its recorded held-out nDCG@10 beats the
            bi-encoder order (and BM25 when recorded); the retrieval order is kept instead.
        gate_cite: skip the citation model unless its held-out attribution ROC AUC and F1
            beat cosine attribution's; the cosine fallback cites instead.
        gate_images: place images that carry a caption with the image model's mix only when
            its placement accuracy on held-out photos beats caption-cosine placement's;
            otherwise their captions are compared with the paragraphs (the default).
        gate_vision: place images without a caption by the image model's vision tower only
            when, on held-out photos with captions hidden, it places more of them right than
            wrong (leaving them out scores 0); otherwise they are left out.
        gate_read: skip the reader unless its held-out answer F1 beats the extractive
            stand-in's (the context sentence closest to the question); sentences answer instead.

    Every gate (serving/pipeline/gates.py) needs the bundle to beat its baseline, a tie is
    not enough, and a bundle that records no held-out figure is skipped too.
    """

    embedder: str | None = None
    decomposer: str | None = None
    reranker: str | None = None
    citation: str | None = None
    images: str | None = None
    reader: str | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: Literal["auto", "onnx", "torch"] = "auto"
    threads: int | None = None
    # Use the decomposer's rewrite only when the retrieval its held-out rewrites drive beats the
    # heuristic rewrite's (serving/pipeline/gates.py).
    gate_rewrite: bool = True
    # Likewise its graphs, against the question as one node.
    gate_decompose: bool = True
    # The reranker against the bi-encoder order, the citation model against cosine
    # attribution, the image model against caption-cosine placement (gates.py: GATES).
    gate_rerank: bool = True
    gate_cite: bool = True
    gate_images: bool = True
    gate_vision: bool = True
    gate_read: bool = True

    def __post_init__(self) -> None:
        # load_bundle checks the same cap, but only once the server's port is open; a huge
        # count hung model loading (ONNX Runtime starts every thread)
        check_count("bundles.threads", self.threads, optional="the runtime's default")
        over = threads_over_cap(self.threads, "bundles.threads")
        if over:
            raise ValueError(over)


@dataclass(frozen=True)
class RoutingConfig:
    """Attributes:
        enabled: False searches every source of the index.
        router: the centroid router's settings (mode serial / parallel / auto, top_k, ...).
    """

    enabled: bool = True
    router: RouterConfig = field(default_factory=RouterConfig)


@dataclass(frozen=True)
class DecompositionConfig:
    """Attributes:
        strategy: ``auto`` = from the graph's type (terminal -> direct, split -> parallel,
            chain -> ``chain_strategy``, after SRSA); any other value forces that strategy.
        chain_strategy: what ``auto`` does with a chain: ``planning`` (SRSA: a child's ``#k``
            filled with its parents' answers, the passages filtered and compressed after each
            round), ``parallel`` (every step searched at once, a child's ``#k`` filled as
            ``parallel_fill`` says, nothing filtered), or ``auto``: planning when the parents get the generator's
            short answers (a reader bundle in use or an LLM backend, with
            ``generation.step_answers: generator``), parallel otherwise. The default is ``parallel``: on unseen multi-hop questions planning lost
            retrieval recall both with sentences (0.647 vs 0.734, 196 questions) and with the
            reader's short answers (0.630 vs 0.715, 43 questions; serving/profiling/RESULTS.md,
            "Strategies with the new decomposer"). An LLM's answers were not measured.
        max_nodes: cap on sub-questions (each one costs a retrieval).
        max_rounds: cap on planning rounds (dependency levels); deeper nodes are dropped.
        parallel_workers: threads retrieving independent nodes concurrently.
        names_fill_with_text: a parent step that only names what it refers to (a noun phrase
            with no relation in it: "the Lumen Cloud outage", "Harbor & Finch";
            ``models.qdg.names_itself``) fills its children's ``#k`` with its own text, and is
            not answered: Break's ``select`` step returns the thing it names, and the answer
            looked up for it was what its best sentence adds ("July 2024", so the child asked
            "When did July 2024 happen?"). False: every parent step is answered.
        parallel_fill: what fills a child's ``#k`` under ``parallel``: ``text``, its parent
            step's own words ("When was #1 acquired?" under "the company that makes Beacon" is
            searched as "When was the company that makes Beacon acquired?"), so every step is
            searched at once; ``both``, that, then each child searched again with its parents'
            answers in place, those passages joining the context (more retrieval, one more
            search round); ``answer``, the parent's answer as ``planning`` fills it, the levels
            searched in turn. ``text`` is the default: an extractive step answer is the names
            its best sentence adds, and a wrong one ("Beacon 2.4.1 March 4, 2025 2.4") sent the
            child after it. Measured with the full profile (serving/profiling/RESULTS.md, "A
            chain's steps searched at once"): routed answer F1 on the demo 0.911 -> 0.972
            (forced ``direct`` 0.972), on the multi-hop set 0.387 -> 0.391, citation precision up
            on both, retrieval recall on the multi-hop set 0.875 -> 0.850 (``both``: 0.887 at the
            same answers, routed p50 +55 ms and 22 % more context).
        restate_empty_steps: a final step with no word of its own besides its ``#k`` ("of #1",
            "Which #2": the decomposer lost the question's words), or one that only compares or
            counts them (Break's "which is first of #1, #2", "number of #1"), is searched and
            answered as the question; its parents are still searched first. False: searched as
            it is.
    """

    strategy: Strategy = "auto"
    chain_strategy: Literal["auto", "planning", "parallel"] = "parallel"
    max_nodes: int = 4
    max_rounds: int = 3
    parallel_workers: int = 4
    names_fill_with_text: bool = True
    parallel_fill: Literal["text", "both", "answer"] = "text"
    restate_empty_steps: bool = True

    def __post_init__(self) -> None:
        if self.parallel_fill not in ("text", "both", "answer"):
            raise ValueError(f"decomposition.parallel_fill must be 'text', 'both' or 'answer', "
                             f"got {self.parallel_fill!r}")
        for name in ("max_nodes", "max_rounds", "parallel_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"decomposition.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class RetrievalConfig:
    """Attributes:
        retrieve_k: chunks retrieved per node (over all routed sources, merged by score).
        dedup_threshold: drop a chunk whose cosine with a better-ranked kept one is >= this.
        keep_ratio: share of the de-duplicated chunks kept (the best by retrieval score).
        min_keep: never keep fewer than this many chunks (when there are that many).
        compress_sentences: planning: after each round an accumulated passage is cut to
            its this-many sentences most similar to the question and the answers so far.
        edge_order: order the passages "lost in the middle" (the strongest at both ends);
            False keeps them best first (the ablation of ``searchsmith eval ablate``).
        titled_k: chunks a lookup by title returns (the passages of a bridge the answer's
            sentences name, ``generation.extractive.bridge_lookup``).
        lexical_weight: hybrid search: the weight of the BM25 score (over the chunks' titles
            and texts, ``Index.lexical``) added to the cosine. A node's candidates are the
            dense top ``retrieve_k`` and the lexical top ``lexical_k``; each scores
            ``cosine + lexical_weight * share``, where the share is its BM25 divided by the
            query's ceiling (the sum of the query terms' idf), capped at 1, and the best
            ``retrieve_k`` are kept (the passages' ``score``). 0 = dense search only; an index
            built before the full-text table searches dense only, with a note in the trace.
        lexical_k: chunks the lexical search adds as candidates; None = this section's
            ``retrieve_k`` (a preset's own ``retrieve_k`` limits the hits kept, not this pool).
        lexical_min_cosine: a candidate whose cosine with the question is below this gains
            nothing from the BM25 share (a rare word shared with a chunk the embedder finds
            unrelated is no evidence: "What is the boiling point of ethanol?" and a recipe tip
            on boiling miso, which the answer would otherwise quote).
        spelling: a word of the question typed in lower case, of ``spelling_min_chars``
            letters or more, that no chunk of the index holds is read as the word of the
            chunks' titles one edit away that most titles hold ("wich port does qaurry use": "quarry";
            ``Index.spelled``), for every stage; the answer's ``rewrite`` shows the question
            as read and the trace names each correction. A word with a capital is kept (a
            name the index lacks). Off: the question as typed.
        spelling_min_chars: the shortest word ``spelling`` corrects (shorter words are one
            edit from too many others).
    """

    retrieve_k: int = 10
    dedup_threshold: float = 0.8
    keep_ratio: float = 0.7
    min_keep: int = 2
    compress_sentences: int = 4
    edge_order: bool = True
    titled_k: int = 3
    lexical_weight: float = 0.3
    lexical_k: int | None = None
    lexical_min_cosine: float = 0.3
    spelling: bool = True
    spelling_min_chars: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.spelling, bool):
            raise ValueError(f"retrieval.spelling must be true or false, got {self.spelling!r}")
        if not is_int(self.spelling_min_chars, 3) or self.spelling_min_chars > 40:
            raise ValueError(f"retrieval.spelling_min_chars must be a whole number in [3, 40] (the shortest word "
                             f"corrected), got {self.spelling_min_chars!r}")
        w = self.lexical_weight
        if not is_number(w) or not 0.0 <= w <= 10.0:
            raise ValueError(f"retrieval.lexical_weight must be a number in [0, 10] (0 = dense search only), got {w!r}")
        m = self.lexical_min_cosine
        if not is_number(m) or not -1.0 <= m <= 1.0:
            raise ValueError(f"retrieval.lexical_min_cosine must be a cosine in [-1, 1], got {m!r}")
        if self.lexical_k is not None and not is_int(self.lexical_k, 1):
            raise ValueError(f"retrieval.lexical_k must be a whole number >= 1 or null (= retrieve_k), "
                             f"got {self.lexical_k!r}")
        if not is_int(self.titled_k, 1) or self.titled_k > MAX_TITLED:
            raise ValueError(f"retrieval.titled_k must be a whole number in [1, {MAX_TITLED}], got {self.titled_k!r}")
        if not is_int(self.retrieve_k, 1) or self.retrieve_k > MAX_RETRIEVE_K:  # 10**11 was taken: 10 s per question, 9 of them citing
            raise ValueError(f"retrieval.retrieve_k must be in [1, {MAX_RETRIEVE_K}], got {self.retrieve_k}")
        if self.lexical_k is not None and self.lexical_k > MAX_RETRIEVE_K:
            raise ValueError(f"retrieval.lexical_k must be at most {MAX_RETRIEVE_K}, got {self.lexical_k}")
        if not 0.0 < self.dedup_threshold <= 1.0:
            raise ValueError(f"retrieval.dedup_threshold must be in (0, 1], got {self.dedup_threshold}")
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError(f"retrieval.keep_ratio must be in (0, 1], got {self.keep_ratio}")
        check_count("retrieval.min_keep", self.min_keep, note=" (chunks kept at least)")
        check_count("retrieval.compress_sentences", self.compress_sentences,
                    note=" (sentences an accumulated passage is cut to)")


@dataclass(frozen=True)
class ExtractiveConfig:
    """Attributes:
        sentences_per_node: at most this many sentences selected per sub-question.
        min_support: a sentence below this support score is not selected (unless it is the
            best one: the answer is never empty while there is a passage).
        min_relative_score: after the best sentence, the next ones are kept only while their
            support stays >= this share of the best one's; the first that falls below ends
            the node's answer (no unrelated tail after the sentence that answers).
        lexical_weight: weight of the query-term overlap next to the embedding cosine.
        title_words: the query-term overlap of a sentence counts its passage's title too: a
            sentence is read in its passage ("Clients saw `KST-502` errors ..." answers a
            question about the Kestrel Cloud outage in the passage titled with it, and the same
            sentence about Quarry does not).
        max_sentences: sentences considered per node (the best passages' first).
        figure_sentences: a sentence past ``max_sentences`` that holds every figure of the
            question (``models.text.figures``: "165" of "the planet that takes 165 Earth years
            to orbit the Sun") is considered too: a long passage ranked low can hold the one
            sentence that states it. False: ``max_sentences`` alone.
        node_answer: a sub-question's extractive answer, the text that fills its children's
            ``#k`` in a chain: ``span`` (the date, number or name of its best sentence that the
            sub-question asks for, ``models.text.typed_span``; a phrase step asks for what it
            describes; ``names`` when the sentence has none), ``names`` (the names, dates and
            numbers of its best sentence that the sub-question does not mention, at most
            ``node_answer_names`` of them; the whole sentence when it has none) or ``sentence``
            (the best sentence).
        node_answer_names: most names a ``names`` answer keeps (the sentence's first).
        short_answer: lead the answer with the short answer its sentences hold, the date,
            number or name the question asks for (``models.text.typed_span``), and fill
            ``short_answer`` and ``support`` as the reader does; off: the sentences alone.
        no_span_no_answer: (with ``short_answer``) a question asking for a date, number or
            name (``models.text.answer_kind``) whose passages hold none of that kind, and whose
            best sentences do not say what it asks (the relation, ``models.text.asked_relation``,
            or most of its words but names), gets ``no_answer_text``, not sentences that do not
            answer it ("What is the boiling point of water?" answered with two sentences on
            boiling miso); off: the sentences alone, as for any question.
        compare: (with ``short_answer``) a question that compares named things is answered by
            what their passages say (``models.choice``): one that offers its answers ("Which
            film came out first, A or B?") by the option they favour (the earlier date, the
            larger count, the question's own words), a yes / no question about two of them
            ("Were A and B from the same country?", "Are A and B both American writers?") by
            "yes" or "no", one on what two share ("What profession did A and B both hold?") by
            the words both are described with; supported by each one's sentence, and before the
            reader's answer too. Off, or when the passages do not decide: as any question.
        bridge: (with ``short_answer``) a question asking for a date, number or name whose best
            sentence leaves some of its words unanswered ("born"), and whose best sentences name
            another passage's subject ("X is a film directed by Mark Steven Johnson", beside a
            passage titled "Mark Steven Johnson"), is answered from that passage, the bridge
            (``models.bridge``; not ``chain_support``'s, a chain step's own sentence): by the bridge itself when the question asks
            for a type its first sentence says it is ("what city ...?", "Rockland is a city
            ..."), else by the span its best sentences hold; the sentence naming the bridge and
            the one holding the answer lead the support. Off: the best sentences' span alone.
        bridge_sentences: how many of the best sentences may name the bridge (the first that
            does is taken).
        bridge_cued_sentences: how deep among the best sentences one stating the relation the
            question asks (``models.text.relation_cues``: "developed by Calloway Data" for "the
            maker of Marlowe") is sought: up to ``bridge_sentences`` of them are tried first.
        bridge_own: for a "Who ...?" question, when none of those sentences leads to a bridge,
            the best sentence's own passage is one if the sentence names its subject and the
            question does not ("One
            orbit of the Sun takes Neptune 165 Earth years" for "Who discovered the planet that
            takes 165 Earth years ...?": the passage on Neptune says who discovered it).
        bridge_how: a question asking how to do something to a thing it describes ("How do you
            fix the error that clients saw during the Lumen Cloud outage?") goes through a bridge
            too: the name the best sentence gives the thing (`LUM-310`), its passages read for
            "How do you fix LUM-310?", and their best sentence stating the asked verb ("To fix
            it, raise snapshot.interval_s ...") follows the one naming the bridge at the head of
            the answer. No short answer: a way of doing something is a sentence.
        how_own: a question asking how to do something to a thing it names ("How do I fix
            FRW-118?") is answered from that thing's own page: among the
            ``bridge_cued_sentences`` best, the first stating the asked verb in a passage titled
            with one of the question's names ("To fix it, let the client refresh its metadata"
            on "Troubleshooting FRW-118: ...") leads the answer, after its passage's sentence
            naming the thing, when the best sentence is another (the news "Clients saw
            `FRW-118` errors ..." names the code too). Off: the best sentences, as ranked.
        own_description: a question asking for a description of a thing it names ("What does
            KST-429 mean?", :func:`models.text.asks_description`) is led by the best of the
            ``bridge_cued_sentences`` best sentences that names it in a passage titled with it
            ("Kestrel reports `KST-429 rate limit exceeded` when ..." on "Troubleshooting
            KST-429: ..."), when the best sentence's passage is not titled with it (the source
            notes' "Kestrel's error codes (KST-429 and KST-502) are defined in ..."). Off: the
            best sentences, as ranked.
        announced_steps: a sentence answering a question that asks how to do something, and
            announcing the ways or steps that follow it ("There are two supported ways to
            install Lumen."), is followed by up to this many of its passage's next sentences
            ("With a container: `docker run ...`", "From a package: `pip install lumen-cache`",
            ...): quoted alone it promises what the answer does not give. 0: alone.
        labelled_lines: a question asking a description by a noun ("What are the requirements
            for running Tidewater?") is answered first by a line labelled with that noun
            ("Requirements: a PostgreSQL 13 or newer database ...") of a passage the answer
            already quotes, wherever the cosine ranks it.
        bridge_lookup: when no retrieved passage is a bridge, look the names of those
            sentences up in the index by title (``retrieval.titled_k`` chunks of the document
            titled with the name, in the routed sources): the passage about the director a
            film's sentence names is rarely retrieved for a question about the film. The
            passages found join the answer's, to be cited.
        bridge_names: names of each sentence looked up (its first, the question's own left out;
            4: "... located in Commerce City, Colorado that is home to the Colorado Rapids" names
            the team fourth).
        bridge_search: when no passage is titled with those names, search the index for the
            name the sentence gives the question (its span: "Amy Poehler" in "... the mother
            of Leslie Knope (Amy Poehler) ...") with the question's words the sentence leaves
            unanswered ("Amy Poehler spouse actress"), and take the passages found that
            mention the name, other than the sentence's own, as the bridge's: the second hop of
            a question the first passage answers only half of is rarely titled with its subject.
        bridge_search_k: passages that search returns (in the routed sources).
        relation_search: (with ``short_answer``) a question asking for a date, number or name by
            a relation (``models.text.asked_relation``: "Who makes Ferrow?") whose selected
            sentences state none of it, retrieval having missed the page that does ("Ferrow is a
            message broker developed by Calloway Data"), searches every source of the index
            (routed or not) for the question's
            names with the relation's words ("Ferrow make made maker developed ...",
            ``bridge_search_k`` passages): the span of their best sentence stating the relation
            about one of those names answers, cited with the passage found. Off: "no answer"
            (``no_span_no_answer``).
        typed_sentences: when a question asking for a type a name shows by itself (a country,
            a county, a river: ``models.text.asks_shown_type``) gets a short answer that is not
            of it ("Andre Geim" for "... in what country?"), the span of that type in this
            many of the step's best sentences answers instead ("National University of
            Singapore" -> "Singapore"; ``models.text.typed_span`` with ``typed``). Measured for
            every asked type and not kept: most names show their type only in their sentence
            ("the play Cymbeline").
        measure_sentences: the same for a question asking for a figure of a dimension or a
            setting's default (``models.text.asked_measure``: "At what temperature ...?", "How
            long ...?", "Which port ...?", "What is the default value of ...?"), also when the
            selected sentences hold no span at all, in this many of the step's best sentences:
            a unit, a port or a stated default rarely answers wrongly, and the sentence that
            states it ("Default: `300`.") is often short and ranks low.
        named_settings: a question naming a setting by its words alone ("lumen snapshot
            interval", "What is the Lumen snapshot interval?", for the page titled "Configuring
            Lumen: snapshot.interval_s" among its ``measure_sentences`` best sentences;
            ``models.text.setting_asked``) asks for its default value: it is answered as "What
            is the default value of snapshot.interval_s?" ("300", from "Default: `300`."), not
            by a figure of another page ("3 hours" of an outage). A question saying more
            ("What is the maximum snapshot interval?") is not. So is a question asking a
            default in the words of a setting page's description ("How many brokers keep a copy
            of each partition by default?": replication.factor; ``models.text.setting_described``),
            and either is read on the setting's own page.
        short_support: (with ``short_answer``) which selected sentences support a short answer:
            ``selected``, every sentence selected for the question, or ``holding``, those that
            hold it (with the sentences it was reached through: a chain's steps, a bridge's
            link). ``holding`` (the default since 2026-12-05, evening) gives shorter answers
            with fewer citations of passages the answer did not come from, and loses the
            sentence that holds the right answer when the short answer is wrong: citation
            precision up beyond the noise on the demo and full-profile multi-hop questions
            (0.550 -> 0.706, 0.598 -> 0.627), recall and contains-the-answer down inside it
            (serving/profiling/RESULTS.md, "Short answers of the asked type"; earlier, "Relation
            words, places and the short answer's citation").
        question: where the extractive short answer is read when the question was decomposed
            (as ``generation.reader.question``): ``user``, from the user's question (the
            rewrite) over the passages of every step, with its bridges (the steps serve
            retrieval; the support is still the final steps' sentences, led by the ones the
            short answer was read in); ``steps``, from each final step over its own passages,
            the short answers joined. ``user`` measured better on unseen multi-hop questions
            (answer F1 0.251 -> 0.296 on the full profile; serving/profiling/RESULTS.md, "Short
            answers of the asked type").
    """

    sentences_per_node: int = 2
    min_support: float = 0.35
    min_relative_score: float = 0.85
    lexical_weight: float = 0.5
    title_words: bool = True
    max_sentences: int = 40
    figure_sentences: bool = True
    node_answer: Literal["span", "names", "sentence"] = "names"
    node_answer_names: int = 3
    short_answer: bool = True
    no_span_no_answer: bool = True
    compare: bool = True
    bridge: bool = True
    bridge_sentences: int = 3
    bridge_cued_sentences: int = 10
    bridge_own: bool = True
    bridge_how: bool = True
    how_own: bool = True
    own_description: bool = True
    announced_steps: int = 4
    labelled_lines: bool = True
    typed_sentences: int = 5
    measure_sentences: int = 20
    named_settings: bool = True
    bridge_lookup: bool = True
    bridge_names: int = 4
    bridge_search: bool = True
    bridge_search_k: int = 3
    relation_search: bool = True
    short_support: Literal["selected", "holding"] = "holding"
    question: Literal["user", "steps"] = "user"

    def __post_init__(self) -> None:
        if self.question not in ("user", "steps"):
            raise ValueError(f"generation.extractive.question must be 'user' or 'steps', got {self.question!r}")
        if self.short_support not in ("holding", "selected"):
            raise ValueError(f"generation.extractive.short_support must be 'holding' or 'selected', "
                             f"got {self.short_support!r}")
        if not is_int(self.announced_steps, 0):
            raise ValueError(f"generation.extractive.announced_steps must be a whole number >= 0 (0: the "
                             f"announcing sentence alone), got {self.announced_steps!r}")
        for key in ("bridge_sentences", "bridge_cued_sentences", "bridge_names", "bridge_search_k", "typed_sentences", "measure_sentences"):
            value = getattr(self, key)
            if not is_int(value, 1):
                raise ValueError(f"generation.extractive.{key} must be a whole number >= 1, got {value!r}")
        if self.sentences_per_node < 1 or self.max_sentences < 1:
            raise ValueError("generation.extractive.sentences_per_node and max_sentences must be >= 1, got "
                             f"{self.sentences_per_node} and {self.max_sentences}")
        if self.node_answer not in ("span", "names", "sentence"):
            raise ValueError(f"generation.extractive.node_answer must be 'span', 'names' or 'sentence', "
                             f"got {self.node_answer!r}")
        if not is_int(self.node_answer_names, 1):
            raise ValueError(f"generation.extractive.node_answer_names must be a whole number >= 1, "
                             f"got {self.node_answer_names!r}")
        if not 0.0 <= self.min_relative_score <= 1.0:
            raise ValueError(f"generation.extractive.min_relative_score must be in [0, 1] (a share of the "
                             f"best sentence's support), got {self.min_relative_score}")
        # support = cosine + lexical_weight x overlap share: in [-1, 1 + lexical_weight]
        check_number("generation.extractive.lexical_weight", self.lexical_weight, 0.0, 10.0,
                      note=" (0 = the cosine alone)")
        check_number("generation.extractive.min_support", self.min_support, -1.0, 1.0 + self.lexical_weight,
                      note=" (a support score: cosine + lexical_weight x word overlap)")


@dataclass(frozen=True)
class OpenAIConfig:
    """Any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, llama.cpp, TGI, hosted).

    Attributes:
        base_url: e.g. ``http://localhost:8000/v1``.
        model: the model name the server expects.
        api_key_env: environment variable holding the key (never the key itself).
        timeout_s: deadline of one answer, retries included: past it the call gives up
            (RunnerError, so the extractive answer is used), however the server behaves.
        connect_timeout_s: to open the TCP connection (a server that is down fails fast).
        first_token_timeout_s: from sending the request to the first token of the answer
            (prompt processing: it grows with the passages' length on a CPU server).
        retries: extra attempts after a connection error or a 5xx status, only while no
            token has arrived (a half-streamed answer is never repeated).
        retry_backoff_s: wait before the first retry, doubled before each next one.
        max_tokens: most tokens the LLM may write per answer.
        temperature: sampling temperature, 0 to 2 (the OpenAI API's range; 0 = greedy,
            reproducible answers).
        stream: stream the answer token by token (server-sent events); False waits for
            the whole answer (the first-token timeout then covers all of it).
        stop: the server ends the answer at the first of these strings (the API's ``stop``),
            e.g. ``["\\nQuestion:"]`` for a base model that would write the next question.
    """

    base_url: str = "http://localhost:8000/v1"
    model: str = "default"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float = 30.0
    retries: int = 1
    retry_backoff_s: float = 0.5
    max_tokens: int = 512
    temperature: float = 0.0
    stream: bool = True
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("timeout_s", "connect_timeout_s", "first_token_timeout_s"):
            if not 0.0 < getattr(self, name) < float("inf"):
                raise ValueError(f"generation.openai.{name} must be a finite number of seconds > 0, "
                                 f"got {getattr(self, name)}")
        if self.retries < 0 or self.retry_backoff_s < 0:
            raise ValueError(f"generation.openai: retries and retry_backoff_s must be >= 0, got "
                             f"{self.retries} and {self.retry_backoff_s}")
        check_number("generation.openai.retry_backoff_s", self.retry_backoff_s, 0.0, note=" (seconds)")
        check_count("generation.openai.max_tokens", self.max_tokens)
        check_number("generation.openai.temperature", self.temperature, 0.0, 2.0,
                      note=" (the OpenAI API's range; 0 = greedy)")


@dataclass(frozen=True)
class HFConfig:
    """A local transformers causal LM (folder or hub id; offline on our machines).

    Attributes:
        model: folder or hub id of the causal LM ('' = none configured: the backend refuses).
        max_new_tokens: most tokens generated per answer.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        max_input_tokens: the prompt is cut to this many tokens (passages first).
        stop: generation ends at the first of these strings, which is cut from the answer
            (e.g. ``["\\n\\nQuestion:"]`` for a base model that would write the next question).
    """

    model: str = ""
    max_new_tokens: int = 256
    device: str = "auto"
    max_input_tokens: int = 2048
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"generation.hf.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        check_count("generation.hf.max_input_tokens", self.max_input_tokens)
        if any(not s for s in self.stop):
            raise ValueError("generation.hf.stop: an empty string would stop before the first token")


@dataclass(frozen=True)
class ReaderGenConfig:
    """How the ``read`` bundle (``bundles.reader``) answers.

    Attributes:
        min_score: below this reader score (``1 - P(no answer)`` of the window it answers
            from) the node has no answer; when no final node has one, the answer is
            ``no_answer_text`` ("it does not know" instead of guessing). None: the threshold
            the reader was trained with (its bundle's ``no_answer_threshold``).
        max_passages: passages read per sub-question, the best-scored first.
        read: how the answer's passage is chosen among them. ``in_order``: each passage is
            read alone and the first, in the ranking's order, whose answer reaches
            ``min_score`` answers (the ranker chooses where to look, the reader what to
            quote); ``together``: the passages are read joined, in overlapping windows, and
            the reader's most answerable window answers.
        question: what the reader answers when the question was decomposed. ``user``: the
            user's question (the rewrite) over the passages of every step, best first (the
            steps serve retrieval, as an LLM's prompt has the question and every passage);
            ``steps``: each final step over its own passages, the answers joined.
        support_sentences: passage sentences quoted after the short answer (the one holding
            the span first).
    """

    min_score: float | None = None
    max_passages: int = 6
    read: Literal["in_order", "together"] = "in_order"
    question: Literal["user", "steps"] = "user"
    support_sentences: int = 1

    def __post_init__(self) -> None:
        if self.question not in ("user", "steps"):
            raise ValueError(f"generation.reader.question must be 'user' or 'steps', got {self.question!r}")
        if self.read not in ("in_order", "together"):
            raise ValueError(f"generation.reader.read must be 'in_order' or 'together', got {self.read!r}")
        if self.min_score is not None and not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"generation.reader.min_score must be in [0, 1] (or null: the bundle's own), "
                             f"got {self.min_score}")
        if self.max_passages < 1 or self.support_sentences < 1:
            raise ValueError("generation.reader.max_passages and support_sentences must be >= 1, got "
                             f"{self.max_passages} and {self.support_sentences}")


@dataclass(frozen=True)
class GenerationConfig:
    """Attributes:
        backend: ``auto`` (the default: the reader when ``bundles.reader`` is configured and
            passes its gate, else ``extractive``), ``reader``, ``extractive`` (offline, no
            model), ``openai`` or ``hf``. An LLM backend that fails falls back to the reader's
            answer when there is a reader, else to the extractive one.
        prompt: file name under ``serving/pipeline/prompts/`` or a path.
        node_prompt: the prompt for the answer of one sub-question (parallel and planning
            strategies), as ``prompt``.
        fallback_extractive: when an LLM backend fails, answer extractively (noted in the trace).
        max_context_chars: passage text given to an LLM per answer.
        no_answer_threshold: when the best sentence support (the extractive score: cosine +
            lexical overlap with the question) over the final sub-questions' passages is below
            this, the answer is ``no_answer_text``, cites nothing and has no timeline; the
            trace records the score and the threshold. None never refuses. The support is in
            [-1, 1 + ``extractive.lexical_weight``]; a threshold past that range is refused
            (it would refuse every question). The default was
            measured on the demo (its 42 questions answered, out-of-KB questions refused).
        no_answer_missing_names: also "not found" when a name of the user's question (a
            capitalised run such as "Redis" or "Mona Lisa", an identifier such as
            ``index.ef_construction``) is mentioned by no retrieved passage: similar passages
            about something else ("By default the server listens on port 9464" for Redis's
            port) score high, but the sources do not cover the question.
        no_answer_off_subject: (the extractive answer) also "not found" when the user's question
            names something and no passage the answer's sentences came from mentions any of its
            names (:meth:`GenerationStage.off_subject`): the best sentences are about another
            thing ("the 2 hours Quarry Cloud outage" for "How long did the Atlasgrid Cloud
            outage last?"). A bridge's sentence counts: the passage that names the bridge
            mentions the question's name.
        on_subject: (the extractive answer) when the best sentence's passage is off the
            subject (as ``no_answer_off_subject`` reads it) and a retrieved passage mentions
            the question's names, the sentences of such passages answer, if the best of them
            keeps ``no_answer_threshold``: "On 17 March 2025, Tidewater Cloud customers in
            eu-central lost service" for "Which region was hit by the Tidewater Cloud outage?",
            where another outage's sentence scored higher (:meth:`GenerationStage.on_subject`).
            One-step questions only; false: the best sentence answers, or nothing.
        no_answer_unnamed: (the extractive answer) also "not found" when the user's question
            names two things or more and no passage the answer's sentences came from (a
            bridge's too) mentions one of them, nor does a passage naming it link it to the
            answer (:meth:`GenerationStage.unnamed`): the answer is about the others only
            ("flying past it in January 1986", on Uranus's page, for "When did Voyager 2 fly
            past Jupiter?").
        no_answer_unrelated: (the extractive answer) also "not found" when the question was
            not decomposed and the sentences of the answer, with the titles of their passages,
            hold no content word of it (the words of the measure it asks aside:
            :meth:`GenerationStage.unrelated`): they rank high by the embedding alone ("a day
            on Jupiter lasts about 9 hours and 56 minutes" for "How long do honeybees live?").
        no_answer_text: the answer given when the sources do not support one.
        step_answers: how a step whose answer fills later steps' ``#k`` is answered:
            ``names``, the names, dates and numbers its best sentence adds
            (``extractive.node_answer``, no model); ``generator``, the LLM's or the reader's
            short answer (the extractive one without either). With the reader, names retrieved
            more of the supporting paragraphs at the same answer F1 (serving/profiling/RESULTS.md,
            "Multi-hop answers"); an LLM's step answers were not measured.
        chain_support: in a chain (a step whose answer fills a later step's ``#k``), the answer
            also quotes, before the final steps' sentences, the sentence each earlier step was
            answered from (the bridge), so it cites the passage of every hop; false: only the
            final steps' sentences.
        reader: how the reader answers (:class:`ReaderGenConfig`).
    """

    backend: Literal["auto", "reader", "extractive", "openai", "hf"] = "auto"
    prompt: str = "answer.txt"
    node_prompt: str = "node_answer.txt"
    fallback_extractive: bool = True
    max_context_chars: int = 12000
    no_answer_threshold: float | None = 0.5
    no_answer_missing_names: bool = True
    no_answer_off_subject: bool = True
    on_subject: bool = True
    no_answer_unnamed: bool = True
    no_answer_unrelated: bool = True
    no_answer_text: str = "No answer found in the sources."
    step_answers: Literal["names", "generator"] = "names"
    chain_support: bool = True
    reader: ReaderGenConfig = field(default_factory=ReaderGenConfig)
    extractive: ExtractiveConfig = field(default_factory=ExtractiveConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    hf: HFConfig = field(default_factory=HFConfig)

    def __post_init__(self) -> None:
        check_count("generation.max_context_chars", self.max_context_chars, note=" (characters of passage text)")
        if self.no_answer_threshold is not None:
            top = 1.0 + self.extractive.lexical_weight
            check_number("generation.no_answer_threshold", self.no_answer_threshold, -1.0, top,
                          note=f" or null (never refuse): the support it is compared with is cosine + "
                               f"generation.extractive.lexical_weight ({self.extractive.lexical_weight:g}) "
                               f"x word overlap, at most {top:g}, so a higher one refuses every question")


@dataclass(frozen=True)
class CitationConfig:
    """Attributes:
        cosine_threshold: the embedding fallback cites a passage only at cosine >= this, in
            [-1, 1]; up to ``COSINE_OFF`` (1.01) cites nothing by cosine (the ablation's switch).
        support_threshold: the citation bundle's P(supports) cut, in [0, 1]; None = the bundle's own.
        max_per_sentence: citations attached to one sentence (>= 1).
        entity_veto: a passage that lacks a number or name of the sentence (pattern entities:
            "Voyager 2", "7420", "Quarry 3.0") cannot support it, whatever its score: a
            passage about Voyager 1 is similar to a sentence about Voyager 2, but no source.
    """

    cosine_threshold: float = 0.6
    support_threshold: float | None = None
    max_per_sentence: int = 2
    entity_veto: bool = True

    def __post_init__(self) -> None:
        check_number("citation.cosine_threshold", self.cosine_threshold, -1.0, COSINE_OFF,
                      note=f" (a cosine; {COSINE_OFF:g} cites nothing by cosine)")
        if self.support_threshold is not None:
            check_number("citation.support_threshold", self.support_threshold, 0.0, 1.0,
                          note=" (a probability) or null (the bundle's own)")
        check_count("citation.max_per_sentence", self.max_per_sentence)


@dataclass(frozen=True)
class TimelineConfig:
    """Attributes:
        merge_threshold: events with compatible dates and cosine >= this are merged, in
            [-1, 1]; up to ``COSINE_OFF`` (1.01) merges nothing (the ablation's switch).
        max_events: events kept (the earliest first after sorting).
        use_document_dates: a dated document with no date in its text yields one event.
        used_passages_only: events only from the passages the answer drew on (the extractive
            generator's sentences and the citations), not from every retrieved passage; when
            neither is known (an LLM answer without citations) every passage is used, noted.
        relevance_ratio: a dated sentence enters only when its cosine with the question is at
            least this share of the best one's of the same passage: a digest page ("2024 in
            review", 19 dated lines) gives the lines about what was asked, an article its dated
            sentence. 0 keeps every dated sentence of a used passage.
    """

    merge_threshold: float = 0.9
    max_events: int = 50
    use_document_dates: bool = True
    used_passages_only: bool = True
    relevance_ratio: float = 0.8

    def __post_init__(self) -> None:
        if not 0.0 <= self.relevance_ratio <= 1.0:
            raise ValueError(f"timeline.relevance_ratio must be in [0, 1] (0 keeps every dated sentence), "
                             f"got {self.relevance_ratio}")
        if self.max_events < 1:
            raise ValueError(f"timeline.max_events must be >= 1, got {self.max_events}")
        check_number("timeline.merge_threshold", self.merge_threshold, -1.0, COSINE_OFF,
                      note=f" (a cosine; {COSINE_OFF:g} merges nothing)")


@dataclass(frozen=True)
class ImagesConfig:
    """Attributes:
        threshold: an assignment is kept only at relevance >= this, a cosine in [-1, 1]
            (-1 keeps every assignment).
        max_candidates: images considered per answer (>= 1; ``presets.*.images: false`` places none).
        min_side_px: smaller images (icons, spacers) are filtered out (0 keeps every size).
        image_paragraph_weight: weight of the image-paragraph cosine in the three-way mix
            (``models.placement.combined_scores``), used with an images bundle; without one,
            caption-paragraph cosine alone scores.
        caption_paragraph_weight: weight of the caption-paragraph cosine in that mix.
        image_query_weight: weight of the image-question cosine in that mix. The weights are
            renormalised over the signals present: each >= 0, the image-paragraph one > 0 (as
            ``models.placement.PlacementConfig``, which the stage builds from them).
    """

    threshold: float = 0.3
    max_candidates: int = 16
    min_side_px: int = 32
    image_paragraph_weight: float = 0.5
    caption_paragraph_weight: float = 0.3
    image_query_weight: float = 0.2

    def __post_init__(self) -> None:
        check_number("images.threshold", self.threshold, -1.0, 1.0, note=" (a cosine; -1 keeps every assignment)")
        check_count("images.max_candidates", self.max_candidates)
        check_count("images.min_side_px", self.min_side_px, 0, note=" (0 keeps every size)")
        check_number("images.image_paragraph_weight", self.image_paragraph_weight, 0.0, low_open=True,
                      note=" (the image tower's signal is always in the mix)")
        for key in ("caption_paragraph_weight", "image_query_weight"):
            check_number(f"images.{key}", getattr(self, key), 0.0, note=" (0 leaves the signal out)")


@dataclass(frozen=True)
class Preset:
    """What one deployment preset runs (KIMAs turbo / small / large).

    Attributes:
        rewrite: rewrite a follow-up into a standalone question.
        decompose: build the query-decomposition graph (else the question is one node).
        rerank: rerank retrieved passages with the reranker bundle.
        citation: attach citations to the answer's sentences.
        timeline: extract the answer's dated events.
        images: place images beside the answer's paragraphs.
        retrieve_k: chunks retrieved per node, >= 1 (None = ``retrieval.retrieve_k``).
    """

    rewrite: bool = True
    decompose: bool = True
    rerank: bool = True
    citation: bool = True
    timeline: bool = True
    images: bool = True
    retrieve_k: int | None = None

    def __post_init__(self) -> None:
        # None, not 0, means retrieval.retrieve_k (the loader names the preset: presets.<name>: ...)
        check_count("presets.<name>.retrieve_k", self.retrieve_k, optional="retrieval.retrieve_k")
        if self.retrieve_k is not None and self.retrieve_k > MAX_RETRIEVE_K:
            raise ValueError(f"presets.<name>.retrieve_k must be at most {MAX_RETRIEVE_K}, got {self.retrieve_k}")


def _default_presets() -> dict[str, Preset]:
    return {
        "turbo": Preset(rewrite=False, decompose=False, rerank=False, timeline=False, images=False,
                        retrieve_k=5),
        "small": Preset(decompose=False, rerank=True, timeline=False, images=False),
        "large": Preset(),
    }


@dataclass(frozen=True)
class CostConfig:
    """cost = per_second * latency_s + per_1k_tokens * tokens / 1000 + per_model_call * calls.

    Attributes:
        per_second: cost of one second of end-to-end latency.
        per_1k_tokens: cost of 1,000 LLM tokens (in + out).
        per_model_call: cost of one model call (rewrite, rerank, citation, ...).

    Each is a finite number >= 0 (a NaN cost makes every reward NaN, and the bandit's state).
    """

    per_second: float = 1.0
    per_1k_tokens: float = 0.0
    per_model_call: float = 0.0

    def __post_init__(self) -> None:
        for key in ("per_second", "per_1k_tokens", "per_model_call"):
            check_number(f"cost.{key}", getattr(self, key), 0.0)


@dataclass(frozen=True)
class ProtocolConfig:
    """The IMACS protocol router (LinUCB over presets).

    Attributes:
        enabled: False always uses ``default_preset``.
        default_preset: the preset used when the router is off (a key of ``presets``).
        alpha: exploration width of the upper confidence bound (finite, >= 0).
        ridge: the prior A = ridge * I of every arm (finite, > 0).
        cost_lambda: reward = quality - cost_lambda * cost (finite, >= 0).
        state_path: JSON file the bandit is saved to after each feedback (atomic); None = memory.
            An existing folder is refused (the first feedback would fail to save).
        max_pending: choices remembered for feedback (the oldest are forgotten).
    """

    enabled: bool = False
    default_preset: str = "large"
    alpha: float = 1.0
    ridge: float = 1.0
    cost_lambda: float = 0.1
    state_path: str | None = None
    max_pending: int = 10000

    def __post_init__(self) -> None:
        # NaN alpha or ridge made every LinUCB score NaN (the first preset always chosen); an
        # infinite cost_lambda a reward of -inf and a NaN state
        check_number("protocol.alpha", self.alpha, 0.0)
        check_number("protocol.ridge", self.ridge, 0.0, low_open=True)
        check_number("protocol.cost_lambda", self.cost_lambda, 0.0)
        check_count("protocol.max_pending", self.max_pending)
        if self.state_path is not None and not self.state_path.strip():  # it silently meant memory only
            raise ValueError("protocol.state_path is empty; give the path of a JSON file, or null (memory only)")
        if self.state_path is not None and Path(self.state_path).is_dir():
            raise ValueError(f"protocol.state_path {self.state_path!r} is a folder; give the path of a JSON file "
                             f"(e.g. {str(Path(self.state_path) / 'bandit.json')!r}) or null (memory only)")


@dataclass(frozen=True)
class PipelineConfig:
    """The whole pipeline (YAML top level).

    Attributes:
        index: index folder (``searchsmith index``); ``--index`` overrides it.
        stages: the stages in order; each one's reads must be written by an earlier one.
        max_query_chars: longer questions are rejected (413-style ValidationError).
    """

    index: str | None = None
    stages: tuple[str, ...] = ("context", "routing", "decomposition", "retrieval", "generation",
                               "citation", "timeline", "images")
    max_query_chars: int = 4000
    bundles: BundlesConfig = field(default_factory=BundlesConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    decomposition: DecompositionConfig = field(default_factory=DecompositionConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    citation: CitationConfig = field(default_factory=CitationConfig)
    timeline: TimelineConfig = field(default_factory=TimelineConfig)
    images: ImagesConfig = field(default_factory=ImagesConfig)
    presets: dict[str, Preset] = field(default_factory=_default_presets)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    cost: CostConfig = field(default_factory=CostConfig)

    def __post_init__(self) -> None:
        if not self.presets:
            raise ValueError("presets: at least one preset is needed (e.g. large: {})")
        if self.protocol.default_preset not in self.presets:
            raise ValueError(f"protocol.default_preset {self.protocol.default_preset!r} is not a "
                             f"preset (presets: {sorted(self.presets)})")
        if self.max_query_chars < 1:
            raise ValueError(f"max_query_chars must be >= 1, got {self.max_query_chars}")


def load_pipeline_config(path: str | Path | None = None, overrides: tuple[str, ...] | list[str] = ()
                         ) -> PipelineConfig:
    """Strictly load a pipeline YAML (unknown keys fail with the closest key suggested)."""
    return load_config(PipelineConfig, path, overrides)
