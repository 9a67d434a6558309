"""Planner on the shared KFP samples and on hand-written pipelines."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufair.cache.planner import parse_pipeline, plan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kfp"


def load(name: str, **kw):
    return parse_pipeline((FIXTURES / name).read_text(), name, **kw)


@pytest.mark.parametrize("name", ["v2-ir-pipeline_with_importer.yaml", "v2-argo-pipeline_with_importer.yaml"])
def test_importer_sample_follows_uris_from_importers_to_trainers(name: str) -> None:
    p = load(name)
    assert p.format in {"kfp-v2-ir", "argo-workflow-kfp-v2"}
    assert p.step("train").depends_on == ("importer",)
    assert p.step("train").datasets == ("gs://ml-pipeline-playground/shakespeare1.txt",)
    # the second importer's URI is the pipeline parameter's default
    assert p.step("condition-1/train-2").datasets == ("gs://ml-pipeline-playground/shakespeare2.txt",)
    assert p.step("condition-1").condition and p.step("condition-1").depends_on == ("train",)
    assert p.step("condition-1/importer-2").depends_on == ("condition-1",)
    for ds in p.datasets:
        assert not ds.fetchable and "Google Cloud Storage" in (ds.reason or "")
    assert p.unresolved == ()


def test_both_compilations_of_the_importer_sample_agree() -> None:
    ir, argo = load("v2-ir-pipeline_with_importer.yaml"), load("v2-argo-pipeline_with_importer.yaml")
    assert [(s.name, s.depends_on, s.datasets) for s in ir.steps] == [
        (s.name, s.depends_on, s.datasets) for s in argo.steps
    ]


def test_parameter_override_turns_a_gs_dataset_into_a_fetchable_one() -> None:
    p = load("v2-ir-pipeline_with_importer.yaml", parameters={"dataset2": "s3://bucket/shakespeare2.txt"})
    ds = p.dataset("s3://bucket/shakespeare2.txt")
    assert ds.fetchable and ds.consumers == ("condition-1/train-2",)
    pl = plan(p, sizes={ds.uri: 10_000_000}, bandwidth_bytes_per_s=1e6)
    dp = pl.dataset(ds.uri)
    assert dp.deadline_s == pl.step("condition-1/train-2").start_s
    assert dp.status == "scheduled" and dp.prefetch_finish_s <= dp.deadline_s


def test_v1_argo_sample_has_one_step_and_no_datasets() -> None:
    p = load("v1-argo-artifact_pipeline.yaml")
    assert p.format == "argo-workflow"
    assert [s.name for s in p.steps] == ["create-test-artifact"]
    assert p.datasets == () and p.unresolved == ()


def test_argo_nested_dags_loops_and_artifacts() -> None:
    p = load("argo-nested-loops.yaml")
    assert p.step("preprocess").datasets == ("minio://raw/shard-0.tar", "minio://raw/shard-1.tar")
    assert p.step("preprocess").loop.startswith("withItems") and p.step("preprocess").gpus == 1
    assert p.step("preprocess").accelerator == "amd.com/gpu"
    assert set(p.step("training").depends_on) == {"preprocess", "per-shard"}
    assert p.step("training/fetch-labels").depends_on == ("training",)
    assert p.step("training/fetch-labels").datasets == ("s3a://datasets/imagenet/synsets.txt",)
    fit = p.step("training/fit")
    assert fit.gpus == 4 and fit.accelerator == "nvidia.com/gpu"
    assert {"s3://datasets/imagenet/train/", "s3://datasets/imagenet/labels.json", "pvc://team-a-scratch"} <= set(fit.datasets)
    assert "nodeAffinity gpu-type In a100,h100" in fit.node_hints and "nodeSelector pool=gpu" in fit.node_hints
    assert p.dataset("s3://datasets/imagenet/labels.json").endpoint == "minio.kubeflow:9000"
    # a group's dependents wait for the group's last step
    assert p.step("evaluate").depends_on == ("training/report/publish",)
    assert p.step("training/report/publish").depends_on == ("training/report/summarize",)
    assert p.step("evaluate").condition


def test_argo_unresolved_explains_why() -> None:
    reasons = {(u.step, u.reason) for u in load("argo-nested-loops.yaml").unresolved}
    text = " | ".join(r for _, r in reasons)
    assert any(s == "evaluate" and "'eval-data' has no value" in r for s, r in reasons)
    assert any(s == "per-shard" and "at run time" in r for s, r in reasons)
    assert "my-artifact-repos" in text  # an S3 key with no bucket


def test_ir_multidoc_loops_conditions_platform() -> None:
    p = load("ir-multidoc-platform.yaml")
    assert p.format == "kfp-v2-ir"
    stats = p.step("for-loop-1/stats")
    assert set(stats.datasets) == {"s3://datasets/shard-a", "s3://datasets/shard-b", "minio://lake/shard-c"}
    assert p.step("for-loop-1").loop == "loop over 3 items" and stats.parent == "for-loop-1"
    train = p.step("train")
    assert set(train.depends_on) == {"import-train", "import-vocab", "for-loop-1/stats"}
    assert {"s3://datasets/cifar10/train/", "minio://lake/vocab/en.txt", "pvc://shared-cache",
            "hdfs://namenode/tmp/warm"} == set(train.datasets)
    assert train.gpus == 2 and train.accelerator == "nvidia.com/gpu"
    assert "nodeSelector cloud.google.com/gke-accelerator=nvidia-tesla-a100" in train.node_hints
    ev = p.step("condition-2/evaluate")
    assert ev.gpus == 1 and ev.accelerator == "NVIDIA_TESLA_T4" and ev.datasets == ()
    steps_with_reason = {u.step for u in p.unresolved if "holdout_uri" in u.reason}
    assert steps_with_reason == {"condition-2/import-holdout", "condition-2/evaluate"}
    assert any("PVC" in u.reason for u in p.unresolved)


def test_ir_parameter_fills_the_missing_holdout_uri() -> None:
    p = load("ir-multidoc-platform.yaml", parameters={"holdout_uri": "s3://datasets/holdout/"})
    assert p.step("condition-2/evaluate").datasets == ("s3://datasets/holdout/",)
    assert not any("holdout_uri" in u.reason for u in p.unresolved)


def test_pipeline_job_wrapper_uses_runtime_config() -> None:
    text = """
