"""The forecast service (a Faust app: per-tenant and per-pool HP demand forecasts). It arrives with
the live pipeline; the package exists now so the import contracts already hold it apart from the
other services."""
