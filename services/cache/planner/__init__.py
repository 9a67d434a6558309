"""Pure Kubeflow pipeline planner: which step reads which dataset, and when.

Parses KFP v1/v2 Argo Workflows and KFP v2 IR (bare, with a PlatformSpec
document, or wrapped in a PipelineJob or a Kubernetes-native PipelineVersion;
plain or in a .tar.gz / .zip package) with PyYAML (never the kfp SDK),
follows dataset URIs through the DAG and schedules prefetches. No network,
etcd or gRPC here; the cache service feeds it history and sizes.
"""

from gpufair.cache.planner.errors import PipelineError
from gpufair.cache.planner.loader import LoadLimits, load_documents
from gpufair.cache.planner.model import Dataset, Pipeline, Step, Unresolved
from gpufair.cache.planner.parse import parse_pipeline
from gpufair.cache.planner.planning import DatasetPlan, Plan, StepPlan, plan
from gpufair.cache.planner.schedule import DEFAULT_STEP_SECONDS

__all__ = [
    "DEFAULT_STEP_SECONDS", "Dataset", "DatasetPlan", "LoadLimits", "Pipeline", "PipelineError",
    "Plan", "Step", "StepPlan", "Unresolved", "load_documents", "parse_pipeline", "plan",
]