pipelineSpec:
  pipelineInfo: {name: wrapped}
  root:
    inputDefinitions: {parameters: {data: {parameterType: STRING}}}
    dag:
      tasks:
        use:
          componentRef: {name: comp-use}
          inputs: {parameters: {data: {componentInputParameter: data}}}
  components:
    comp-use: {executorLabel: exec-use}
  deploymentSpec:
    executors:
      exec-use: {container: {image: x}}
runtimeConfig:
  parameterValues: {data: "minio://b/k"}
"""
    p = parse_pipeline(text, "job.json")
    assert p.step("use").datasets == ("minio://b/k",)
    assert p.dataset("minio://b/k").origins == ("runtimeConfig.parameterValues.data",)


def test_argo_steps_template_and_with_param_literal() -> None:
    text = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: steps-demo}
spec:
  entrypoint: main
  templates:
  - name: main
    steps:
    - - {name: a, template: t, arguments: {parameters: [{name: data_uri, value: "{{item}}"}]},
         withParam: '["s3://b/one", "s3://b/two"]'}
    - - {name: b, template: t, arguments: {parameters: [{name: data_uri, value: "s3://b/three"}]}}
      - {name: c, template: t}
  - name: t
    inputs: {parameters: [{name: data_uri, default: "s3://b/default"}]}
    container: {image: x, args: ["{{inputs.parameters.data_uri}}"]}
"""
    p = parse_pipeline(text, "steps.yaml")
    assert p.step("a").datasets == ("s3://b/one", "s3://b/two")
    assert p.step("b").depends_on == ("a",) and p.step("c").depends_on == ("a",)
    assert p.step("c").datasets == ("s3://b/default",)


ARGO = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec:\n"


