"""The metrics service: telemetry ingest, rolling windows, per-job rates."""
