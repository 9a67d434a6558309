"""Node-local dataset cache: fetch S3/MinIO datasets to disk, verified, within a capacity.

Public API: NodeCache, NodeCacheConfig, EntryStatus/EntryState/Progress and the
publishers (EtcdPublisher, MemoryPublisher). Dataset URIs are `gpufair.common.uris`.
"""

from .cache import NodeCache, RecoveryReport
from .config import NodeCacheConfig, parse_size
from .errors import IntegrityError, ObjectChanged
from .publisher import EntryPublisher, EtcdPublisher, MemoryPublisher
from .s3 import make_client
from .status import EntryState, EntryStatus, Progress

__all__ = [
    "EntryPublisher", "EntryState", "EntryStatus", "EtcdPublisher", "IntegrityError", "MemoryPublisher",
    "NodeCache", "NodeCacheConfig", "ObjectChanged", "Progress", "RecoveryReport", "make_client", "parse_size",
]