def test_argo_entrypoint_inputs_take_the_workflow_arguments() -> None:
    # KFP v1: pipeline parameters reach every task through the entrypoint's inputs.
    text = ARGO + """  entrypoint: pipe
  arguments:
    parameters:
    - {name: train, value: 's3://data/train.csv'}
    - {name: fixed, value: 's3://data/ignored'}
  templates:
  - name: pipe
    inputs:
      parameters:
      - {name: train}
      - {name: fixed, value: 's3://data/fixed'}
    dag:
      tasks:
      - name: prep
        template: prep
        arguments:
          parameters:
          - {name: src, value: '{{inputs.parameters.train}}'}
          - {name: other, value: '{{inputs.parameters.fixed}}'}
  - name: prep
    inputs:
      parameters:
      - {name: src}
      - {name: other}
    container: {image: x, args: ['{{inputs.parameters.src}}', '{{inputs.parameters.other}}']}
"""
    p = parse_pipeline(text, "p.yaml")
    assert p.step("prep").datasets == ("s3://data/train.csv", "s3://data/fixed")
    assert p.unresolved == ()
    over = parse_pipeline(text, "p.yaml", parameters={"train": "s3://data/other.csv"})
    assert over.step("prep").datasets[0] == "s3://data/other.csv"


def test_argo_recursion_is_planned_once_with_a_note() -> None:
    # KFP v1 recursion: a group calls itself under a condition decided at run time.
    text = ARGO + """  entrypoint: flip
  templates:
  - name: flip
    dag:
      tasks:
      - {name: toss, template: toss}
      - {name: again, template: cond, dependencies: [toss]}
  - name: cond
    dag:
      tasks:
      - {name: flip, template: flip, when: '{{tasks.toss.outputs.result}} == heads'}
  - {name: toss, container: {image: x, args: ['s3://coins/c']}}
"""
    p = parse_pipeline(text, "p.yaml")
    assert [s.name for s in p.steps] == ["toss", "again", "again/flip"]
    assert p.step("toss").datasets == ("s3://coins/c",)
    notes = [u for u in p.unresolved if u.step == "again/flip"]
    assert len(notes) == 1 and "calls itself" in notes[0].reason


def test_argo_pvc_claim_made_at_run_time_is_a_note_not_a_dataset() -> None:
    # KFP v1 VolumeOp: the claim's name is an output of the step that creates it.
    text = ARGO + """  entrypoint: pipe
  arguments:
    parameters: [{name: vol, value: shared-data}]
  volumes:
  - {name: fixed, persistentVolumeClaim: {claimName: '{{workflow.parameters.vol}}'}}
  templates:
  - name: pipe
    dag:
      tasks:
      - {name: create-pvc, template: create-pvc}
      - name: use
        template: use
        dependencies: [create-pvc]
        arguments:
          parameters:
          - {name: create-pvc-name, value: '{{tasks.create-pvc.outputs.parameters.create-pvc-name}}'}
  - name: create-pvc
    resource: {action: create, manifest: 'kind: PersistentVolumeClaim'}
    outputs:
      parameters:
      - {name: create-pvc-name, valueFrom: {jsonPath: '{.metadata.name}'}}
  - name: use
    inputs:
      parameters: [{name: create-pvc-name}]
    container:
      image: x
      volumeMounts: [{name: made, mountPath: /mnt}, {name: fixed, mountPath: /data}]
    volumes:
    - {name: made, persistentVolumeClaim: {claimName: '{{inputs.parameters.create-pvc-name}}'}}
"""
    p = parse_pipeline(text, "p.yaml")
    assert p.step("use").datasets == ("pvc://shared-data",)
    assert [d.uri for d in p.datasets] == ["pvc://shared-data"]
    notes = [u.reason for u in p.unresolved if u.step == "use"]
    assert len(notes) == 1 and "/mnt" in notes[0] and "create-pvc" in notes[0]


def test_components_sharing_an_executor_keep_their_own_pvc_mounts() -> None:
    p = load("kfp-argo-create_mount_delete_dynamic_pvc.yaml")
    notes = {u.step: u.reason for u in p.unresolved}
    assert "/data " in notes["comp"] and "/reused_data" not in notes["comp"]
    assert "/reused_data" in notes["comp-2"]


def test_kfp_v1_pipeline_parameters_reach_the_tasks_that_read_them() -> None:
    p = load("kfp-v1-kubeflow-training-classification.yaml")
    train, schema = ("gs://ml-pipeline-playground/flower/train200.csv",
                     "gs://ml-pipeline-playground/flower/schema.json")
    assert train in p.step("preprocess").datasets and schema in p.step("prediction").datasets
    assert all(d.consumers for d in p.datasets) and p.unresolved == ()


