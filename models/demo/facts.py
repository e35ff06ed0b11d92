"""The facts behind the demo knowledge base (all invented or, for the encyclopedia, well known).

Every document, routing query and QA item in this folder is rendered from these tables by
``generate.py``, so the gold labels and answers can never drift from the text. The products,
companies, people and events are fictional; the encyclopedia facts are real and rounded the
way a general encyclopedia rounds them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Module:
    """One source file of a product: what it implements and how it is called."""

    feature: str  # "eviction": the words a user would use ("the code for Lumen's eviction")
    path: str
    signature: str
    summary: str
    usage: str


@dataclass(frozen=True)
class ConfigKey:
    key: str
    default: str
    allowed: str
    feature: str  # matches a Module.feature, so a config doc leads to a code note
    description: str


@dataclass(frozen=True)
class ErrorCode:
    code: str
    message: str
    cause: str
    fix: str


@dataclass(frozen=True)
class Release:
    version: str
    date: str  # ISO 8601
    headline: str


@dataclass(frozen=True)
class Product:
    slug: str
    name: str
    kind: str
    maker: str
    tagline: str
    language: str
    repo: str
    port: int
    install: tuple[str, ...]
    requirements: str
    components: tuple[str, ...]  # left to right in the architecture diagram
    use_cases: tuple[str, ...]
    modules: tuple[Module, ...]
    config: tuple[ConfigKey, ...]
    limits: tuple[tuple[str, str], ...]
    errors: tuple[ErrorCode, ...]
    releases: tuple[Release, ...]
    price_usd_month: int
    test_command: str


PRODUCTS: tuple[Product, ...] = (
    Product(
        slug="quarry",
        name="Quarry",
        kind="vector database",
        maker="Northwind Labs",
        tagline="stores embeddings and answers nearest-neighbour queries with metadata filters",
        language="Rust",
        repo="https://git.example.com/northwind/quarry",
        port=7420,
        install=("docker run -p 7420:7420 northwind/quarry:3.0", "cargo install quarry-server"),
        requirements="4 GB of RAM, a 64-bit Linux host (x86_64 with AVX2, or arm64)",
        components=("API", "Planner", "HNSW", "Segments", "WAL"),
        use_cases=("semantic search", "recommendations", "deduplication of near-identical records"),
        modules=(
            Module("HNSW index", "quarry/src/index/hnsw.rs",
                   "pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<Hit>",
                   "descends greedily through the upper layers, then runs a best-first search on layer 0 with a candidate list of size ef",
                   "let hits = index.search(&query, 10, 128);"),
            Module("segment storage", "quarry/src/storage/segment.rs",
                   "pub fn seal(&mut self) -> Result<SegmentId, StorageError>",
                   "freezes the active segment, writes its checksum and hands it to the compactor",
                   "let id = segment.seal()?;"),
            Module("query planner", "quarry/src/query/planner.rs",
                   "pub fn plan(filter: &Filter, stats: &CollectionStats) -> Plan",
                   "chooses between pre-filtering and post-filtering from the estimated selectivity of the filter",
                   "let plan = plan(&filter, &collection.stats());"),
            Module("compaction", "quarry/src/storage/compact.rs",
                   "pub fn compact(segments: &[SegmentId], budget_mb: u64) -> CompactionReport",
                   "merges small sealed segments and drops vectors that carry a tombstone",
                   "let report = compact(&sealed, 512);"),
            Module("write-ahead log", "quarry/src/wal/mod.rs",
                   "pub fn append(&mut self, batch: &WriteBatch) -> Result<Lsn, WalError>",
                   "appends a batch of upserts and deletes and returns its log sequence number",
                   "let lsn = wal.append(&batch)?;"),
        ),
        config=(
            ConfigKey("index.m", "16", "4 to 64", "HNSW index",
                      "the number of neighbours each node keeps in the graph; higher values raise recall and memory use"),
            ConfigKey("index.ef_construction", "200", "16 to 2000", "HNSW index",
                      "the size of the candidate list while inserting; higher values build a better graph more slowly"),
            ConfigKey("storage.segment_size_mb", "512", "64 to 4096", "segment storage",
                      "the size at which the active segment is sealed"),
            ConfigKey("wal.fsync", "batch", "always, batch or never", "write-ahead log",
                      "when the write-ahead log is flushed to disk"),
        ),
        limits=(("vector dimension", "4,096"), ("collections per cluster", "1,000"),
                ("metadata per vector", "64 KB"), ("vectors per upsert request", "10,000")),
        errors=(
            ErrorCode("QRY-112", "segment checksum mismatch",
                      "a sealed segment was changed on disk, usually by an interrupted copy or a failing disk",
                      "run `quarry repair --segment <id>`, which rebuilds the segment from the write-ahead log"),
            ErrorCode("QRY-205", "dimension mismatch",
                      "the vector has a different dimension from the one the collection was created with",
                      "embed with the same model as the collection, or create a new collection with the right dimension"),
        ),
        releases=(
            Release("1.0", "2021-04-20", "the first stable release, with the HNSW index and a REST API"),
            Release("2.0", "2023-02-14", "filtered search driven by the new query planner"),
            Release("3.0", "2024-09-10", "tiered segment storage that cut p99 query latency from 48 ms to 21 ms"),
        ),
        price_usd_month=49,
        test_command="cargo test --workspace",
    ),
    Product(
        slug="lumen",
        name="Lumen",
        kind="in-memory cache",
        maker="Brightline Systems",
        tagline="keeps hot keys in memory, evicts cold ones and snapshots to disk",
        language="Python",
        repo="https://git.example.com/brightline/lumen",
        port=6410,
        install=("pip install lumen-cache", "docker run -p 6410:6410 brightline/lumen:4.0"),
        requirements="Python 3.10 or newer and 1 GB of free memory for the default settings",
        components=("Clients", "Protocol", "Shards", "Eviction", "Snapshots"),
        use_cases=("session storage", "caching database query results", "rate-limit counters"),
        modules=(
            Module("eviction", "lumen/evict.py",
                   "def evict(store: Store, needed_bytes: int, policy: str = \"lru\") -> list[str]",
                   "frees at least needed_bytes by removing keys in the order the eviction policy prescribes and returns the removed keys",
                   "removed = evict(store, needed_bytes=4096, policy=\"lfu\")"),
            Module("sharding", "lumen/shard.py",
                   "def shard_for(key: bytes, n_shards: int) -> int",
                   "maps a key to a shard with jump consistent hashing, so adding a shard moves few keys",
                   "shard = shard_for(b\"user:42\", n_shards=16)"),
            Module("wire protocol", "lumen/protocol/resp.py",
                   "def parse_command(buf: bytes) -> tuple[str, list[bytes]]",
                   "parses one RESP-style command from the client buffer",
                   "name, args = parse_command(b\"*2\\r\\n$3\\r\\nGET\\r\\n$4\\r\\nuser\\r\\n\")"),
            Module("snapshots", "lumen/persist/snapshot.py",
                   "def write_snapshot(store: Store, path: Path) -> SnapshotInfo",
                   "writes a consistent point-in-time copy of one shard to disk",
                   "info = write_snapshot(store, Path(\"/var/lib/lumen/shard-03.snap\"))"),
            Module("key expiry", "lumen/ttl.py",
                   "def expire_due(store: Store, now_s: float, budget: int = 200) -> int",
                   "removes keys whose time to live has passed, at most budget keys per call",
                   "n = expire_due(store, now_s=time.time())"),
        ),
        config=(
            ConfigKey("eviction.policy", "lru", "lru, lfu, ttl-first or none", "eviction",
                      "which keys are removed first when memory is full; none rejects writes instead"),
            ConfigKey("eviction.max_memory_mb", "1024", "64 to 262144", "eviction",
                      "the memory budget of one node; eviction starts when it is reached"),
            ConfigKey("snapshot.interval_s", "300", "10 to 86400", "snapshots",
                      "how often every shard writes a snapshot to disk"),
            ConfigKey("cluster.shards", "16", "1 to 1024", "sharding",
                      "the number of shards the key space is split into"),
        ),
        limits=(("key size", "512 bytes"), ("value size", "64 MiB"), ("shards per cluster", "1,024"),
                ("client connections per node", "10,000")),
        errors=(
            ErrorCode("LUM-204", "memory limit reached",
                      "the node reached eviction.max_memory_mb while eviction.policy is none",
                      "set eviction.policy to lru or lfu, or raise eviction.max_memory_mb"),
            ErrorCode("LUM-310", "snapshot write stalled",
                      "the disk could not keep up with snapshot writes from all shards at once",
                      "raise snapshot.interval_s or move the snapshot directory to a faster disk"),
        ),
        releases=(
            Release("1.0", "2019-11-05", "the first public release"),
            Release("3.0", "2022-06-21", "the lfu eviction policy"),
            Release("4.0", "2024-05-28", "sharded snapshots written in parallel"),
        ),
        price_usd_month=19,
        test_command="python -m pytest tests",
    ),
    Product(
        slug="tidewater",
        name="Tidewater",
        kind="job scheduler",
        maker="Harbor & Finch",
        tagline="runs scheduled and on-demand jobs across a pool of workers, with retries and DAG workflows",
        language="Go",
        repo="https://git.example.com/harborfinch/tidewater",
        port=8088,
        install=("go install git.example.com/harborfinch/tidewater/cmd/tidewater@latest",
                 "docker run -p 8088:8088 harborfinch/tidewater:2.5"),
        requirements="a PostgreSQL 13 or newer database for job state and 2 GB of RAM",
        components=("Cron", "Queue", "DAG", "Workers", "Retry"),
        use_cases=("nightly data pipelines", "report generation", "sending batched e-mail"),
        modules=(
            Module("job queue", "tidewater/scheduler/queue.go",
                   "func (q *Queue) Lease(ctx context.Context, worker string, ttl time.Duration) (*Job, error)",
                   "hands the oldest runnable job to a worker for ttl and marks it leased",
                   "job, err := q.Lease(ctx, \"worker-1\", 30*time.Second)"),
            Module("cron schedules", "tidewater/cron/parse.go",
                   "func Parse(spec string, loc *time.Location) (Schedule, error)",
                   "parses a five-field cron expression in the given time zone",
                   "s, err := cron.Parse(\"0 3 * * *\", time.UTC)"),
            Module("retries", "tidewater/retry/backoff.go",
                   "func NextDelay(attempt int, base time.Duration) time.Duration",
                   "computes an exponential back-off with full jitter for the given attempt",
                   "delay := retry.NextDelay(3, 30*time.Second)"),
            Module("DAG workflows", "tidewater/dag/topo.go",
                   "func Order(g *Graph) ([]JobID, error)",
                   "orders the jobs of a workflow topologically and reports a cycle as an error",
                   "order, err := dag.Order(workflow.Graph())"),
            Module("worker pool", "tidewater/workers/pool.go",
                   "func NewPool(size int, h Handler) *Pool",
                   "starts size goroutines that lease jobs and run them with the handler",
                   "pool := workers.NewPool(8, handler)"),
        ),
        config=(
            ConfigKey("workers.concurrency", "8", "1 to 512", "worker pool",
                      "how many jobs one worker process runs at the same time"),
            ConfigKey("retry.max_attempts", "5", "1 to 100", "retries",
                      "how many times a failing job is tried before it is marked dead"),
            ConfigKey("retry.backoff_s", "30", "1 to 3600", "retries",
                      "the base delay of the exponential back-off between attempts"),
            ConfigKey("cron.timezone", "UTC", "any IANA time zone name", "cron schedules",
                      "the time zone in which cron expressions are evaluated"),
        ),
        limits=(("jobs per DAG", "10,000"), ("job payload", "1 MiB"), ("cron resolution", "1 minute"),
                ("workers per cluster", "2,000")),
        errors=(
            ErrorCode("TDW-301", "lease expired",
                      "a worker ran a job for longer than its lease without sending a heartbeat",
                      "send heartbeats from long jobs or lease them with a longer ttl"),
            ErrorCode("TDW-420", "cycle detected in DAG",
                      "two or more jobs of a workflow depend on each other",
                      "remove one of the dependencies; `tidewater dag check FILE` prints the cycle"),
        ),
        releases=(
            Release("1.0", "2020-08-12", "the first stable release"),
            Release("2.0", "2022-10-03", "DAG workflows"),
            Release("2.5", "2024-11-19", "time-zone-aware cron schedules"),
        ),
        price_usd_month=29,
        test_command="go test ./...",
    ),
    Product(
        slug="beacon",
        name="Beacon",
        kind="metrics and log collection agent",
        maker="Brightline Systems",
        tagline="scrapes metrics, tails logs and forwards both to an OpenTelemetry endpoint",
        language="Go",
        repo="https://git.example.com/brightline/beacon",
        port=9464,
        install=("curl -sSfL https://get.example.com/beacon | sh",
                 "docker run -p 9464:9464 brightline/beacon:2.4"),
        requirements="Linux, macOS or Windows Server 2019 and 256 MB of RAM",
        components=("Discovery", "Scrape", "Relabel", "Buffer", "Export"),
        use_cases=("host monitoring", "Kubernetes metrics", "shipping application logs"),
        modules=(
            Module("scraping", "beacon/scrape/scraper.go",
                   "func (s *Scraper) Scrape(ctx context.Context, t Target) ([]Sample, error)",
                   "fetches one target's metrics endpoint and parses the samples",
                   "samples, err := s.Scrape(ctx, target)"),
            Module("buffering", "beacon/buffer/ring.go",
                   "func (r *Ring) Push(e Event) (dropped bool)",
                   "stores events in a fixed-size ring and drops the oldest when it is full",
                   "if r.Push(ev) { metrics.Dropped.Inc() }"),
            Module("OTLP export", "beacon/export/otlp.go",
                   "func (e *Exporter) Flush(ctx context.Context, batch []Event) error",
                   "sends a batch of events to the OTLP endpoint with retries",
                   "err := exporter.Flush(ctx, batch)"),
            Module("relabelling", "beacon/relabel/rules.go",
                   "func Apply(rules []Rule, labels Labels) (Labels, bool)",
                   "rewrites, keeps or drops labels according to the relabel rules",
                   "labels, keep := relabel.Apply(cfg.Rules, sample.Labels)"),
            Module("service discovery", "beacon/discovery/dns.go",
                   "func Resolve(ctx context.Context, name string) ([]Target, error)",
                   "turns a DNS SRV record into a list of scrape targets",
                   "targets, err := discovery.Resolve(ctx, \"_metrics._tcp.example.internal\")"),
        ),
        config=(
            ConfigKey("scrape.interval_s", "15", "1 to 3600", "scraping",
                      "how often every target is scraped"),
            ConfigKey("buffer.max_events", "50000", "1000 to 10000000", "buffering",
                      "how many events are held in memory while the export endpoint is slow"),
            ConfigKey("export.endpoint", "http://localhost:4318", "any http or https URL", "OTLP export",
                      "where events are sent"),
            ConfigKey("relabel.drop_labels", "[]", "a list of label names", "relabelling",
                      "labels removed from every sample before export"),
        ),
        limits=(("targets per agent", "5,000"), ("labels per sample", "64"), ("event size", "256 KB"),
                ("export batch", "8,192 events")),
        errors=(
            ErrorCode("BCN-101", "buffer full, dropping events",
                      "the export endpoint accepted events more slowly than they arrived",
                      "raise buffer.max_events or add capacity to the endpoint"),
            ErrorCode("BCN-215", "export endpoint unreachable",
                      "the agent could not open a connection to export.endpoint",
                      "check the URL, the firewall and the TLS settings of the endpoint"),
        ),
        releases=(
            Release("1.0", "2021-01-26", "the first stable release"),
            Release("2.0", "2023-05-09", "OTLP export"),
            Release("2.4", "2025-02-11", "DNS service discovery"),
        ),
        price_usd_month=15,
        test_command="go test ./...",
    ),
    Product(
        slug="ferrow",
        name="Ferrow",
        kind="message broker",
        maker="Calloway Data",
        tagline="stores streams of events in partitioned, replicated logs for producers and consumer groups",
        language="Rust",
        repo="https://git.example.com/calloway/ferrow",
        port=9300,
        install=("docker run -p 9300:9300 calloway/ferrow:2.0", "cargo install ferrow-broker"),
        requirements="three brokers for a replicated cluster, each with 8 GB of RAM and an SSD",
        components=("Producers", "Brokers", "Partitions", "Replicas", "Consumers"),
        use_cases=("event sourcing", "change data capture", "decoupling microservices"),
        modules=(
            Module("partition log", "ferrow/src/log/partition.rs",
                   "pub fn append(&mut self, records: &[Record]) -> Result<Offset, LogError>",
                   "appends records to the active log segment of a partition and returns the first offset",
                   "let offset = partition.append(&records)?;"),
            Module("consumer groups", "ferrow/src/group/coordinator.rs",
                   "pub fn rebalance(&mut self, members: &[MemberId]) -> Assignment",
                   "assigns the partitions of a topic to the members of a consumer group",
                   "let assignment = coordinator.rebalance(&members);"),
            Module("replication", "ferrow/src/replica/follower.rs",
                   "pub async fn fetch_from_leader(&mut self, from: Offset) -> Result<usize, ReplicaError>",
                   "copies new records from the partition leader to a follower",
                   "let n = follower.fetch_from_leader(high_watermark).await?;"),
            Module("retention", "ferrow/src/log/retention.rs",
                   "pub fn enforce(log: &mut PartitionLog, now: SystemTime, hours: u32) -> usize",
                   "deletes closed segments older than the retention period",
                   "let deleted = enforce(&mut log, SystemTime::now(), 168);"),
            Module("producer batching", "ferrow/src/client/producer.rs",
                   "pub async fn send(&self, topic: &str, key: &[u8], value: &[u8]) -> Result<Offset, ProduceError>",
                   "batches records per partition for up to linger_ms before sending",
                   "let offset = producer.send(\"orders\", b\"42\", &payload).await?;"),
        ),
        config=(
            ConfigKey("partitions.default", "6", "1 to 4096", "partition log",
                      "the number of partitions of a topic created without an explicit count"),
            ConfigKey("retention.hours", "168", "1 to 87600", "retention",
                      "how long records are kept before closed segments are deleted"),
            ConfigKey("replication.factor", "3", "1 to 7", "replication",
                      "how many brokers hold a copy of each partition"),
            ConfigKey("producer.linger_ms", "5", "0 to 1000", "producer batching",
                      "how long a producer waits to fill a batch before sending it"),
        ),
        limits=(("message size", "8 MiB"), ("partitions per topic", "4,096"),
                ("consumer groups per cluster", "2,000"), ("brokers per cluster", "256")),
        errors=(
            ErrorCode("FRW-118", "not leader for partition",
                      "the client sent a request to a broker that lost leadership of the partition",
                      "let the client refresh its metadata; it retries on the new leader automatically"),
            ErrorCode("FRW-402", "consumer group rebalancing",
                      "a member joined or left the group and partitions are being reassigned",
                      "wait for the rebalance to finish, or raise the session timeout if members leave too often"),
        ),
        releases=(
            Release("1.0", "2022-03-15", "the first stable release"),
            Release("1.5", "2023-09-27", "exactly-once producers"),
            Release("2.0", "2025-04-08", "partition rebalancing without downtime"),
        ),
        price_usd_month=39,
        test_command="cargo test --workspace",
    ),
    Product(
        slug="atlasgrid",
        name="Atlasgrid",
        kind="map tile server",
        maker="Northwind Labs",
        tagline="renders raster and vector map tiles from GeoJSON and caches them on disk",
        language="Python",
        repo="https://git.example.com/northwind/atlasgrid",
        port=8600,
        install=("pip install atlasgrid", "docker run -p 8600:8600 northwind/atlasgrid:2.2"),
        requirements="Python 3.10 or newer and 20 GB of disk for the default tile cache",
        components=("GeoJSON", "Ingest", "Styles", "Renderer", "Cache"),
        use_cases=("store locators", "delivery maps", "dashboards with maps"),
        modules=(
            Module("tile rendering", "atlasgrid/render/tiles.py",
                   "def render_tile(z: int, x: int, y: int, style: Style) -> bytes",
                   "draws one 256 by 256 pixel tile for the given zoom level and coordinates",
                   "png = render_tile(12, 2104, 1346, style)"),
            Module("projection", "atlasgrid/geo/mercator.py",
                   "def lonlat_to_tile(lon: float, lat: float, zoom: int) -> tuple[int, int]",
                   "converts a longitude and latitude to Web Mercator tile coordinates",
                   "x, y = lonlat_to_tile(4.48, 51.92, zoom=12)"),
            Module("tile cache", "atlasgrid/cache/disk.py",
                   "def get_or_render(key: TileKey, render: Callable[[], bytes]) -> bytes",
                   "returns a cached tile or renders, stores and returns it",
                   "png = cache.get_or_render(key, lambda: render_tile(*key, style))"),
            Module("GeoJSON import", "atlasgrid/ingest/geojson.py",
                   "def load_features(path: Path, max_mb: int = 200) -> list[Feature]",
                   "reads and validates a GeoJSON file into features",
                   "features = load_features(Path(\"stores.geojson\"))"),
            Module("styles", "atlasgrid/style/loader.py",
                   "def load_style(path: Path) -> Style",
                   "parses a style file and checks that every layer names a known source",
                   "style = load_style(Path(\"styles/light.json\"))"),
        ),
        config=(
            ConfigKey("render.max_zoom", "18", "0 to 22", "tile rendering",
                      "the deepest zoom level that is rendered"),
            ConfigKey("render.workers", "4", "1 to 64", "tile rendering",
                      "how many processes render tiles in parallel"),
            ConfigKey("cache.max_size_gb", "20", "1 to 10000", "tile cache",
                      "the size of the disk cache before old tiles are removed"),
            ConfigKey("cache.dir", "/var/cache/atlasgrid", "any writable directory", "tile cache",
                      "where rendered tiles are stored"),
        ),
        limits=(("zoom level", "22"), ("GeoJSON upload", "200 MB"), ("tile size", "512 px"),
                ("layers per style", "128")),
        errors=(
            ErrorCode("ATG-130", "style layer references unknown source",
                      "a layer in the style file names a data source that was never loaded",
                      "load the source first or correct the source name in the layer"),
            ErrorCode("ATG-251", "tile render timeout",
                      "a tile took longer than 10 seconds to draw, usually at high zoom with very detailed features",
                      "simplify the features or raise render.workers"),
        ),
        releases=(
            Release("1.0", "2021-07-07", "the first stable release"),
            Release("2.0", "2023-11-14", "vector tiles"),
            Release("2.2", "2025-01-21", "hillshading from elevation data"),
        ),
        price_usd_month=25,
        test_command="python -m pytest tests",
    ),
    Product(
        slug="kestrel",
        name="Kestrel",
        kind="API gateway",
        maker="Harbor & Finch",
        tagline="routes HTTP traffic to upstream services with rate limits, TLS and authentication",
        language="Go",
        repo="https://git.example.com/harborfinch/kestrel",
        port=8443,
        install=("docker run -p 8443:8443 harborfinch/kestrel:3.0", "brew install harborfinch/tap/kestrel"),
        requirements="512 MB of RAM and a TLS certificate for each public host name",
        components=("TLS", "Auth", "Router", "RateLimit", "Upstreams"),
        use_cases=("exposing microservices", "API keys and quotas", "TLS termination"),
        modules=(
            Module("rate limiting", "kestrel/ratelimit/bucket.go",
                   "func (b *Bucket) Allow(now time.Time, cost int) bool",
                   "implements a token bucket that refills at rate_limit.requests_per_s",
                   "if !bucket.Allow(time.Now(), 1) { return errTooMany }"),
            Module("routing", "kestrel/router/trie.go",
                   "func (t *Trie) Match(method, path string) (*Route, Params)",
                   "matches a request path against the route trie and extracts path parameters",
                   "route, params := t.Match(\"GET\", \"/v1/orders/42\")"),
            Module("TLS certificates", "kestrel/tls/certs.go",
                   "func (s *Store) Certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error)",
                   "picks the certificate for the requested server name and renews it before expiry",
                   "cfg := &tls.Config{GetCertificate: store.Certificate}"),
            Module("JWT authentication", "kestrel/auth/jwt.go",
                   "func Verify(token string, keys KeySet) (Claims, error)",
                   "checks the signature, expiry and audience of a JSON Web Token",
                   "claims, err := auth.Verify(bearer, keys)"),
            Module("upstream health checks", "kestrel/upstream/health.go",
                   "func (p *Pool) Check(ctx context.Context) []Status",
                   "probes every upstream and removes unhealthy ones from rotation",
                   "statuses := pool.Check(ctx)"),
        ),
        config=(
            ConfigKey("rate_limit.requests_per_s", "100", "1 to 1000000", "rate limiting",
                      "the sustained request rate allowed per API key"),
            ConfigKey("rate_limit.burst", "200", "1 to 1000000", "rate limiting",
                      "how many requests may arrive at once before limiting starts"),
            ConfigKey("tls.min_version", "1.2", "1.2 or 1.3", "TLS certificates",
                      "the oldest TLS version accepted from clients"),
            ConfigKey("upstream.health_interval_s", "10", "1 to 300", "upstream health checks",
                      "how often upstreams are probed"),
        ),
        limits=(("routes", "20,000"), ("request body", "32 MiB"), ("header size", "64 KB"),
                ("upstreams per route", "256")),
        errors=(
            ErrorCode("KST-429", "rate limit exceeded",
                      "the API key sent more requests than rate_limit.requests_per_s plus the burst allows",
                      "slow the client down or raise the limit for that key"),
            ErrorCode("KST-502", "no healthy upstream",
                      "every upstream of the route failed its health check",
                      "check the upstream services; `kestrel upstreams status` lists the failing probes"),
        ),
        releases=(
            Release("1.0", "2019-09-10", "the first stable release"),
            Release("2.0", "2021-12-07", "JWT authentication"),
            Release("3.0", "2024-10-15", "HTTP/3 support"),
        ),
        price_usd_month=35,
        test_command="go test ./...",
    ),
    Product(
        slug="marlowe",
        name="Marlowe",
        kind="full-text search engine",
        maker="Calloway Data",
        tagline="indexes documents into an inverted index and ranks matches with BM25",
        language="Python",
        repo="https://git.example.com/calloway/marlowe",
        port=9700,
        install=("pip install marlowe-search", "docker run -p 9700:9700 calloway/marlowe:2.6"),
        requirements="Python 3.10 or newer and an SSD with twice the size of the raw documents",
        components=("Analyzer", "Postings", "Merge", "BM25", "Highlight"),
        use_cases=("site search", "log search", "searching support tickets"),
        modules=(
            Module("text analysis", "marlowe/analysis/analyzer.py",
                   "def analyze(text: str, language: str = \"en\") -> list[Token]",
                   "splits text into tokens, lowercases them and applies the language's stemmer",
                   "tokens = analyze(\"Running searches\", language=\"en\")"),
            Module("inverted index", "marlowe/index/postings.py",
                   "def add_document(doc_id: int, tokens: list[Token]) -> None",
                   "adds a document's tokens to the in-memory postings lists",
                   "add_document(17, analyze(body))"),
            Module("BM25 scoring", "marlowe/search/bm25.py",
                   "def bm25(tf: int, df: int, doc_len: int, avg_len: float, n_docs: int, k1: float = 1.2, b: float = 0.75) -> float",
                   "scores one term in one document with the Okapi BM25 formula",
                   "score = bm25(tf=3, df=120, doc_len=410, avg_len=380.0, n_docs=50_000)"),
            Module("segment merging", "marlowe/index/merge.py",
                   "def merge(segments: list[Segment], max_segments: int = 10) -> list[Segment]",
                   "merges the smallest segments until at most max_segments remain",
                   "segments = merge(segments, max_segments=10)"),
            Module("highlighting", "marlowe/search/highlight.py",
                   "def highlight(text: str, terms: set[str], window: int = 80) -> str",
                   "returns the best window of text with matched terms marked",
                   "snippet = highlight(body, {\"refund\", \"policy\"})"),
        ),
        config=(
            ConfigKey("analyzer.language", "en", "en, de, fr, es, nl or none", "text analysis",
                      "the language whose stemmer and stop words are used"),
            ConfigKey("merge.max_segments", "10", "1 to 1000", "segment merging",
                      "the number of segments the merger aims for"),
            ConfigKey("search.k1", "1.2", "0.0 to 3.0", "BM25 scoring",
                      "the term-frequency saturation of BM25"),
            ConfigKey("search.b", "0.75", "0.0 to 1.0", "BM25 scoring",
                      "how strongly BM25 normalises for document length"),
        ),
        limits=(("document size", "100 MB"), ("fields per document", "1,000"),
                ("terms per query", "1,024"), ("indexes per node", "500")),
        errors=(
            ErrorCode("MRL-150", "too many clauses",
                      "the query expanded to more than 1,024 terms, usually through a wildcard",
                      "make the wildcard more specific or split the query"),
            ErrorCode("MRL-307", "merge throttled",
                      "segment merging fell behind indexing and new writes are slowed down",
                      "raise merge.max_segments or index in larger batches"),
        ),
        releases=(
            Release("1.0", "2020-02-25", "the first stable release"),
            Release("2.0", "2022-08-30", "BM25 scoring in place of TF-IDF"),
            Release("2.6", "2024-12-03", "analyzers for German, French, Spanish and Dutch"),
        ),
        price_usd_month=45,
        test_command="python -m pytest tests",
    ),
)


@dataclass(frozen=True)
class Company:
    name: str
    city: str
    founded: int
    ceo: str


COMPANIES: tuple[Company, ...] = (
    Company("Northwind Labs", "Rotterdam", 2017, "Ilse Verhoeven"),
    Company("Brightline Systems", "Austin", 2015, "Marcus Obi"),
    Company("Harbor & Finch", "Glasgow", 2012, "Fiona MacLeod"),
    Company("Calloway Data", "Toronto", 2016, "Priya Raman"),
)

OUTLETS = ("The Daily Stack", "Infra Weekly", "Cloud Ledger")

# (acquirer, target, ISO date, price)
ACQUISITIONS: tuple[tuple[str, str, str, str], ...] = (
    ("Harbor & Finch", "Brightline Systems", "2024-03-12", "$310 million"),
    ("Northwind Labs", "Calloway Data", "2025-06-03", "$540 million"),
)


@dataclass(frozen=True)
class Outage:
    product: str
    date: str
    region: str
    duration: str
    cause: str
    error: str  # an ErrorCode.code of the product, so the troubleshooting doc is the follow-up
    fixed_in: str
    reports: int  # 2 = two outlets wrote near-duplicate reports


OUTAGES: tuple[Outage, ...] = (
    Outage("Lumen", "2024-07-18", "eu-west", "3 hours 20 minutes",
           "every shard started a snapshot at the same moment and saturated the disks", "LUM-310", "4.0.2", 2),
    Outage("Kestrel", "2023-11-02", "global", "47 minutes",
           "a failed certificate rotation job let the TLS certificates of the edge expire", "KST-502", "2.4.1", 2),
    Outage("Quarry", "2025-01-09", "us-east", "2 hours",
           "a compaction bug rewrote sealed segments in place", "QRY-112", "3.0.2", 2),
    Outage("Ferrow", "2024-02-27", "ap-south", "95 minutes",
           "a network partition caused a storm of leader elections", "FRW-118", "1.5.3", 2),
    Outage("Tidewater", "2025-03-17", "eu-central", "40 minutes",
           "a database failover stopped heartbeats from reaching the scheduler", "TDW-301", "2.5.1", 1),
)

# (organiser, conference, city, ISO date, product, what was shown)
CONFERENCES: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("Northwind Labs", "VectorConf 2024", "Lisbon", "2024-06-05", "Quarry", "a preview of tiered segment storage"),
    ("Brightline Systems", "CacheCon 2023", "Berlin", "2023-10-11", "Lumen", "sharded snapshots"),
    ("Harbor & Finch", "SchedSummit 2024", "Glasgow", "2024-04-23", "Tidewater", "time-zone-aware cron schedules"),
    ("Calloway Data", "StreamDays 2025", "Toronto", "2025-05-20", "Ferrow", "rebalancing without downtime"),
    ("Northwind Labs", "MapCamp 2022", "Copenhagen", "2022-09-14", "Atlasgrid", "vector tiles"),
    ("Harbor & Finch", "EdgeWorld 2023", "Dublin", "2023-06-27", "Kestrel", "an early build of HTTP/3 support"),
)

# (company, round, amount, ISO date, lead investor)
FUNDING: tuple[tuple[str, str, str, str, str], ...] = (
    ("Northwind Labs", "Series B", "$25 million", "2020-10-06", "Polder Ventures"),
    ("Brightline Systems", "Series C", "$40 million", "2022-01-18", "Longhorn Capital"),
    ("Calloway Data", "Series B", "$32 million", "2021-05-11", "Maple Street Partners"),
    ("Northwind Labs", "Series D", "$120 million", "2024-11-05", "Polder Ventures"),
)

# (company, person, role, ISO date, previous job)
PEOPLE: tuple[tuple[str, str, str, str, str], ...] = (
    ("Harbor & Finch", "Tomasz Wilk", "chief technology officer", "2023-02-06", "head of infrastructure at a Warsaw bank"),
    ("Calloway Data", "Priya Raman", "chief executive officer", "2019-04-02", "Calloway Data's head of product"),
    ("Northwind Labs", "Sanne de Groot", "chief product officer", "2024-01-15", "product lead for Atlasgrid"),
)

# (ISO date, text) partnerships of the Stackyard hosting platform and the vendors
PARTNERSHIPS: tuple[tuple[str, str, str], ...] = (
    ("2022-05-17", "Stackyard adds managed Quarry",
     "Stackyard now offers Quarry Cloud, a managed edition of Northwind Labs' Quarry vector database"),
    ("2023-03-08", "Marlowe arrives on Stackyard",
     "Calloway Data and Stackyard launched a managed edition of the Marlowe search engine"),
    ("2025-02-25", "Kestrel gains a Lumen response cache",
     "Harbor & Finch announced that Kestrel can now cache upstream responses in Lumen, the first joint feature since it bought Lumen's maker"),
)

# (product, advisory id, ISO date, issue, fixed in)
ADVISORIES: tuple[tuple[str, str, str, str, str], ...] = (
    ("Quarry", "QRY-SA-2023-01", "2023-07-11", "an authentication bypass in the REST API when tokens were empty", "2.1.3"),
    ("Lumen", "LUM-SA-2024-02", "2024-09-03", "a buffer overread in the RESP command parser", "4.0.3"),
    ("Kestrel", "KST-SA-2022-01", "2022-04-19", "JWTs signed with the 'none' algorithm being accepted", "2.0.4"),
    ("Marlowe", "MRL-SA-2025-01", "2025-03-04", "cross-site scripting through search result highlights", "2.6.2"),
)

# (product, old major line, ISO date of the announcement, end-of-life ISO date)
END_OF_LIFE: tuple[tuple[str, str, str, str], ...] = (
    ("Lumen", "1.x", "2023-06-01", "2023-12-31"),
    ("Tidewater", "1.x", "2024-01-15", "2024-07-31"),
    ("Kestrel", "1.x", "2022-09-01", "2023-03-01"),
)

# Stackyard, the hosting platform whose customer FAQ is the `faq` source.
SLA_TIERS: tuple[tuple[str, str, str, str], ...] = (
    # (plan, monthly uptime, support hours, credit when missed)
    ("Starter", "99.5%", "Monday to Friday, 09:00 to 18:00 CET", "10% of the monthly fee"),
    ("Business", "99.9%", "Monday to Saturday, 07:00 to 22:00 CET", "25% of the monthly fee"),
    ("Enterprise", "99.95%", "24 hours a day, 7 days a week", "50% of the monthly fee"),
)
UPTIME_2024: tuple[float, ...] = (99.98, 99.97, 99.99, 99.95, 99.99, 99.96, 99.71, 99.98, 99.99, 99.97, 99.99, 99.98)
