from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_FINISHED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_REMOVED: _ClassVar[JobState]

class JobOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_OUTCOME_UNSPECIFIED: _ClassVar[JobOutcome]
    JOB_OUTCOME_FINISHED: _ClassVar[JobOutcome]
    JOB_OUTCOME_FAILED: _ClassVar[JobOutcome]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_FINISHED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_REMOVED: JobState
JOB_OUTCOME_UNSPECIFIED: JobOutcome
JOB_OUTCOME_FINISHED: JobOutcome
JOB_OUTCOME_FAILED: JobOutcome

class RankPlacement(_message.Message):
    __slots__ = ("rank", "node", "device_id", "device_type", "max_batch")
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    rank: int
    node: str
    device_id: str
    device_type: str
    max_batch: int
    def __init__(self, rank: _Optional[int] = ..., node: _Optional[str] = ..., device_id: _Optional[str] = ..., device_type: _Optional[str] = ..., max_batch: _Optional[int] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("job_id", "model", "global_batch", "total_samples", "ranks", "exclusive_samples_per_s", "weight")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    model: str
    global_batch: int
    total_samples: int
    ranks: _containers.RepeatedCompositeFieldContainer[RankPlacement]
    exclusive_samples_per_s: float
    weight: float
    def __init__(self, job_id: _Optional[str] = ..., model: _Optional[str] = ..., global_batch: _Optional[int] = ..., total_samples: _Optional[int] = ..., ranks: _Optional[_Iterable[_Union[RankPlacement, _Mapping]]] = ..., exclusive_samples_per_s: _Optional[float] = ..., weight: _Optional[float] = ...) -> None: ...

class SplitCommand(_message.Message):
    __slots__ = ("job_id", "version", "apply_step", "batch_sizes", "policy", "reason", "issued_unix_s", "number", "shares")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    APPLY_STEP_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ISSUED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    version: int
    apply_step: int
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    policy: str
    reason: str
    issued_unix_s: float
    number: int
    shares: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, job_id: _Optional[str] = ..., version: _Optional[int] = ..., apply_step: _Optional[int] = ..., batch_sizes: _Optional[_Iterable[int]] = ..., policy: _Optional[str] = ..., reason: _Optional[str] = ..., issued_unix_s: _Optional[float] = ..., number: _Optional[int] = ..., shares: _Optional[_Iterable[float]] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("spec", "state", "split", "samples_per_s", "exclusive_samples_per_s", "slowdown", "progress", "elapsed_s", "pinned", "live_ranks", "exclusive_source", "stale", "figures_unix_s", "registered_unix_s", "started_unix_s", "ended_unix_s", "state_reason", "samples_done", "last_step_unix_s")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    LIVE_RANKS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    FIGURES_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ENDED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_DONE_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    state: JobState
    split: SplitCommand
    samples_per_s: float
    exclusive_samples_per_s: float
    slowdown: float
    progress: float
    elapsed_s: float
    pinned: bool
    live_ranks: int
    exclusive_source: str
    stale: bool
    figures_unix_s: float
    registered_unix_s: float
    started_unix_s: float
    ended_unix_s: float
    state_reason: str
    samples_done: int
    last_step_unix_s: float
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., split: _Optional[_Union[SplitCommand, _Mapping]] = ..., samples_per_s: _Optional[float] = ..., exclusive_samples_per_s: _Optional[float] = ..., slowdown: _Optional[float] = ..., progress: _Optional[float] = ..., elapsed_s: _Optional[float] = ..., pinned: _Optional[bool] = ..., live_ranks: _Optional[int] = ..., exclusive_source: _Optional[str] = ..., stale: _Optional[bool] = ..., figures_unix_s: _Optional[float] = ..., registered_unix_s: _Optional[float] = ..., started_unix_s: _Optional[float] = ..., ended_unix_s: _Optional[float] = ..., state_reason: _Optional[str] = ..., samples_done: _Optional[int] = ..., last_step_unix_s: _Optional[float] = ...) -> None: ...

