-- Preemption ownership keyed by deployment (issue 22, item 9): a partition is a partition of ONE
-- inbox topic. Before, `preemption_partition` and the journal were keyed by the partition number
-- only and event ids were unique across the whole table, so a second deployment (or a --dry-run
-- shadow with its own inbox topic) on the same database took the live owner's epoch, read its
-- offset, pulled its pools in on replay and made it skip inputs as "already seen".
--
-- Existing rows belong to the default inbox topic (`gfs-preemption-inbox`); a deployment that ran
-- with another PREEMPTION_INBOX_TOPIC before this migration must re-label its rows once:
--   UPDATE preemption_partition SET inbox_topic = '<topic>'; UPDATE preemption_journal SET inbox_topic = '<topic>';
-- (docs/operations.md). Instances of the previous release cannot claim partitions after this
-- migration (their ON CONFLICT names the old key): upgrade every instance together.

-- `dry_run`: the claimant is a --dry-run shadow (a dry-run refuses a schema a live one uses).
ALTER TABLE preemption_partition ADD COLUMN inbox_topic text NOT NULL DEFAULT 'gfs-preemption-inbox';
ALTER TABLE preemption_partition ADD COLUMN dry_run boolean NOT NULL DEFAULT false;
ALTER TABLE preemption_partition DROP CONSTRAINT preemption_partition_pkey;
ALTER TABLE preemption_partition ADD PRIMARY KEY (inbox_topic, partition);

-- `epoch`: the owner's epoch when the row was written. Command ids derive from it (the
-- controller's id salt), so a command decided again after a lost commit never reuses the id of one
-- already published, while a replay re-derives the same ids. NULL for rows written before (their
-- ids were derived without a salt, and still are).
ALTER TABLE preemption_journal ADD COLUMN inbox_topic text NOT NULL DEFAULT 'gfs-preemption-inbox';
ALTER TABLE preemption_journal ADD COLUMN epoch bigint;
ALTER TABLE preemption_journal DROP CONSTRAINT preemption_journal_event_id_key;
CREATE UNIQUE INDEX preemption_journal_event ON preemption_journal (inbox_topic, event_id);
DROP INDEX preemption_journal_partition;
CREATE INDEX preemption_journal_partition ON preemption_journal (inbox_topic, partition, seq);
