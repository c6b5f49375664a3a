"""The deployment files: every Kubernetes manifest validates (strictly,
unknown fields refused) against the Kubernetes API schemas with
kubernetes-validate, and agrees with the code it deploys — probes hit routes
that exist, settings named in the ConfigMap and Secret are real settings,
grace periods outlast the drains, the worker autoscaler follows a metric the
service exports, and the Grafana dashboard charts only metrics that exist."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app import metrics
from app.main import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
KUBERNETES = "1.31.0"  # the oldest release the manifests support (preStop sleep)


def manifests() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                out.append((path.name, doc))
    return out


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


@pytest.mark.parametrize("name,doc", manifests(), ids=lambda v: v if isinstance(v, str) else "")
def test_manifests_validate_against_the_kubernetes_schemas(name: str, doc: dict) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_validator_refuses_a_broken_manifest() -> None:
    deployment = copy.deepcopy(by_kind("Deployment")[0])
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
    deployment = copy.deepcopy(by_kind("Deployment")[0])
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)


def test_kustomization_lists_every_manifest_but_the_examples_and_the_job() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == files - {"secret.example.yaml", "migrate-job.yaml"}


def _containers() -> list[dict[str, Any]]:
    pods = [d["spec"]["template"]["spec"] for d in by_kind("Deployment") + by_kind("Job")]
    return [c for pod in pods for c in pod["containers"]]


def test_probes_and_commands_match_the_service(settings: Settings) -> None:
    paths = set(create_app(settings).openapi()["paths"])
    for container in _containers():
        assert container["args"][0] in ("serve", "worker", "migrate")
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in container:
                path = container[probe]["httpGet"]["path"]
                assert path in paths or (container["args"][0] == "worker" and path == "/metrics")
        assert container["resources"]["requests"] and container["resources"]["limits"]


def test_configured_names_are_real_settings() -> None:
    fields = {f"KEEPMEM_{name.upper()}" for name in Settings.model_fields}
    config = by_kind("ConfigMap")[0]["data"]
    secret = by_kind("Secret")[0]["stringData"]
    assert set(config) <= fields, set(config) - fields
    assert set(secret) <= fields, set(secret) - fields
    text = (K8S / "configmap.yaml").read_text()
    for commented in re.findall(r"#\s*(KEEPMEM_\w+):", text):
        assert commented in fields


def test_grace_periods_outlast_the_drains() -> None:
    config = by_kind("ConfigMap")[0]["data"]
    deployments = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in by_kind("Deployment")
    }
    api, worker = deployments["keepmem-api"], deployments["keepmem-worker"]
    pre_stop = api["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert (
        api["terminationGracePeriodSeconds"]
        > int(config["KEEPMEM_SHUTDOWN_GRACE_SECONDS"]) + pre_stop
    )
    assert worker["terminationGracePeriodSeconds"] > int(config["KEEPMEM_WORKER_DRAIN_SECONDS"])
    assert by_kind("PodDisruptionBudget") and len(by_kind("HorizontalPodAutoscaler")) == 2


def _exported() -> set[str]:
    names = set()
    for family in metrics.REGISTRY.collect():
        names.add(family.name)
        names.update(s.name for s in family.samples)
    # Histograms' series exist once observed; name them from the families.
    for family in metrics.REGISTRY.collect():
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def test_the_worker_autoscaler_follows_an_exported_metric() -> None:
    worker_hpa = next(
        h for h in by_kind("HorizontalPodAutoscaler") if h["metadata"]["name"] == "keepmem-worker"
    )
    metric = worker_hpa["spec"]["metrics"][0]["external"]["metric"]
    assert metric["name"] in _exported()
    assert metric["selector"]["matchLabels"] == {"status": "pending"}


def test_the_dashboard_charts_only_exported_metrics() -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "keepmem.json").read_text())
    exported = _exported()
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(expressions) >= 10
    for expr in expressions:
        used = {m for m in re.findall(r"\b(keepmem_\w+|process_\w+)", expr)}
        assert used and used <= exported, (expr, used - exported)


def test_compose_offers_pgbouncer_as_an_option() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    bouncer = compose["services"]["pgbouncer"]
    assert bouncer["profiles"] == ["pgbouncer"]
    assert bouncer["environment"]["POOL_MODE"] == "transaction"
    env = compose["x-keepmem"]["environment"]
    assert "KEEPMEM_DB_PGBOUNCER" in env