class HistoryEntry(_message.Message):
    __slots__ = ("split", "slowdown")
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    split: SplitCommand
    slowdown: float
    def __init__(self, split: _Optional[_Union[SplitCommand, _Mapping]] = ..., slowdown: _Optional[float] = ...) -> None: ...

class JobDecision(_message.Message):
    __slots__ = ("job_id", "old_batch_sizes", "new_batch_sizes", "slowdown", "predicted_slowdown", "changed", "explanation")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    NEW_BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    old_batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    new_batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    slowdown: float
    predicted_slowdown: float
    changed: bool
    explanation: str
    def __init__(self, job_id: _Optional[str] = ..., old_batch_sizes: _Optional[_Iterable[int]] = ..., new_batch_sizes: _Optional[_Iterable[int]] = ..., slowdown: _Optional[float] = ..., predicted_slowdown: _Optional[float] = ..., changed: _Optional[bool] = ..., explanation: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("policy", "decided_unix_s", "duration_s", "summary", "jobs")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    DECIDED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    policy: str
    decided_unix_s: float
    duration_s: float
    summary: str
    jobs: _containers.RepeatedCompositeFieldContainer[JobDecision]
    def __init__(self, policy: _Optional[str] = ..., decided_unix_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., summary: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[JobDecision, _Mapping]]] = ...) -> None: ...