def test_kfp_v1_recursion_sample_parses() -> None:
    p = load("kfp-v1-recursion.yaml")
    inner = "graph-flip-component-1/condition-2/graph-flip-component-1"
    assert p.step(inner).depends_on == ("graph-flip-component-1/condition-2",)
    assert [u.step for u in p.unresolved] == [inner]


def test_importer_uris_of_any_scheme_are_listed_with_the_reason_they_cannot_be_fetched() -> None:
    p = load("kfp-argo-huggingface_importer.yaml")
    assert p.step("use-model").datasets == ("huggingface://gpt2",)
    hub = [d for d in p.datasets if d.uri.startswith("huggingface://")]
    assert len(hub) == 6 and all(not d.fetchable and "huggingface" in (d.reason or "") for d in hub)


def test_old_runtime_config_parameters_are_unwrapped() -> None:
    # KFP SDK 1.x v2-compatible: runtimeConfig.parameters.text = {stringValue: ...}
    assert dict(load("kfp-two_step_pipeline.json").parameters) == {"text": "Hello KFP!"}


def test_pvc_named_by_a_pipeline_parameter() -> None:
    # kfp-kubernetes: pvcNameParameter.componentInputParameter names the enclosing DAG's input.
    notes = load("kfp-pvc-mount.yaml").unresolved
    assert len(notes) == 2 and all("--param pvc_name=" in u.reason for u in notes)
    p = load("kfp-pvc-mount.yaml", parameters={"pvc_name": "shared"})
    assert p.step("consumer").datasets == ("pvc://shared",) and p.unresolved == ()


def test_kfp_v2_argo_reads_the_kubernetes_platform_config() -> None:
    # The PVC comes from a CreatePVC step, so its name is known only at run time.
    notes = load("kfp-argo-parallel_for_mount_pvc.yaml").unresolved
    assert [(u.step, "createpvc" in u.reason) for u in notes] == [("for-loop-2/example-component", True)]


def test_kubernetes_native_pipeline_version() -> None:
    p = load("dspo-k8s-pipeline-version.yaml")
    assert p.format == "kfp-v2-ir" and [s.name for s in p.steps] == ["say-hello"]


def test_accelerators_set_from_parameters_and_tpus() -> None:
    p = load("kfp-pipeline_with_string_machine_fields_pipeline_input.yaml")
    assert (p.step("sum-numbers").gpus, p.step("sum-numbers").accelerator) == (1, "NVIDIA_TESLA_P4")
    over = load("kfp-pipeline_with_string_machine_fields_pipeline_input.yaml",
                parameters={"accelerator_limit": "4"})
    assert over.step("sum-numbers").gpus == 4
    bad = load("kfp-pipeline_with_string_machine_fields_pipeline_input.yaml",
               parameters={"accelerator_limit": "abc"})
    assert bad.step("sum-numbers").gpus == 0
    assert any("'abc' is not a whole number" in u.reason for u in bad.unresolved)
    trainer = load("kfp-pipeline_with_resource_spec.yaml").step("trainer")
    assert trainer.gpus == 0 and any("tpu-v3" in h for h in trainer.node_hints)


def test_kfp_launcher_placeholders_in_argo_templates() -> None:
    # SDK 1.x v2-compatible mode writes KFP placeholders into Argo templates:
    # an input maps to the template's input of that name; outputs are no reads.
    text = ARGO + """  entrypoint: t
  arguments:
    parameters: [{name: src, value: 's3://data/in'}]
  templates:
  - name: t
    inputs:
      parameters: [{name: src}]
    container:
      image: x
      args: ["{{$.inputs.parameters['src']}}", "{{$.outputs.artifacts['model'].uri}}"]
"""
    p = parse_pipeline(text, "p.yaml")
    assert p.step("t").datasets == ("s3://data/in",) and p.unresolved == ()


