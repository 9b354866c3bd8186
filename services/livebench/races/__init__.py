"""`gfs livebench races`: the live pipeline driven hard with racing acks, then checked. `bench`
runs it, `processes` starts the service and the agents, `records` reads back what the check needs,
`check` is the pure check, `render` prints the result."""
