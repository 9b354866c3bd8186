"""The SRE surface of the preemption service: what an operator reads and sets.

Owns: the HTTP API and its OpenAPI bodies (`api`, `api_spec`), the routes that write the safety
controls with their audit (`controls`), the dashboard with its plots and decision texts
(`dashboard`, `dashboard_plots`, `plots`, `decision_text`), a task's trace view (`trace_view`) and
`gfs explain` (`explain_cli`). Everything here reads a running decider through the narrow
`DeciderView` Protocol (`view`), never the decider or the service, so the surface is tested with a
fake view. This module imports nothing: import the parts themselves.
"""
