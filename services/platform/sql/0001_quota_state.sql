-- Quota service state (spec section 4): per GPU pool, the spot quota Q_v(H) for each offered
-- guarantee duration H, the safety factor eta_v with its history, and the guarantee-period
-- outcomes eta's feedback loop reads (eviction rate over the last pred_len hours).

-- One row per pool: eta and the optimistic-concurrency version. QuotaStore.save(expected_version)
-- does `UPDATE ... SET version = version + 1 WHERE pool = $1 AND version = $2` and treats
-- "0 rows" as a conflict, so two quota workers never overwrite each other.
CREATE TABLE quota_pool (
    pool             text             PRIMARY KEY,
    capacity_gpus    integer          NOT NULL CHECK (capacity_gpus >= 0),
    eta              double precision NOT NULL DEFAULT 1.0 CHECK (eta > 0),
    version          bigint           NOT NULL DEFAULT 0 CHECK (version >= 0),
    updated_at       timestamptz      NOT NULL DEFAULT now()
);

-- Current quota per (pool, guarantee hours). Replaced as a whole on each recomputation (every
-- 300 s); `pool_version` is the quota_pool.version the row was written under.
CREATE TABLE spot_quota (
    pool             text             NOT NULL REFERENCES quota_pool (pool) ON DELETE CASCADE,
    guarantee_hours  integer          NOT NULL CHECK (guarantee_hours >= 1),
    -- Fractional: eta scales whole spare GPUs (schemas.quota.GuaranteeQuota.quota_gpus is a float).
    quota_gpus       double precision NOT NULL CHECK (quota_gpus >= 0),
    -- min_{h<=H} F_v(h): predicted spare GPUs before eta is applied (spec 4.1 step 4).
    min_free_gpus    integer          NOT NULL CHECK (min_free_gpus >= 0),
    eta              double precision NOT NULL CHECK (eta > 0),
    forecast_id      text,
    pool_version     bigint           NOT NULL,
    computed_at      timestamptz      NOT NULL,
    PRIMARY KEY (pool, guarantee_hours)
);

-- Append-only log of each update (spec 4.1 step 7: time, pool, H, min free, eta) plus the
-- eviction rate that drove eta, for audits and plots.
CREATE TABLE quota_eta_history (
    id               bigserial        PRIMARY KEY,
    pool             text             NOT NULL REFERENCES quota_pool (pool) ON DELETE CASCADE,
    computed_at      timestamptz      NOT NULL,
    guarantee_hours  integer          NOT NULL CHECK (guarantee_hours >= 1),
    min_free_gpus    integer          NOT NULL,
    eta              double precision NOT NULL CHECK (eta > 0),
    eviction_rate    double precision CHECK (eviction_rate BETWEEN 0 AND 1),
    pool_version     bigint           NOT NULL
);
CREATE INDEX quota_eta_history_pool_time ON quota_eta_history (pool, computed_at);

-- One row per closed guarantee period of a spot task (spec 4.2): success when the period ran
-- its full length (or the task finished), failure when the task was preempted. The unique key
-- makes recording idempotent when the closing event is redelivered.
CREATE TABLE guarantee_period_outcome (
    pool             text             NOT NULL,
    task_id          text             NOT NULL,
    period_start     timestamptz      NOT NULL,
    period_end       timestamptz      NOT NULL CHECK (period_end >= period_start),
    succeeded        boolean          NOT NULL,
    source_event_id  uuid,
    recorded_at      timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, period_start)
);
-- The feedback query: outcomes of one pool whose period ended in the last pred_len hours.
CREATE INDEX guarantee_period_outcome_pool_end ON guarantee_period_outcome (pool, period_end);
