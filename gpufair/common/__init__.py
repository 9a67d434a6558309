"""Plumbing shared by the services, the client and the CLI."""
