-- SRE safety controls of the preemption service (services/preemption/controls.py): the controls in
-- force and their audit trail.

-- The controls in force, one row per (control, scope). `scope` is a pool, or '*' for every pool
-- (kill switch: on if '*' or the pool's row is on; eviction cap: the pool's row wins over '*';
-- quota freeze/override: per pool only). A control that is cleared (switch off, quota back to the
-- quota service's, cap lifted) has no row. Every owner of a pool reads this table on its timer and
-- journals a `control` entry for each pool whose controls changed, so a replay restores them.
CREATE TABLE preemption_control (
    control   text        NOT NULL CHECK (control IN ('kill_switch', 'quota', 'eviction_cap')),
    scope     text        NOT NULL,
    value     jsonb       NOT NULL,
    set_by    text        NOT NULL,
    set_at    timestamptz NOT NULL DEFAULT now(),
    reason    text        NOT NULL,
    audit_id  bigint      NOT NULL,
    PRIMARY KEY (control, scope)
);

-- Every authenticated write (who, when, what, why), cleared ones included; never updated.
CREATE TABLE preemption_control_audit (
    id        bigserial   PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    who       text        NOT NULL,
    control   text        NOT NULL,
    scope     text        NOT NULL,
    action    jsonb       NOT NULL,   -- the request as applied (the new value, or {"cleared": true})
    previous  jsonb,                  -- the value it replaced (NULL: none was in force)
    reason    text        NOT NULL,
    instance  text        NOT NULL    -- the preemption instance that took the request
);
CREATE INDEX preemption_control_audit_scope ON preemption_control_audit (scope, id);
