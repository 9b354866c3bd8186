"""The quota service (spot quotas per pool from forecasts and pool status, persisted to Postgres).
It arrives with the live pipeline; the package exists now so the import contracts already hold it
apart from the other services."""
