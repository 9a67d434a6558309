"""The `gpufair` admin CLI: a client of the services."""