def test_pipeline_input_artifacts_take_a_uri_from_the_caller() -> None:
    text = """pipelineInfo: {name: p}
schemaVersion: 2.1.0
root:
  inputDefinitions:
    artifacts:
      in_data: {artifactType: {schemaTitle: system.Dataset}}
  dag:
    tasks:
      train:
        componentRef: {name: comp-train}
        inputs:
          artifacts:
            data: {componentInputArtifact: in_data}
components:
  comp-train:
    executorLabel: exec-train
    inputDefinitions:
      artifacts:
        data: {artifactType: {schemaTitle: system.Dataset}}
deploymentSpec:
  executors:
    exec-train: {container: {image: x}}
"""
    bare = parse_pipeline(text, "p.yaml")
    assert bare.step("train").datasets == ()
    assert {u.step for u in bare.unresolved} == {None, "train"}
    assert all("--param in_data=URI" in u.reason for u in bare.unresolved)
    given = parse_pipeline(text, "p.yaml", parameters={"in_data": "s3://d/train/", "typo": "1"})
    assert given.step("train").datasets == ("s3://d/train/",)
    assert [u.reason for u in given.unresolved] == ["the pipeline has no input called 'typo'"]


def test_embedded_python_source_counts_string_literals_not_docstrings() -> None:
    from gpufair.cache.planner.uris import uris_in_text
    program = '''
import os
def prep(out: str):
    """Reads data in the format gs://bucket_name/sub_dir/blob_name.csv."""
    # e.g. s3://example/commented-out
    src = "s3://real-bucket/train/"
    os.system(f"aws s3 cp {src} s3://real-bucket/copy/")
'''
    assert sorted(uris_in_text(program)[0]) == ["s3://real-bucket/copy/", "s3://real-bucket/train/"]
    shell = "set -e\ngsutil cp gs://b/x /tmp/x  # a shell script is scanned whole\n"
    assert uris_in_text(shell)[0] == ["gs://b/x"]


def test_where_embedded_python_writes_is_no_dataset() -> None:
    from gpufair.cache.planner.uris import uris_in_text
    program = '''
import pandas as pd
from google.cloud import aiplatform
def train(day: str):
    df = pd.read_csv("s3://lake/raw/train.csv")
    output_dir = "s3://lake/models/"
    df.to_csv(f"s3://lake/clean/{day}.csv")
    aiplatform.Model.upload(display_name="m", artifact_uri="gs://bkt/models/")
    run(data="s3://lake/labels.csv", destination="s3://lake/preds/")
'''
    assert sorted(uris_in_text(program)[0]) == ["s3://lake/labels.csv", "s3://lake/raw/train.csv"]
    assert uris_in_text(program)[1] == []


@pytest.mark.parametrize("name,data", [("dataset_uri", True), ("data_dir", True), ("src", True),
                                       ("data_root", True), ("checkpoint_path", True),
                                       ("root_dir", False), ("output_path", False),
                                       ("outputPath", False), ("staging_bucket", False),
                                       ("location", False), ("data_version", False)])
def test_which_parameter_names_suggest_input_data(name: str, data: bool) -> None:
    from gpufair.cache.planner.graph import looks_like_data
    assert looks_like_data(name) is data


def test_kfp_backend_workflow_says_where_the_task_specs_are() -> None:
    p = load("kfp-backend-dra_static_claim_check.yaml")
    assert [u.reason for u in p.unresolved] == [
        "a KFP backend workflow: its tasks' commands and inputs are not in this file; "
        "plan the pipeline's compiled IR YAML instead"]


def test_dra_resource_claims_become_hints() -> None:
    text = """pipelineInfo: {name: p}
root:
  dag:
    tasks:
      check: {componentRef: {name: comp-check}}
components:
  comp-check: {executorLabel: exec-check}
deploymentSpec:
  executors:
    exec-check: {container: {image: x}}
---
platforms:
  kubernetes:
    deploymentSpec:
      executors:
        exec-check:
          podResourceClaims: [{resourceClaimTemplateName: gpu-claim}]
"""
    step = parse_pipeline(text, "p.yaml").step("check")
    assert step.gpus == 0 and step.node_hints == ("resource claim gpu-claim (DRA; devices not counted)",)


