-- Per-tenant eviction budgets (issue 27 item 3) as an SRE control of the preemption service
-- (services/preemption/controls.py): control 'tenant_budget', scope = the spot tenant, value
-- {"max_evictions": N, "per": "day" | "periods"}. A budget is in force in every pool and counted
-- per pool by the pool's owner (docs/decisions.md). Clearing a budget deletes its row.
ALTER TABLE preemption_control DROP CONSTRAINT preemption_control_control_check;
ALTER TABLE preemption_control ADD CONSTRAINT preemption_control_control_check
    CHECK (control IN ('kill_switch', 'quota', 'eviction_cap', 'tenant_budget'));
