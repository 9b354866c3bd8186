"""One pool's driver, shared by the simulator's engine and the live preemption service
(docs/decisions.md, "One per-pool driver"): typed inputs in (`inputs`), typed effects out
(`effects`), the guarantee-period and quota-expiry timers (`timers`), the pass trigger
(`trigger`), the held starts and ending attempts with their deadlines (`held`), around the core's
`PoolRuntime` (`pool_driver`)."""
