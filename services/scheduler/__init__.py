"""The scheduler service: slow-down estimation and fair minibatch splits."""
