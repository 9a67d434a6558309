"""Every etcd key gpufair uses, in one place (patroni-style path helpers).

Layout under the root (default `/gpufair`):
  jobs/<job>/spec               job registration (JSON)
  jobs/<job>/split              current split, versioned (JSON; version never goes backwards)
  jobs/<job>/members/<rank>     trainer liveness, bound to the lease of the replica serving its stream
  jobs/<job>/pin                manual split pinned by an operator (JSON)
  jobs/<job>/life               the job's life: queued, running, ended how, with its final figures (JSON)
  history/<job>/<version>       past splits with the decision that made them (kept out of jobs/,
                                which every scheduler replica mirrors; the newest 200 are kept)
  profiles/<model>/<gpu_type>   exclusive-speed profile (JSON)
  scheduler/leader              leader identity, bound to the leader's lease
  scheduler/policy              active policy name and parameters (JSON)
  scheduler/decision            the latest decision round, for "explain" (JSON)
  cache/<node>/entries/<id>     one cached dataset on a node (JSON)
  cache/<node>/member           cache service liveness, lease-bound
  pipelines/<run>/plan          prefetch plan for a pipeline run (JSON)
  steps/<step_key>/durations    observed step durations for the planner (JSON)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,252}$")


def check_segment(kind: str, value: str) -> str:
    """Return `value` if it is safe as one key segment, else raise ValueError.

    Ids become path segments, so '/', '..', empty strings and control
    characters are refused rather than escaped: one job can never name
    another job's keys.
    """
    if not _SEGMENT.match(value) or value in {".", ".."}:
        raise ValueError(
            f"{kind} {value!r} is not a valid id: use 1-253 characters from "
            "letters, digits and . _ : @ + -, starting with a letter or digit"
        )
    return value


@dataclass(frozen=True)
class Keys:
    """Key builder bound to a root prefix, so tests can isolate themselves."""

    root: str = "/gpufair"

    def _k(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    # jobs
    def jobs_prefix(self) -> str:
        return self._k("jobs") + "/"

    def job_prefix(self, job: str) -> str:
        return self._k("jobs", check_segment("job id", job)) + "/"

    def job_spec(self, job: str) -> str:
        return self.job_prefix(job) + "spec"

    def job_split(self, job: str) -> str:
        return self.job_prefix(job) + "split"

    def job_history(self, job: str, version: int) -> str:
        return self.job_history_prefix(job) + f"{version:020d}"

    def job_history_prefix(self, job: str) -> str:
        return self._k("history", check_segment("job id", job)) + "/"

    def job_member(self, job: str, rank: int) -> str:
        return self.job_prefix(job) + f"members/{rank}"

    def job_members_prefix(self, job: str) -> str:
        return self.job_prefix(job) + "members/"

    def job_pin(self, job: str) -> str:
        return self.job_prefix(job) + "pin"

    def job_life(self, job: str) -> str:
        return self.job_prefix(job) + "life"

    # profiles
    def submissions_prefix(self) -> str:
        return self._k("submissions") + "/"

    def submission(self, job: str) -> str:
        return self.submissions_prefix() + check_segment("job id", job)

    def queue(self) -> str:
        return self._k("scheduler", "queue")

    def profiles_prefix(self) -> str:
        return self._k("profiles") + "/"

    def profile(self, model: str, gpu_type: str) -> str:
        return self._k("profiles", check_segment("model", model), check_segment("gpu type", gpu_type))

    # scheduler
    def leader(self) -> str:
        return self._k("scheduler", "leader")

    def policy(self) -> str:
        return self._k("scheduler", "policy")

    def decision(self) -> str:
        return self._k("scheduler", "decision")

    # cache
    def cache_prefix(self) -> str:
        return self._k("cache") + "/"

    def cache_node_prefix(self, node: str) -> str:
        return self._k("cache", check_segment("node", node)) + "/"

    def cache_entry(self, node: str, entry_id: str) -> str:
        return self.cache_node_prefix(node) + "entries/" + check_segment("cache entry", entry_id)

    def cache_member(self, node: str) -> str:
        return self.cache_node_prefix(node) + "member"

    # pipelines
    def pipeline_plan(self, run: str) -> str:
        return self._k("pipelines", check_segment("pipeline run", run), "plan")

    def step_durations(self, step_key: str) -> str:
        return self._k("steps", check_segment("step key", step_key), "durations")
