-- Quota service (issue 11): every computed quota version with the inputs and the forecast behind
-- it (for SREs: "why is the quota of pool X what it is"), and the latest pool status and pool
-- forecast the service received, so a restarted instance resumes from Postgres alone.

CREATE TABLE quota_version (
    pool             text             NOT NULL REFERENCES quota_pool (pool) ON DELETE CASCADE,
    version          bigint           NOT NULL CHECK (version >= 1),
    computed_at      timestamptz      NOT NULL,
    valid_until      timestamptz      NOT NULL CHECK (valid_until > computed_at),
    eta              double precision NOT NULL CHECK (eta > 0),
    -- {"1": Q(1), "2": Q(2), "4": Q(4)}: the quota per offered guarantee duration, in GPUs.
    quotas           jsonb            NOT NULL,
    -- capacity, idle GPUs, spot in use, HP running + queued, the feedback counts, the waits and
    -- the p-quantile of HP demand per hour ahead that the quota function read.
    inputs           jsonb            NOT NULL,
    -- model, version, origin, fallback flag; NULL when no usable forecast existed (idle fallback).
    forecast         jsonb,
    event_id         uuid             NOT NULL UNIQUE,  -- the SpotQuota envelope that published it
    PRIMARY KEY (pool, version)
);
CREATE INDEX quota_version_time ON quota_version (pool, computed_at);

-- The newest status and pool forecast per pool as last received (payload JSON as on the wire).
CREATE TABLE quota_input_latest (
    pool             text             NOT NULL,
    kind             text             NOT NULL CHECK (kind IN ('status', 'forecast')),
    as_of            timestamptz      NOT NULL,  -- observed_at (status) or origin_time (forecast)
    payload          jsonb            NOT NULL,
    received_at      timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (pool, kind)
);