def test_endpoints_git_repos_https_buckets_and_shared_volumes() -> None:
    text = ARGO + """  entrypoint: t
  arguments:
    parameters:
    - {name: mlflow_tracking_uri, value: 'http://mlflow:5000'}
    - {name: minio_endpoint, value: 'http://minio:9000/'}
  volumes:
  - {name: shared, nfs: {server: nas.local, path: /datasets}}
  - {name: share, azureFile: {shareName: training-data, secretName: s}}
  templates:
  - name: t
    container:
      image: x
      args: ['https://github.com/org/repo.git',
             'https://my-bkt.s3.eu-west-1.amazonaws.com/train/data.csv', '{{workflow.parameters.mlflow_tracking_uri}}']
      volumeMounts: [{name: shared, mountPath: /data}, {name: share, mountPath: /share}]
"""
    p = parse_pipeline(text, "p.yaml")
    reasons = {d.uri: d.reason for d in p.datasets}
    # A bare host is a service, not data; nor is it listed because a parameter holds it.
    assert not any(u.startswith("http://mlflow") or u.startswith("http://minio") for u in reasons)
    assert "bucket 'my-bkt' addressed over HTTPS" in reasons["https://my-bkt.s3.eu-west-1.amazonaws.com/train/data.csv"]
    assert "git repository" in reasons["https://github.com/org/repo.git"]
    assert set(p.step("t").datasets) >= {"nfs://nas.local/datasets", "azurefile://training-data"}
    assert "NFS" in reasons["nfs://nas.local/datasets"]
    assert "nfs nas.local/datasets at /data" in p.step("t").node_hints


def test_git_repository_urls_are_not_downloads() -> None:
    from gpufair.cache.planner.uris import classify
    assert classify("https://github.com/org/repo.git") == (False, "a git repository, not a dataset in object storage")
    assert "HTTPS download" in (classify("https://example.com/data/train.csv")[1] or "")


def test_bucket_and_object_given_apart_get_a_note() -> None:
    text = ARGO + """  entrypoint: t
  arguments:
    parameters: [{name: bucket_name, value: raw-data}, {name: object_name, value: /train/x.csv}]
  templates:
  - name: t
    inputs:
      parameters: [{name: bucket_name}, {name: object_name}]
    container: {image: x, args: ['{{inputs.parameters.bucket_name}}', '{{inputs.parameters.object_name}}']}
"""
    p = parse_pipeline(text, "p.yaml")
    assert p.datasets == ()
    (note,) = p.unresolved
    assert note.step == "t" and "if it reads s3://raw-data/train/x.csv" in note.reason


def test_a_step_that_submits_a_training_job_shows_its_gpus_and_volumes() -> None:
    # KFP v1 submits PyTorchJobs through Argo resource templates.
    text = ARGO + """  entrypoint: train
  templates:
  - name: train
    resource:
      action: apply
      manifest: |
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata: {name: '{{workflow.name}}-job'}
        spec:
          pytorchReplicaSpecs:
            Master:
              replicas: 1
              template:
                spec:
                  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 2}}}]
                  volumes: [{name: d, persistentVolumeClaim: {claimName: imagenet}}]
            Worker:
              replicas: 3
              template:
                spec:
                  containers: [{name: c, resources: {limits: {nvidia.com/gpu: "2"}}}]
"""
    step = parse_pipeline(text, "p.yaml").step("train")
    assert (step.gpus, step.accelerator) == (8, "nvidia.com/gpu")
    assert step.datasets == ("pvc://imagenet",) and "launches a PyTorchJob" in step.node_hints
    broken = text.replace("kind: PyTorchJob", "kind: [unclosed")
    assert parse_pipeline(broken, "p.yaml").step("train").gpus == 0  # unreadable manifest: no guess


def test_object_store_https_urls_in_free_text() -> None:
    from gpufair.cache.planner.uris import uris_in_text
    text = ("kedro run --params src=https://my-bkt.s3.eu-west-1.amazonaws.com/train.csv,x=1 "
            "&& pip install -i https://pypi.org/simple pkg")
    assert uris_in_text(text)[0] == ["https://my-bkt.s3.eu-west-1.amazonaws.com/train.csv"]


def test_hostile_text_stays_linear() -> None:
    # Overlapping host patterns once backtracked: 120 KB took 24 s.
    from gpufair.cache.planner.uris import uris_in_text
    assert uris_in_text("https://" + "a.s3." * 4000 + " x") == ([], [])


