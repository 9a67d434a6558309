from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeviceSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_SOURCE_UNSPECIFIED: _ClassVar[DeviceSource]
    DEVICE_SOURCE_NVML: _ClassVar[DeviceSource]
    DEVICE_SOURCE_EMULATED: _ClassVar[DeviceSource]
    DEVICE_SOURCE_CPU: _ClassVar[DeviceSource]
DEVICE_SOURCE_UNSPECIFIED: DeviceSource
DEVICE_SOURCE_NVML: DeviceSource
DEVICE_SOURCE_EMULATED: DeviceSource
DEVICE_SOURCE_CPU: DeviceSource

class DeviceReading(_message.Message):
    __slots__ = ("source", "utilization_percent", "memory_used_bytes", "memory_total_bytes", "device_name")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    source: DeviceSource
    utilization_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    device_name: str
    def __init__(self, source: _Optional[_Union[DeviceSource, str]] = ..., utilization_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., device_name: _Optional[str] = ...) -> None: ...

class StepRecord(_message.Message):
    __slots__ = ("step", "local_batch", "compute_s", "data_wait_s", "samples_total", "steps_total", "unix_time_s", "device")
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BATCH_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    DATA_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    UNIX_TIME_S_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    step: int
    local_batch: int
    compute_s: float
    data_wait_s: float
    samples_total: int
    steps_total: int
    unix_time_s: float
    device: DeviceReading
    def __init__(self, step: _Optional[int] = ..., local_batch: _Optional[int] = ..., compute_s: _Optional[float] = ..., data_wait_s: _Optional[float] = ..., samples_total: _Optional[int] = ..., steps_total: _Optional[int] = ..., unix_time_s: _Optional[float] = ..., device: _Optional[_Union[DeviceReading, _Mapping]] = ...) -> None: ...

class ReportTelemetryRequest(_message.Message):
    __slots__ = ("job_id", "rank", "node", "device_id", "global_batch", "total_samples", "records", "dropped_total", "batch_seq", "incarnation")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    node: str
    device_id: str
    global_batch: int
    total_samples: int
    records: _containers.RepeatedCompositeFieldContainer[StepRecord]
    dropped_total: int
    batch_seq: int
    incarnation: int
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., node: _Optional[str] = ..., device_id: _Optional[str] = ..., global_batch: _Optional[int] = ..., total_samples: _Optional[int] = ..., records: _Optional[_Iterable[_Union[StepRecord, _Mapping]]] = ..., dropped_total: _Optional[int] = ..., batch_seq: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class ReportTelemetryResponse(_message.Message):
    __slots__ = ("batch_seq", "accepted", "rejected", "error")
    BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    batch_seq: int
    accepted: int
    rejected: int
    error: str
    def __init__(self, batch_seq: _Optional[int] = ..., accepted: _Optional[int] = ..., rejected: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class RankStats(_message.Message):
    __slots__ = ("rank", "node", "device_id", "local_batch", "compute_s_per_sample", "compute_s_fixed", "step_time_s", "data_stall_fraction", "samples_total", "last_step", "last_report_unix_s", "dropped_total")
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BATCH_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_PER_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIXED_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    DATA_STALL_FRACTION_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    rank: int
    node: str
    device_id: str
    local_batch: int
    compute_s_per_sample: float
    compute_s_fixed: float
    step_time_s: float
    data_stall_fraction: float
    samples_total: int
    last_step: int
    last_report_unix_s: float
    dropped_total: int
    def __init__(self, rank: _Optional[int] = ..., node: _Optional[str] = ..., device_id: _Optional[str] = ..., local_batch: _Optional[int] = ..., compute_s_per_sample: _Optional[float] = ..., compute_s_fixed: _Optional[float] = ..., step_time_s: _Optional[float] = ..., data_stall_fraction: _Optional[float] = ..., samples_total: _Optional[int] = ..., last_step: _Optional[int] = ..., last_report_unix_s: _Optional[float] = ..., dropped_total: _Optional[int] = ...) -> None: ...

class JobStats(_message.Message):
    __slots__ = ("job_id", "samples_per_s", "samples_per_s_smoothed", "samples_done", "samples_total", "progress", "steps_done", "data_stall_fraction", "first_report_unix_s", "last_report_unix_s", "ranks", "global_batch")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_SMOOTHED_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_DONE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STEPS_DONE_FIELD_NUMBER: _ClassVar[int]
    DATA_STALL_FRACTION_FIELD_NUMBER: _ClassVar[int]
    FIRST_REPORT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    samples_per_s: float
    samples_per_s_smoothed: float
    samples_done: int
    samples_total: int
    progress: float
    steps_done: int
    data_stall_fraction: float
    first_report_unix_s: float
    last_report_unix_s: float
    ranks: _containers.RepeatedCompositeFieldContainer[RankStats]
    global_batch: int
    def __init__(self, job_id: _Optional[str] = ..., samples_per_s: _Optional[float] = ..., samples_per_s_smoothed: _Optional[float] = ..., samples_done: _Optional[int] = ..., samples_total: _Optional[int] = ..., progress: _Optional[float] = ..., steps_done: _Optional[int] = ..., data_stall_fraction: _Optional[float] = ..., first_report_unix_s: _Optional[float] = ..., last_report_unix_s: _Optional[float] = ..., ranks: _Optional[_Iterable[_Union[RankStats, _Mapping]]] = ..., global_batch: _Optional[int] = ...) -> None: ...

class DeviceOccupant(_message.Message):
    __slots__ = ("job_id", "rank", "busy_fraction", "compute_s_per_step", "holds_back")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    BUSY_FRACTION_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    HOLDS_BACK_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    busy_fraction: float
    compute_s_per_step: float
    holds_back: bool
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., busy_fraction: _Optional[float] = ..., compute_s_per_step: _Optional[float] = ..., holds_back: _Optional[bool] = ...) -> None: ...

class DeviceStats(_message.Message):
    __slots__ = ("device_id", "node", "utilization_percent", "occupants", "memory_used_bytes", "source")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    OCCUPANTS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    node: str
    utilization_percent: float
    occupants: _containers.RepeatedCompositeFieldContainer[DeviceOccupant]
    memory_used_bytes: int
    source: DeviceSource
    def __init__(self, device_id: _Optional[str] = ..., node: _Optional[str] = ..., utilization_percent: _Optional[float] = ..., occupants: _Optional[_Iterable[_Union[DeviceOccupant, _Mapping]]] = ..., memory_used_bytes: _Optional[int] = ..., source: _Optional[_Union[DeviceSource, str]] = ...) -> None: ...

class GetJobStatsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobStatsResponse(_message.Message):
    __slots__ = ("stats",)
    STATS_FIELD_NUMBER: _ClassVar[int]
    stats: JobStats
    def __init__(self, stats: _Optional[_Union[JobStats, _Mapping]] = ...) -> None: ...

class ListJobStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobStatsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStats]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStats, _Mapping]]] = ...) -> None: ...

class ListDeviceStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDeviceStatsResponse(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[DeviceStats]
    def __init__(self, devices: _Optional[_Iterable[_Union[DeviceStats, _Mapping]]] = ...) -> None: ...

class WatchJobStatsRequest(_message.Message):
    __slots__ = ("job_id", "interval_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    interval_s: float
    def __init__(self, job_id: _Optional[str] = ..., interval_s: _Optional[float] = ...) -> None: ...

class WatchJobStatsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStats]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStats, _Mapping]]] = ...) -> None: ...
