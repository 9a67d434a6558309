"""Node-local dataset cache: fetch S3/MinIO datasets to disk, verified, within a capacity.

Public API: NodeCache, NodeCacheConfig, EntryStatus/EntryState/Progress, the
publishers (EtcdPublisher, MemoryPublisher) and URI helpers.
"""

from .cache import NodeCache, RecoveryReport
from .config import NodeCacheConfig, parse_size
from .errors import IntegrityError, ObjectChanged
from .publisher import EntryPublisher, EtcdPublisher, MemoryPublisher
from .s3 import make_client
from .status import EntryState, EntryStatus, Progress
from .uris import DatasetUri, entry_id_for, parse_dataset_uri

__all__ = [
    "DatasetUri", "EntryPublisher", "EntryState", "EntryStatus", "EtcdPublisher", "IntegrityError",
    "MemoryPublisher", "NodeCache", "NodeCacheConfig", "ObjectChanged", "Progress", "RecoveryReport",
    "entry_id_for", "make_client", "parse_dataset_uri", "parse_size",
]