def test_fstring_uri_in_a_program_is_completed_at_run_time() -> None:
    from gpufair.cache.planner.uris import uris_in_text
    program = 'import os\ndef f(day):\n    return f"s3://lake/events/{day}.parquet"\n'
    assert uris_in_text(program) == ([], ["s3://lake/events/{{...}}"])
    only_docs = 'def f():\n    """s3://docs/x"""\n    # s3://commented/out\n    pass\n'
    assert uris_in_text(only_docs) == ([], [])


_ITEMS_WITH_PARAMS = ARGO + """  entrypoint: main
  arguments:
    parameters: [{name: shard-a, value: s3://data/a.tar}, {name: shard-b}]
  templates:
  - name: main
    dag:
      tasks:
      - name: each
        template: consume
        arguments: {parameters: [{name: uri, value: '{{item}}'}]}
        withItems: ['{{workflow.parameters.shard-a}}', 's3://data/fixed.tar']
      - name: each-map
        template: consume
        arguments: {parameters: [{name: uri, value: '{{item.uri}}'}]}
        withItems: [{uri: '{{workflow.parameters.shard-b}}'}]
  - name: consume
    inputs: {parameters: [{name: uri}]}
    container: {image: alpine, args: ['--data', '{{inputs.parameters.uri}}']}
"""


def test_placeholders_inside_loop_items_are_filled_in_from_the_workflow() -> None:
    p = parse_pipeline(_ITEMS_WITH_PARAMS, "items.yaml", parameters={"shard-b": "s3://data/b.tar"})
    assert set(p.step("each").datasets) == {"s3://data/a.tar", "s3://data/fixed.tar"}
    assert p.step("each-map").datasets == ("s3://data/b.tar",)
    # Without a value the item says why, instead of passing the placeholder on.
    p = parse_pipeline(_ITEMS_WITH_PARAMS, "items.yaml")
    assert p.step("each-map").datasets == ()
    assert any(u.step == "each-map" and "shard-b" in u.reason for u in p.unresolved)


def test_where_a_step_writes_is_not_a_dataset_to_prefetch() -> None:
    p = load("kfp-v1-kubeflow-training-classification.yaml", parameters={"output": "s3://bkt/out"})
    assert not [d.uri for d in p.datasets if d.uri.startswith("s3://bkt/out")]
    assert "gs://ml-pipeline-playground/flower/train200.csv" in p.step("preprocess").datasets


@pytest.mark.parametrize("line, skipped", [
    (["--output", "s3://b/o", "--data", "s3://b/i"], {1}),
    (["--job-dir=gs://b/j", "--train", "s3://b/t"], {0}),
    (["python", "-m", "x", "--pipeline_root", "gs://r", "--log_dir", "/tmp/l"], {4, 6}),
    (["--input-path", "s3://b/i", "--model-dir", "s3://b/m"], set()),
])
def test_output_flags_name_the_argument_that_holds_the_location(line, skipped) -> None:
    from gpufair.cache.planner.graph import output_args

    assert output_args(line) == skipped


_ON_EXIT = ARGO + """  entrypoint: main
  onExit: cleanup
  templates:
  - name: main
    dag:
      tasks:
      - {name: train, template: work}
  - name: work
    container: {image: alpine, args: ['--data', 's3://data/train/']}
  - name: cleanup
    container: {image: alpine, args: ['--labels', 's3://data/labels.csv']}
"""


def test_the_exit_handler_runs_after_the_workflow_and_its_inputs_count() -> None:
    p = parse_pipeline(_ON_EXIT, "exit.yaml")
    assert p.step("onExit").depends_on == ("train",) and p.step("onExit").condition
    assert p.step("onExit").datasets == ("s3://data/labels.csv",)
    with pytest.raises(Exception, match="missing field 'kind'"):
        parse_pipeline(_ON_EXIT.replace("kind: Workflow\n", ""), "exit.yaml")


def test_a_task_waits_for_the_task_that_creates_the_pvc_it_mounts() -> None:
    p = load("kfp-ir-pipeline_with_volume.yaml")
    assert p.step("comp").depends_on == ("createpvc",)
    assert set(p.step("comp-2").depends_on) == {"comp", "createpvc"}
    assert p.step("comp-3").depends_on == () and p.step("comp-3").datasets == ("pvc://my-existing-pvc",)