class PolicyConfig(_message.Message):
    __slots__ = ("name", "period_s", "min_change", "queue", "placement", "shares", "preset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    MIN_CHANGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    name: str
    period_s: float
    min_change: float
    queue: str
    placement: str
    shares: str
    preset: str
    def __init__(self, name: _Optional[str] = ..., period_s: _Optional[float] = ..., min_change: _Optional[float] = ..., queue: _Optional[str] = ..., placement: _Optional[str] = ..., shares: _Optional[str] = ..., preset: _Optional[str] = ...) -> None: ...

class RegisterJobRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class RegisterJobResponse(_message.Message):
    __slots__ = ("job", "job_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    JOB_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: JobSummary
    job_token: str
    def __init__(self, job: _Optional[_Union[JobSummary, _Mapping]] = ..., job_token: _Optional[str] = ...) -> None: ...

class DeregisterJobRequest(_message.Message):
    __slots__ = ("job_id", "outcome", "samples_done", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_DONE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    outcome: JobOutcome
    samples_done: int
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., outcome: _Optional[_Union[JobOutcome, str]] = ..., samples_done: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class DeregisterJobResponse(_message.Message):
    __slots__ = ("ended", "job")
    ENDED_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    ended: bool
    job: JobSummary
    def __init__(self, ended: _Optional[bool] = ..., job: _Optional[_Union[JobSummary, _Mapping]] = ...) -> None: ...

class RemoveJobRequest(_message.Message):
    __slots__ = ("job_id", "purge")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PURGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    purge: bool
    def __init__(self, job_id: _Optional[str] = ..., purge: _Optional[bool] = ...) -> None: ...

class RemoveJobResponse(_message.Message):
    __slots__ = ("previous_state", "purged")
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    previous_state: JobState
    purged: bool
    def __init__(self, previous_state: _Optional[_Union[JobState, str]] = ..., purged: _Optional[bool] = ...) -> None: ...

class StreamCommandsRequest(_message.Message):
    __slots__ = ("job_id", "rank", "known_version")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    known_version: int
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., known_version: _Optional[int] = ...) -> None: ...

class StreamCommandsResponse(_message.Message):
    __slots__ = ("command",)
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: SplitCommand
    def __init__(self, command: _Optional[_Union[SplitCommand, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("include_finished",)
    INCLUDE_FINISHED_FIELD_NUMBER: _ClassVar[int]
    include_finished: bool
    def __init__(self, include_finished: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSummary]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSummary, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "history_limit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    HISTORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    history_limit: int
    def __init__(self, job_id: _Optional[str] = ..., history_limit: _Optional[int] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job", "history")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    job: JobSummary
    history: _containers.RepeatedCompositeFieldContainer[HistoryEntry]
    def __init__(self, job: _Optional[_Union[JobSummary, _Mapping]] = ..., history: _Optional[_Iterable[_Union[HistoryEntry, _Mapping]]] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetPolicyResponse(_message.Message):
    __slots__ = ("policy", "available")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    policy: PolicyConfig
    available: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, policy: _Optional[_Union[PolicyConfig, _Mapping]] = ..., available: _Optional[_Iterable[str]] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: PolicyConfig
    def __init__(self, policy: _Optional[_Union[PolicyConfig, _Mapping]] = ...) -> None: ...

class SetPolicyResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: PolicyConfig
    def __init__(self, policy: _Optional[_Union[PolicyConfig, _Mapping]] = ...) -> None: ...

class PinSplitRequest(_message.Message):
    __slots__ = ("job_id", "batch_sizes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[str] = ..., batch_sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class PinSplitResponse(_message.Message):
    __slots__ = ("split",)
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    split: SplitCommand
    def __init__(self, split: _Optional[_Union[SplitCommand, _Mapping]] = ...) -> None: ...

class ReleaseSplitRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ReleaseSplitResponse(_message.Message):
    __slots__ = ("was_pinned",)
    WAS_PINNED_FIELD_NUMBER: _ClassVar[int]
    was_pinned: bool
    def __init__(self, was_pinned: _Optional[bool] = ...) -> None: ...

class ExplainDecisionRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ExplainDecisionResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    def __init__(self, decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class ProfileMeasurement(_message.Message):
    __slots__ = ("model", "device_type", "devices", "batch", "samples_per_s", "step_s", "step_s_p10", "step_s_p90", "peak_mem_bytes", "scaling_eff", "gpu_util_pct")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    STEP_S_FIELD_NUMBER: _ClassVar[int]
    STEP_S_P10_FIELD_NUMBER: _ClassVar[int]
    STEP_S_P90_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEM_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCALING_EFF_FIELD_NUMBER: _ClassVar[int]
    GPU_UTIL_PCT_FIELD_NUMBER: _ClassVar[int]
    model: str
    device_type: str
    devices: int
    batch: int
    samples_per_s: float
    step_s: float
    step_s_p10: float
    step_s_p90: float
    peak_mem_bytes: int
    scaling_eff: float
    gpu_util_pct: float
    def __init__(self, model: _Optional[str] = ..., device_type: _Optional[str] = ..., devices: _Optional[int] = ..., batch: _Optional[int] = ..., samples_per_s: _Optional[float] = ..., step_s: _Optional[float] = ..., step_s_p10: _Optional[float] = ..., step_s_p90: _Optional[float] = ..., peak_mem_bytes: _Optional[int] = ..., scaling_eff: _Optional[float] = ..., gpu_util_pct: _Optional[float] = ...) -> None: ...

class StepTimeFit(_message.Message):
    __slots__ = ("a_s", "c_s")
    A_S_FIELD_NUMBER: _ClassVar[int]
    C_S_FIELD_NUMBER: _ClassVar[int]
    a_s: float
    c_s: float
    def __init__(self, a_s: _Optional[float] = ..., c_s: _Optional[float] = ...) -> None: ...

class Profile(_message.Message):
    __slots__ = ("model", "device_type", "image_size", "measurements", "fit", "fit_devices", "created_unix", "torch_version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MEASUREMENTS_FIELD_NUMBER: _ClassVar[int]
    FIT_FIELD_NUMBER: _ClassVar[int]
    FIT_DEVICES_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    device_type: str
    image_size: int
    measurements: _containers.RepeatedCompositeFieldContainer[ProfileMeasurement]
    fit: StepTimeFit
    fit_devices: int
    created_unix: float
    torch_version: str
    def __init__(self, model: _Optional[str] = ..., device_type: _Optional[str] = ..., image_size: _Optional[int] = ..., measurements: _Optional[_Iterable[_Union[ProfileMeasurement, _Mapping]]] = ..., fit: _Optional[_Union[StepTimeFit, _Mapping]] = ..., fit_devices: _Optional[int] = ..., created_unix: _Optional[float] = ..., torch_version: _Optional[str] = ...) -> None: ...

class PutProfileRequest(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: Profile
    def __init__(self, profile: _Optional[_Union[Profile, _Mapping]] = ...) -> None: ...

class PutProfileResponse(_message.Message):
    __slots__ = ("replaced",)
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    replaced: bool
    def __init__(self, replaced: _Optional[bool] = ...) -> None: ...

class GetProfileRequest(_message.Message):
    __slots__ = ("model", "device_type")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    model: str
    device_type: str
    def __init__(self, model: _Optional[str] = ..., device_type: _Optional[str] = ...) -> None: ...

class GetProfileResponse(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: Profile
    def __init__(self, profile: _Optional[_Union[Profile, _Mapping]] = ...) -> None: ...

class ListProfilesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProfilesResponse(_message.Message):
    __slots__ = ("profiles",)
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    profiles: _containers.RepeatedCompositeFieldContainer[Profile]
    def __init__(self, profiles: _Optional[_Iterable[_Union[Profile, _Mapping]]] = ...) -> None: ...

class Submission(_message.Message):
    __slots__ = ("job_id", "num_gpus", "node", "devices", "device_type", "model", "global_batch", "total_samples", "exclusive_samples_per_s", "dataset", "submitted_unix_s", "placed_devices", "predicted_sd", "placed_why")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PLACED_DEVICES_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_SD_FIELD_NUMBER: _ClassVar[int]
    PLACED_WHY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    num_gpus: int
    node: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    device_type: str
    model: str
    global_batch: int
    total_samples: int
    exclusive_samples_per_s: float
    dataset: str
    submitted_unix_s: float
    placed_devices: _containers.RepeatedScalarFieldContainer[str]
    predicted_sd: float
    placed_why: str
    def __init__(self, job_id: _Optional[str] = ..., num_gpus: _Optional[int] = ..., node: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ..., device_type: _Optional[str] = ..., model: _Optional[str] = ..., global_batch: _Optional[int] = ..., total_samples: _Optional[int] = ..., exclusive_samples_per_s: _Optional[float] = ..., dataset: _Optional[str] = ..., submitted_unix_s: _Optional[float] = ..., placed_devices: _Optional[_Iterable[str]] = ..., predicted_sd: _Optional[float] = ..., placed_why: _Optional[str] = ...) -> None: ...

class QueueEntry(_message.Message):
    __slots__ = ("job_id", "position", "predicted_start_s", "waited_s", "reason", "submitted")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_START_S_FIELD_NUMBER: _ClassVar[int]
    WAITED_S_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    position: int
    predicted_start_s: float
    waited_s: float
    reason: str
    submitted: bool
    def __init__(self, job_id: _Optional[str] = ..., position: _Optional[int] = ..., predicted_start_s: _Optional[float] = ..., waited_s: _Optional[float] = ..., reason: _Optional[str] = ..., submitted: _Optional[bool] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("submission",)
    SUBMISSION_FIELD_NUMBER: _ClassVar[int]
    submission: Submission
    def __init__(self, submission: _Optional[_Union[Submission, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("submission",)
    SUBMISSION_FIELD_NUMBER: _ClassVar[int]
    submission: Submission
    def __init__(self, submission: _Optional[_Union[Submission, _Mapping]] = ...) -> None: ...

class GetSubmissionRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetSubmissionResponse(_message.Message):
    __slots__ = ("submission", "queue")
    SUBMISSION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    submission: Submission
    queue: QueueEntry
    def __init__(self, submission: _Optional[_Union[Submission, _Mapping]] = ..., queue: _Optional[_Union[QueueEntry, _Mapping]] = ...) -> None: ...

class WithdrawSubmissionRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WithdrawSubmissionResponse(_message.Message):
    __slots__ = ("withdrawn",)
    WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    withdrawn: bool
    def __init__(self, withdrawn: _Optional[bool] = ...) -> None: ...

class ListQueueRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQueueResponse(_message.Message):
    __slots__ = ("entries", "decided_unix_s")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DECIDED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[QueueEntry]
    decided_unix_s: float
    def __init__(self, entries: _Optional[_Iterable[_Union[QueueEntry, _Mapping]]] = ..., decided_unix_s: _Optional[float] = ...) -> None: ...
