from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_STATE_UNSPECIFIED: _ClassVar[EntryState]
    ENTRY_STATE_ABSENT: _ClassVar[EntryState]
    ENTRY_STATE_FETCHING: _ClassVar[EntryState]
    ENTRY_STATE_CACHED: _ClassVar[EntryState]
    ENTRY_STATE_FAILED: _ClassVar[EntryState]
ENTRY_STATE_UNSPECIFIED: EntryState
ENTRY_STATE_ABSENT: EntryState
ENTRY_STATE_FETCHING: EntryState
ENTRY_STATE_CACHED: EntryState
ENTRY_STATE_FAILED: EntryState

class Entry(_message.Message):
    __slots__ = ("uri", "state", "local_path", "bytes_done", "bytes_total", "last_used_unix_s", "pinned", "error", "node")
    URI_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_PATH_FIELD_NUMBER: _ClassVar[int]
    BYTES_DONE_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    state: EntryState
    local_path: str
    bytes_done: int
    bytes_total: int
    last_used_unix_s: float
    pinned: bool
    error: str
    node: str
    def __init__(self, uri: _Optional[str] = ..., state: _Optional[_Union[EntryState, str]] = ..., local_path: _Optional[str] = ..., bytes_done: _Optional[int] = ..., bytes_total: _Optional[int] = ..., last_used_unix_s: _Optional[float] = ..., pinned: _Optional[bool] = ..., error: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class PrefetchRequest(_message.Message):
    __slots__ = ("uri", "priority", "deadline_unix_s", "pin_owner")
    URI_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PIN_OWNER_FIELD_NUMBER: _ClassVar[int]
    uri: str
    priority: int
    deadline_unix_s: float
    pin_owner: str
    def __init__(self, uri: _Optional[str] = ..., priority: _Optional[int] = ..., deadline_unix_s: _Optional[float] = ..., pin_owner: _Optional[str] = ...) -> None: ...

class PrefetchResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ("uri", "fetch", "wait_s")
    URI_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    uri: str
    fetch: bool
    wait_s: float
    def __init__(self, uri: _Optional[str] = ..., fetch: _Optional[bool] = ..., wait_s: _Optional[float] = ...) -> None: ...

class ResolveResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class ReadObjectRequest(_message.Message):
    __slots__ = ("uri",)
    URI_FIELD_NUMBER: _ClassVar[int]
    uri: str
    def __init__(self, uri: _Optional[str] = ...) -> None: ...

class ReadObjectResponse(_message.Message):
    __slots__ = ("data", "offset", "total_size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    total_size: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ...) -> None: ...

class ListEntriesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEntriesResponse(_message.Message):
    __slots__ = ("entries", "capacity_bytes", "used_bytes")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    capacity_bytes: int
    used_bytes: int
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., capacity_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ...) -> None: ...

class EvictEntryRequest(_message.Message):
    __slots__ = ("uri", "force")
    URI_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    force: bool
    def __init__(self, uri: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class EvictEntryResponse(_message.Message):
    __slots__ = ("evicted", "freed_bytes")
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    evicted: bool
    freed_bytes: int
    def __init__(self, evicted: _Optional[bool] = ..., freed_bytes: _Optional[int] = ...) -> None: ...

class PlannedStep(_message.Message):
    __slots__ = ("name", "depends_on", "datasets", "gpus", "predicted_start_s", "predicted_duration_s", "node_selector")
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_START_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    datasets: _containers.RepeatedScalarFieldContainer[str]
    gpus: int
    predicted_start_s: float
    predicted_duration_s: float
    node_selector: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., depends_on: _Optional[_Iterable[str]] = ..., datasets: _Optional[_Iterable[str]] = ..., gpus: _Optional[int] = ..., predicted_start_s: _Optional[float] = ..., predicted_duration_s: _Optional[float] = ..., node_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PlannedDataset(_message.Message):
    __slots__ = ("uri", "consumers", "size_bytes", "prefetch_start_s", "deadline_s", "fetchable", "note", "entry")
    URI_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_START_S_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    FETCHABLE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    uri: str
    consumers: _containers.RepeatedScalarFieldContainer[str]
    size_bytes: int
    prefetch_start_s: float
    deadline_s: float
    fetchable: bool
    note: str
    entry: Entry
    def __init__(self, uri: _Optional[str] = ..., consumers: _Optional[_Iterable[str]] = ..., size_bytes: _Optional[int] = ..., prefetch_start_s: _Optional[float] = ..., deadline_s: _Optional[float] = ..., fetchable: _Optional[bool] = ..., note: _Optional[str] = ..., entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("run_id", "format", "pipeline_name", "steps", "datasets", "unresolved")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_NAME_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    UNRESOLVED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    format: str
    pipeline_name: str
    steps: _containers.RepeatedCompositeFieldContainer[PlannedStep]
    datasets: _containers.RepeatedCompositeFieldContainer[PlannedDataset]
    unresolved: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., format: _Optional[str] = ..., pipeline_name: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[PlannedStep, _Mapping]]] = ..., datasets: _Optional[_Iterable[_Union[PlannedDataset, _Mapping]]] = ..., unresolved: _Optional[_Iterable[str]] = ...) -> None: ...

class SubmitPipelineRequest(_message.Message):
    __slots__ = ("yaml", "run_id", "source", "start_prefetch", "parameters")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    YAML_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    START_PREFETCH_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    yaml: str
    run_id: str
    source: str
    start_prefetch: bool
    parameters: _containers.ScalarMap[str, str]
    def __init__(self, yaml: _Optional[str] = ..., run_id: _Optional[str] = ..., source: _Optional[str] = ..., start_prefetch: _Optional[bool] = ..., parameters: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubmitPipelineResponse(_message.Message):
    __slots__ = ("plan",)
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan: Plan
    def __init__(self, plan: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class GetPlanRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetPlanResponse(_message.Message):
    __slots__ = ("plan",)
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan: Plan
    def __init__(self, plan: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class ListPipelinesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PipelineRun(_message.Message):
    __slots__ = ("run_id", "pipeline_name", "started_unix_s", "makespan_s", "datasets", "cached")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_NAME_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    MAKESPAN_S_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    pipeline_name: str
    started_unix_s: float
    makespan_s: float
    datasets: int
    cached: int
    def __init__(self, run_id: _Optional[str] = ..., pipeline_name: _Optional[str] = ..., started_unix_s: _Optional[float] = ..., makespan_s: _Optional[float] = ..., datasets: _Optional[int] = ..., cached: _Optional[int] = ...) -> None: ...

class ListPipelinesResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[PipelineRun]
    def __init__(self, runs: _Optional[_Iterable[_Union[PipelineRun, _Mapping]]] = ...) -> None: ...

class RecordStepDurationRequest(_message.Message):
    __slots__ = ("pipeline", "step", "seconds")
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    step: str
    seconds: float
    def __init__(self, pipeline: _Optional[str] = ..., step: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class RecordStepDurationResponse(_message.Message):
    __slots__ = ("step_key", "seconds")
    STEP_KEY_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    step_key: str
    seconds: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, step_key: _Optional[str] = ..., seconds: _Optional[_Iterable[float]] = ...) -> None: ...

class ListClusterEntriesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListClusterEntriesResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ...) -> None: ...
