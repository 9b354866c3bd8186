-- Expiry of the router's task routes (issue 25, services/preemption/route_expiry.py): the table
-- kept one row per task ever submitted. The decider marks a task's route ended when the task ends
-- (finished, withdrawn, evicted without requeue, rejected other than as a duplicate); the router
-- deletes routes ended longer than its keep window ago, in bounded batches. A route of a task still
-- queued or running has no `ended_at` and is never deleted, however long the task runs.
ALTER TABLE preemption_task_route ADD COLUMN ended_at timestamptz;
CREATE INDEX preemption_task_route_ended ON preemption_task_route (ended_at) WHERE ended_at IS NOT NULL;
