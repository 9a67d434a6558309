"""The cache service: node-local dataset caching planned from Kubeflow pipelines."""
