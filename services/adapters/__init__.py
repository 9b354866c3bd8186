"""Adapters that hand GFS's forecast-sized spot quota to other schedulers (Kueue, KAI Scheduler).

The mapping (`mapping`, `kueue`, `kai`) is pure: SpotQuota in, Kubernetes manifest out. Validation
against the projects' published CRD schemas is in `crd_schema`; the live loop (Kafka in, printed
patch or `kubectl apply` out) is in `service`.
"""
