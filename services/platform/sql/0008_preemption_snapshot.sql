-- Snapshots of a partition's pools (issue 25, services/preemption/snapshots.py): a claim restores
-- the newest snapshot whose version matches the running code and settings, then replays only the
-- journal rows after `seq`, so failover time stays flat however long the journal grows.
--
-- `seq` is the last journal row of the partition the state includes; `epoch` the owner that took
-- it (its fence was checked in the same transaction). `version` is the format, the pickle
-- protocol, the controller settings and a digest of the source of every module whose objects the
-- state holds (`modules`): a snapshot another release or other settings wrote is ignored, and the
-- claim replays the whole journal, as before snapshots. The newest two per partition are kept.
CREATE TABLE preemption_snapshot (
    inbox_topic  text        NOT NULL,
    partition    integer     NOT NULL,
    seq          bigint      NOT NULL,
    epoch        bigint      NOT NULL,
    version      text        NOT NULL,
    modules      text[]      NOT NULL,
    taken_at     timestamptz NOT NULL DEFAULT now(),
    state        bytea       NOT NULL,
    PRIMARY KEY (inbox_topic, partition, seq)
);
