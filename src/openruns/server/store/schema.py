"""
The metadata schema, as SQLAlchemy Core tables for queries. The migrations in `migrations/`
create it; a change here needs a new numbered migration.

- runs: one row per run. `seq` is the integer key every other table uses (and the keyset of
  newest-first listing); `id` is the public id, unique within its team (migration 0008). JSON
  columns hold text written with orjson.
- metric_points: one row per (metric key, step), clustered on that key (WITHOUT ROWID on
  SQLite), so a series is one contiguous range scan.
- metric_keys: a run's metric names, each with its step metric and the highest step of its
  points (migration 0015), so a run's keys sort by what was logged last without an aggregate.
- metric_blocks: per key, the count/min/max/last of every aligned block of BLOCK_SIZES[level]
  steps, rebuilt for the blocks each upload touches; a downsampled read of a long series reads
  these instead of every point. Inside a chunk's range level 1 is not stored: it is computed
  from the chunk when read (metric_chunks.level_one).
- metric_chunks (migration 0019): dense series, per (metric key, 4096 aligned steps) one row
  of packed columns (steps, values, times) with its summary; each (key, step) lives either in
  a metric_points row or in a chunk, never both (store/metric_chunks.py).
- metric_time_points: rows logged without a step, one per (metric key, timestamp).
- segments / episodes: one immutable blob per episodes upload, and one index row per record
  pointing into it (the zstd frame holding it, and the record's place inside that frame), with
  the digest of those frames' bytes (migration 0012), checked by every read.
- annotations: later facts about an episode (the step it was trained at, advantage, ...), from
  any producer, append-only, folded into the episode when it is read.
- receipts: the answer to every bulk upload, by Idempotency-Key, so a replay stores nothing,
  with the SHA-256 of the body it answered (migration 0009), so a reused key is refused.
- prime_environments / prime_objects: what the Prime wire (server/prime/) keeps beyond runs,
  metrics and episodes: environment ids handed out by the hub calls, and the eval sample rows
  and training Parquet objects stored in the blob store, one row per object.
- sessions (migration 0008): dashboard sign-ins, by the SHA-256 of the cookie's token.
- log_lines / log_totals (migration 0007): what a run's processes printed, one row per line at
  its byte offset in the run's output, and per run what was received and what was dropped from
  the middle to stay within the server's bound (store/logs.py).
- wandb_runs / wandb_console / wandb_files / wandb_media (migration 0010): what the W&B wire
  (server/wandb/) keeps beyond runs, metrics, logs and episodes: per run its entity, job
  type, the SDK's own config block and metadata, the file stream's line counts (resume), the
  open console line per writer, the files the SDK uploaded (config.yaml, tables, media), each
  a blob, and the media values of its history (wandb_media).
- alert_rules / alert_states / alert_deliveries / alert_activity (migration 0014): alert rules
  per team or project, each with its webhook; per (rule, run, subject) whether its condition
  is firing and how many times it fired (the dedupe key of a delivery); the deliveries, claimed
  by one replica at a time; per run when its data last arrived and whether it changed since
  the evaluator last looked (server/alerts/).
- run_deletions (migration 0013): the tombstone of every deleted run (store/deletion.py): its
  seq, team and id, when and by whom, and when its rows and blobs were all removed. `runs` and
  `episodes` are AUTOINCREMENT on SQLite from then on, so a deleted run's numbers are never
  handed out again.
- run_retention (migration 0018): per run reduced by retention (server/retention/), the rule
  applied, when a pass claimed it and when it finished (`reduced_at`, null while under way or
  interrupted), and what is kept and what was dropped (episodes, bytes; dropped counts add up
  over passes).
- episode_search (migration 0006): the full-text index of rollouts; its shape differs by
  dialect (FTS5 / tsvector), so it is not a Table here: store/search.py writes its SQL.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

__all__ = [
    "BLOCK_SIZES",
    "alert_activity",
    "alert_deliveries",
    "alert_rules",
    "alert_states",
    "annotations",
    "api_keys",
    "episode_subsets",
    "episodes",
    "log_lines",
    "log_totals",
    "metadata",
    "metric_blocks",
    "metric_chunks",
    "metric_keys",
    "metric_points",
    "metric_time_points",
    "prime_environments",
    "prime_objects",
    "receipts",
    "run_deletions",
    "run_retention",
    "run_tags",
    "runs",
    "segments",
    "server_meta",
    "sessions",
    "teams",
    "wandb_console",
    "wandb_files",
    "wandb_media",
    "wandb_runs",
]

# Steps per block at level 1, 2, ...: a level-L block is BLOCK_SIZES[L - 1] aligned steps. A
# factor of 16 between levels keeps a downsampled read of any range to at most ~16 rows per
# bucket, and the rebuild after an upload to a few small aggregate queries per level.
BLOCK_SIZES = (16, 256, 4096, 65536, 1048576)

metadata = MetaData()

server_meta = Table(
    "server_meta",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

teams = Table(
    "teams",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("created_at", Float, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("team_id", String(128), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
)

# A dashboard sign-in (migration 0008): the SHA-256 of the cookie's token, the key it was opened
# with (a revoked key ends it) and that key's team, and when it expires.
sessions = Table(
    "sessions",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("key_id", Integer, nullable=False),
    Column("team_id", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_sessions_expires", "expires_at"),
)

runs = Table(
    "runs",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False),
    Column("team_id", String(128), nullable=False),
    Column("create_key", String(256)),
    Column("kind", String(16), nullable=False),
    Column("name", Text),
    Column("model", Text),
    Column("environments", Text, nullable=False),
    Column("framework", Text),
    Column("description", Text),
    Column("tags", Text, nullable=False),
    Column("config", Text),
    Column("training", Text),
    Column("status", String(16), nullable=False),
    Column("error", Text),
    Column("summary", Text, nullable=False),
    Column("losses", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("last_heartbeat_at", Float),
    Column("notes", Text),
    Column("group_name", String(256)),
    # W&B's project (migration 0010); native runs get `default`.
    Column("project", String(256), nullable=False, server_default="default"),
    # When a stop was requested (dashboard, API); the W&B wire tells the SDK (migration 0010).
    Column("stop_requested_at", Float),
    # Who set the current status: owner | sweeper (a guess its owner's word replaces), and
    # every change of status after creation, JSON [{status, by, at}] (migration 0011).
    Column("status_by", String(16)),
    Column("status_history", Text, nullable=False, server_default="[]"),
    # The mapping the config file holds, parsed when it is written (JSON text; null for plain
    # text or a file that does not parse): what `config.<path>` filters read (migration 0017).
    Column("config_values", Text),
    UniqueConstraint("team_id", "create_key", name="uq_runs_team_create_key"),
    UniqueConstraint("team_id", "id", name="uq_runs_team_id"),
    Index("ix_runs_id", "id"),
    Index("ix_runs_team_seq", "team_id", "seq"),
    Index("ix_runs_status", "status"),
    Index("ix_runs_team_group", "team_id", "group_name"),
    Index("ix_runs_team_project", "team_id", "project", "seq"),
    sqlite_autoincrement=True,  # a deleted run's seq is never handed out again (0013)
)

run_tags = Table(
    "run_tags",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("tag", String(256), primary_key=True),
    Index("ix_run_tags_tag", "tag", "run_seq"),
)

metric_keys = Table(
    "metric_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_seq", Integer, nullable=False),
    Column("name", Text, nullable=False),
    # The metric this one is drawn against by default (define_metric; migration 0010).
    Column("step_metric", Text),
    # The highest step of its points, -1 while it has none; kept by metrics.write_points, so
    # a run's keys logged at the latest steps are an index walk (migration 0015).
    Column("last_step", BigInteger, nullable=False, server_default=text("-1")),
    UniqueConstraint("run_seq", "name", name="uq_metric_keys_run_name"),
)
Index(
    "ix_metric_keys_recent",
    metric_keys.c.run_seq,
    metric_keys.c.last_step.desc(),
    metric_keys.c.name,
)

metric_points = Table(
    "metric_points",
    metadata,
    Column("key_id", Integer, primary_key=True),
    Column("step", BigInteger, primary_key=True),
    Column("value", Float, nullable=False),
    Column("ts", Float),
    sqlite_with_rowid=False,
)

metric_blocks = Table(
    "metric_blocks",
    metadata,
    Column("key_id", Integer, primary_key=True),
    Column("level", SmallInteger, primary_key=True),
    Column("block", BigInteger, primary_key=True),
    Column("count", Integer, nullable=False),
    Column("min", Float, nullable=False),
    Column("max", Float, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("last_value", Float, nullable=False),
    sqlite_with_rowid=False,
)

# Dense series (migration 0019): per (key, 4096 aligned steps) the points as packed columns
# (store/metric_chunks.py has the format); a (key, step) is a metric_points row or in a chunk,
# never both. With a rowid on SQLite (migration 0021): its rows overflow their pages, and a
# WITHOUT ROWID table's key lookups read such rows whole.
metric_chunks = Table(
    "metric_chunks",
    metadata,
    Column("key_id", Integer, primary_key=True),
    Column("chunk", BigInteger, primary_key=True),  # step // 4096
    Column("count", Integer, nullable=False),
    Column("min", Float, nullable=False),
    Column("max", Float, nullable=False),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("last_value", Float, nullable=False),
    Column("steps", LargeBinary, nullable=False),
    Column("vals", LargeBinary, nullable=False),
    Column("times", LargeBinary),
    # A chart read's extent (metric_chunks.extent) reads a key's chunk summaries: from this
    # index alone, a key's entries side by side, not from each chunk's row, wherever its
    # upload put it (migration 0022).
    Index("ix_metric_chunks_extent", "key_id", "chunk", "count", "first_step", "last_step"),
)

metric_time_points = Table(
    "metric_time_points",
    metadata,
    Column("key_id", Integer, primary_key=True),
    Column("ts", Float, primary_key=True),
    Column("value", Float, nullable=False),
    sqlite_with_rowid=False,
)

segments = Table(
    "segments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_seq", Integer, nullable=False),
    Column("stream", String(16), nullable=False),
    Column("blob_key", Text, nullable=False),
    Column("records", Integer, nullable=False),
    # Records of the blob not indexed: their id was in the stream already (migration 0009).
    Column("ignored", Integer, nullable=False, server_default="0"),
    Column("bytes", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_segments_run", "run_seq", "id"),
)

episodes = Table(
    "episodes",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("run_seq", Integer, nullable=False),
    Column("stream", String(16), nullable=False),
    Column("episode_id", String(256), nullable=False),
    Column("step", BigInteger),
    Column("reward", Float),
    Column("env", Text),
    Column("ok", Boolean),
    Column("tokens", BigInteger),
    Column("duration", Float),
    Column("kind", String(16)),  # train | eval (run.work.type, else the run's kind)
    Column("subset", String(32)),  # the cohort it was logged as (all, effective), if any
    Column("trained_step", BigInteger),  # the latest step its annotations say it trained at
    Column("segment_id", Integer, nullable=False),
    # The zstd frame holding the record (bytes of the blob), then the record's line inside
    # the decompressed frame (without its newline).
    Column("frame_offset", BigInteger, nullable=False),
    Column("frame_length", Integer, nullable=False),
    Column("offset", Integer, nullable=False),
    Column("length", Integer, nullable=False),
    # BLAKE2b-128 of the blob's bytes frame_offset..+frame_length as stored at ingest: every
    # read checks it before decompressing (migration 0012; null on rows indexed before it,
    # whose reads verify the frames' checksums instead). See segment_reads.py.
    Column("frames_digest", LargeBinary(16)),
    # (column, seq) leads each sorted listing's index: pages walk it (store/episodes.py, 0020).
    Index("ix_episodes_run_step", "run_seq", "stream", "step", "seq", "reward", "trained_step"),
    Index("ix_episodes_run_reward", "run_seq", "stream", "reward", "seq"),
    Index("ix_episodes_run_id", "run_seq", "episode_id"),
    Index("ix_episodes_run_kind_step", "run_seq", "stream", "kind", "step"),
    # seq right after trained_step: an episode arrives untrained (NULL), so its entry goes at
    # the end of the NULLs, not at its reward among them (an insert at a random place: 0020).
    Index("ix_episodes_run_trained", "run_seq", "stream", "trained_step", "seq", "reward", "step"),
    sqlite_autoincrement=True,  # seqs of a deleted run's episodes are never reused (0013)
)

# The columns that locate an episode's record and check it (segment_reads.Location's fields):
# select them with `.join(segments, segments.c.id == episodes.c.segment_id)`.
RECORD_LOCATION = (
    episodes.c.frame_offset,
    episodes.c.frame_length,
    episodes.c.offset,
    episodes.c.length,
    episodes.c.frames_digest,
    segments.c.blob_key,
)

# The cohorts a stored episode was marked into after it was indexed (logged again with another
# subset: `all` on arrival, then `effective`); a read by subset finds it under each (0011).
episode_subsets = Table(
    "episode_subsets",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("stream", String(16), primary_key=True),
    Column("episode_id", String(256), primary_key=True),
    Column("subset", String(32), primary_key=True),
)

# Not `annotations`: that name is the `from __future__ import annotations` feature here and in
# every importer.
annotations_table = Table(
    "annotations",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("run_seq", Integer, nullable=False),
    Column("episode_id", String(256), nullable=False),
    Column("trace_id", String(256)),
    Column("producer", String(128), nullable=False),
    Column("step", BigInteger),  # the step the episode was trained at, when the fact says
    Column("ts", Float, nullable=False),
    Column("body", Text, nullable=False),  # the annotation's JSON, as sent
    # (episode, step): the trained step of an episode is read from the index alone.
    Index("ix_annotations_run_episode", "run_seq", "episode_id", "step"),
    Index("ix_annotations_run_step", "run_seq", "step", "episode_id"),
)

log_lines = Table(
    "log_lines",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),  # bytes of the run's output before it
    Column("size", Integer, nullable=False),  # its bytes (UTF-8, with its newline)
    Column("ts", Float, nullable=False),
    Column("stream", String(32), nullable=False),  # stdout | stderr | traceback | ...
    Column("source", String(128), nullable=False),  # the process: main, or a component
    Column("line", Text, nullable=False),
    Index("ix_log_lines_run_stream", "run_seq", "stream", "offset"),
    sqlite_with_rowid=False,
)

log_totals = Table(
    "log_totals",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("lines", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("dropped_lines", BigInteger, nullable=False),
    Column("dropped_bytes", BigInteger, nullable=False),
    Column("gap_offset", BigInteger),  # where the dropped middle begins
)

receipts = Table(
    "receipts",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("key", String(256), primary_key=True),
    Column("response", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("digest", String(64)),  # SHA-256 (hex) of the body it answered (migration 0009)
)


# -- the Prime wire (migration 0003) -------------------------------------------------------------

prime_environments = Table(
    "prime_environments",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("team_id", String(128), nullable=False),
    Column("owner", String(256), nullable=False),
    Column("name", String(256), nullable=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("team_id", "owner", "name", name="uq_prime_environments_team_slug"),
)

prime_objects = Table(
    "prime_objects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_seq", Integer, nullable=False),
    # eval_samples: one POST /evaluations/{id}/samples (zstd NDJSON of the rows as sent);
    # train_samples: one confirmed training-samples Parquet object, as PUT.
    Column("kind", String(16), nullable=False),
    Column("step", BigInteger),
    Column("blob_key", String(512), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("run_seq", "blob_key", name="uq_prime_objects_run_blob"),
    Index("ix_prime_objects_run_kind", "run_seq", "kind", "step", "id"),
)


# -- the W&B wire (migration 0010) ---------------------------------------------------------------

wandb_runs = Table(
    "wandb_runs",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("entity", String(128), nullable=False),
    Column("job_type", String(256)),
    # The config as the SDK last sent it (W&B's {key: {"value": v}} JSON), its `_wandb` entry
    # included: the SDK's telemetry (`t`), metric definitions (`m`), each writer's machine
    # (`e`), a fork's `branch_point`. RunResumeStatus answers it.
    Column("wandb_config", Text, nullable=False, server_default="{}"),
    Column("metadata", Text),  # wandb-metadata.json, as uploaded
    # Lines received per file stream file: a resumed run's SDK continues from these.
    Column("history_lines", BigInteger, nullable=False, server_default="0"),
    Column("events_lines", BigInteger, nullable=False, server_default="0"),
    Column("history_tail", Text),  # the last history row (JSON)
    # [[glob, step metric], ...]: `define_metric("eval/*", step_metric=...)`, applied to keys
    # as they arrive.
    Column("metric_globs", Text, nullable=False, server_default="[]"),
    Column("forked_from", Text),  # "<run id>?_step=N" of a fork_from run
)

wandb_console = Table(
    "wandb_console",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("source", String(128), primary_key=True),  # the writer's label (shared mode), or main
    Column("lines", BigInteger, nullable=False),  # lines stored, = the next line's number
    Column("open_line", Text),  # the last line sent, JSON {ts, stream, line}: it may still change
)

wandb_files = Table(
    "wandb_files",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    # The run file's name (media/table/x.table.json), or an artifact entry's
    # (artifacts/<client id>/<entry>); its blob is server/wandb/media.blob_key's.
    Column("name", String(1024), primary_key=True),
    Column("blob_key", String(1200), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
)

wandb_media = Table(
    "wandb_media",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_seq", Integer, nullable=False),
    Column("step", BigInteger),
    Column("key", Text, nullable=False),
    Column("value", Text, nullable=False),  # the history value (JSON): {"_type": ..., "path": ...}
    Column("path", String(512)),  # a table's file (media/table/...), to find it when it arrives
    # The table's copy in its run_table artifact (artifacts/<client id>/<entry>): its image cells
    # name media files, where the run file's copy says "Image"; read instead when it comes.
    Column("copy", String(1200)),
    Column("episodes", Integer),  # a table: the rollouts read from it (null: not read yet)
    UniqueConstraint("run_seq", "step", "key", name="uq_wandb_media_run_step_key"),
    Index("ix_wandb_media_run_path", "run_seq", "path"),
)


# -- alerts (migration 0014; server/alerts/) ----------------------------------------------------

alert_rules = Table(
    "alert_rules",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("team_id", String(128), nullable=False),
    Column("project", String(256)),  # None: every run of the team
    Column("name", Text, nullable=False),
    Column("condition", Text, nullable=False),  # JSON: alerts/rules.py's Condition
    Column("url", Text, nullable=False),
    Column("format", String(16), nullable=False),  # chat | generic
    Column("secret", String(64), nullable=False),  # the HMAC key of its deliveries' signature
    Column("enabled", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_alert_rules_team", "team_id", "project"),
)

# Per (rule, run, subject: a metric key, or ""): whether the condition holds now, and how many
# times it started to hold (`episode`). A delivery is made when `firing` turns true (a
# compare-and-set, so two replicas never fire one episode twice).
alert_states = Table(
    "alert_states",
    metadata,
    Column("rule_id", Integer, primary_key=True),
    Column("run_seq", Integer, primary_key=True),
    Column("subject", String(256), primary_key=True),
    Column("firing", Boolean, nullable=False),
    Column("episode", Integer, nullable=False),
    Column("changed_at", Float, nullable=False),
)

alert_deliveries = Table(
    "alert_deliveries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("rule_id", Integer, nullable=False),
    Column("team_id", String(128), nullable=False),
    Column("run_seq", Integer),
    # What makes it one alert: "<run seq>/<subject>/<episode>" for a condition, the upload's
    # receipt and line for an alert the run sent.
    Column("dedupe", String(600), nullable=False),
    Column("event", Text, nullable=False),  # JSON: what the generic body carries
    Column("status", String(16), nullable=False),  # pending | delivered | failed
    Column("attempts", Integer, nullable=False),
    Column("next_at", Float, nullable=False),  # when it may be (re)tried
    Column("claimed_until", Float),  # a replica is sending it until then
    Column("response_status", Integer),
    Column("last_error", Text),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float),
    UniqueConstraint("rule_id", "dedupe", name="uq_alert_deliveries_rule_dedupe"),
    Index("ix_alert_deliveries_due", "status", "next_at"),
    Index("ix_alert_deliveries_team", "team_id", "id"),
)

# Per run: when metric points or episodes last arrived, and whether anything the rules read
# (data, status) changed since the evaluator last claimed it.
alert_activity = Table(
    "alert_activity",
    metadata,
    Column("run_seq", Integer, primary_key=True),
    Column("last_data_at", Float),
    Column("pending", Boolean, nullable=False),
    Index("ix_alert_activity_pending", "pending"),
)


# -- deleted runs (migration 0013) ----------------------------------------------------------------

run_deletions = Table(
    "run_deletions",
    metadata,
    Column("run_seq", Integer, primary_key=True, autoincrement=False),
    Column("team_id", String(128), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("project", String(256)),
    Column("name", Text),
    Column("deleted_at", Float, nullable=False),
    Column("deleted_by", String(128)),  # the caller's rate-limit bucket (key:N), or null
    # When a purge last made progress: another replica resumes one silent for PURGE_LEASE.
    Column("claimed_at", Float),
    Column("purged_at", Float),  # every row and blob removed; null while under way
    Column("removed", Text, nullable=False, server_default="{}"),  # JSON counts
    Index("ix_run_deletions_team_id", "team_id", "run_id"),
    Index("ix_run_deletions_purged", "purged_at"),
)


# -- retention (migration 0018) -------------------------------------------------------------------

run_retention = Table(
    "run_retention",
    metadata,
    Column("run_seq", Integer, primary_key=True, autoincrement=False),
    Column("rule", Text, nullable=False),  # JSON: the rule applied (rules.RetentionRule)
    Column("keep_per_step", Integer, nullable=False),  # the rule's, to tell a changed rule
    # When a pass last claimed it or made progress: another replica takes up a pass silent
    # for store/retention.CLAIM_LEASE.
    Column("claimed_at", Float, nullable=False),
    Column("reduced_at", Float),  # the last pass finished; null while one is under way
    Column("episodes_kept", BigInteger, nullable=False, server_default="0"),
    Column("bytes_kept", BigInteger, nullable=False, server_default="0"),
    Column("episodes_dropped", BigInteger, nullable=False, server_default="0"),
    Column("bytes_dropped", BigInteger, nullable=False, server_default="0"),
    Column("segments_rewritten", Integer, nullable=False, server_default="0"),
    Column("segments_deleted", Integer, nullable=False, server_default="0"),
)
