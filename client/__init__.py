"""gpufair's in-trainer library (telemetry, elastic batches, split commands)."""
