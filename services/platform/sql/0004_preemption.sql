-- The preemption service (services/preemption): per-partition ownership and progress, the input
-- journal every pool is rebuilt from, the decision records `gfs explain` reads, and the router's
-- task and node routes.

-- One row per partition of the pool-keyed inbox. `epoch` is the fence: an instance that claims
-- the partition increments it, and every write of the partition's pools checks it in the same
-- transaction, so a pool is never decided by two instances (an old owner's write matches nothing).
-- `next_offset` is the inbox offset to read next, committed with the effects it caused.
CREATE TABLE preemption_partition (
    partition    integer     PRIMARY KEY,
    epoch        bigint      NOT NULL DEFAULT 0,
    owner        text,
    next_offset  bigint      NOT NULL DEFAULT 0,
    claimed_at   timestamptz
);

-- Every input that changed a pool, in order: the pool is rebuilt by replaying its rows through
-- the controller (deterministic: times are the recorded ones). `event_id` dedupes inbox records
-- delivered twice (timer inputs have none).
CREATE TABLE preemption_journal (
    seq        bigserial        PRIMARY KEY,
    partition  integer          NOT NULL,
    pool       text             NOT NULL,
    kind       text             NOT NULL,
    at_s       double precision NOT NULL,
    data       jsonb            NOT NULL DEFAULT '{}'::jsonb,
    event_id   uuid             UNIQUE
);
CREATE INDEX preemption_journal_partition ON preemption_journal (partition, seq);

-- What was decided and why (explanations with candidates and costs, the quota version in force).
CREATE TABLE preemption_decision (
    id        bigserial   PRIMARY KEY,
    pool      text        NOT NULL,
    task_id   text        NOT NULL DEFAULT '',
    kind      text        NOT NULL,
    at        timestamptz NOT NULL,
    dry_run   boolean     NOT NULL DEFAULT false,
    detail    jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX preemption_decision_task ON preemption_decision (task_id, id);
CREATE INDEX preemption_decision_at ON preemption_decision (at);

-- The router's maps from a task and from a node to its pool (cancels and acks name no pool).
CREATE TABLE preemption_task_route (
    task_id   text PRIMARY KEY,
    pool      text NOT NULL,
    event_id  uuid NOT NULL
);
CREATE TABLE preemption_node_route (
    node  text    PRIMARY KEY,
    pool  text    NOT NULL
);
