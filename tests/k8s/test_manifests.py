"""k8s/: both overlays render, every object validates offline against the Kubernetes API schemas
(kubernetes-validate, strict: unknown fields are errors), and the settings that matter hold:
grpc probes on the plaintext health port, a non-root read-only container, the PDB, the HPA, the
store of each overlay, and a ConfigMap whose every key is a real `leaseq serve` setting."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from leaseq.cli.serve_cmd import serve as serve_command
from leaseq.server.app import LIVENESS_SERVICE
from leaseq.server.service import SERVICE_NAME

from .kustomize import by_identity, kubectl, render, render_in_python, render_with_kubectl

K8S = Path(__file__).resolve().parents[2] / "k8s"
OVERLAYS = ("sqlite", "postgres")
# The oldest Kubernetes the manifests promise to work on, and the newest the validator knows.
VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())

Obj = dict[str, Any]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request) -> tuple[str, list[Obj]]:
    return request.param, render(K8S / "overlays" / request.param)


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def workload(objects: list[Obj]) -> Obj:
    [found] = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    return found


def container(objects: list[Obj]) -> Obj:
    [found] = workload(objects)["spec"]["template"]["spec"]["containers"]
    return found


def config(objects: list[Obj]) -> dict[str, str]:
    ref = container(objects)["envFrom"][0]["configMapRef"]["name"]
    return one(objects, "ConfigMap", ref)["data"]


def port_of(listen: str) -> int:
    return int(listen.rpartition(":")[2])


def named_ports(objects: list[Obj]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container(objects)["ports"]}


# --- rendering and schema validation ----------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(overlay, version: str) -> None:
    name, objects = overlay
    kinds = {o["kind"] for o in objects}
    assert {"ConfigMap", "Service", "ServiceAccount"} <= kinds, kinds
    for obj in objects:
        # validate raises on an invalid object, and on a kind it has no schema for (the CLI
        # would only warn about the latter).
        kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_rejects_an_unknown_field(overlay) -> None:
    """The control for the test above: strict mode really refuses what the API would."""
    _, objects = overlay
    broken = copy.deepcopy(workload(objects))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpcc"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


@pytest.mark.skipif(kubectl() is None, reason="kubectl is not installed: nothing to compare with")
@pytest.mark.parametrize("name", OVERLAYS)
def test_the_python_renderer_matches_kubectl(name: str) -> None:
    directory = K8S / "overlays" / name
    assert by_identity(render_in_python(directory)) == by_identity(render_with_kubectl(directory))


# --- what both overlays promise ---------------------------------------------------------------


def test_probes_are_grpc_on_the_plaintext_health_port(overlay) -> None:
    _, objects = overlay
    c = container(objects)
    health_port = port_of(config(objects)["LEASEQ_HEALTH_LISTEN"])
    assert named_ports(objects)["health"] == health_port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert set(c[probe]["grpc"]) == {"port", "service"}, probe
        assert c[probe]["grpc"]["port"] == health_port, probe
    # Readiness follows the drain (NOT_SERVING on SIGTERM); liveness does not, so a draining
    # pod is taken out of the Service but never restarted for it.
    assert c["readinessProbe"]["grpc"]["service"] == SERVICE_NAME
    assert c["livenessProbe"]["grpc"]["service"] == LIVENESS_SERVICE
    assert c["startupProbe"]["grpc"]["service"] == LIVENESS_SERVICE
    live = c["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 30


def test_non_root_read_only_and_no_privileges(overlay) -> None:
    _, objects = overlay
    pod = workload(objects)["spec"]["template"]["spec"]
    c = container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert pod["automountServiceAccountToken"] is False
    assert one(objects, "ServiceAccount", pod["serviceAccountName"])
    # A Service named leaseq would inject LEASEQ_* variables, which leaseq serve reads as flags.
    assert pod["enableServiceLinks"] is False
    # /tmp is the only writable path besides the store's volume.
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/tmp" in mounts


def test_resources_are_bounded(overlay) -> None:
    _, objects = overlay
    resources = container(objects)["resources"]
    for part in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[part]), part


def test_config_is_made_of_real_serve_settings(overlay, monkeypatch) -> None:
    _, objects = overlay
    data = config(objects)
    envvars = {p.envvar for p in serve_command.params if getattr(p, "envvar", None)}
    unknown = set(data) - envvars
    assert not unknown, f"the ConfigMap sets variables leaseq serve does not read: {unknown}"
    # ... and leaseq serve's own parser takes every value (types, choices, durations).
    for key, value in data.items():
        monkeypatch.setenv(key, value)
    params = serve_command.make_context("serve", []).params
    assert params["allow_unauthenticated"] is True
    assert params["max_connection_age"] == float(data["LEASEQ_MAX_CONNECTION_AGE"])
    assert params["log_format"] == data["LEASEQ_LOG_FORMAT"]
    ports = named_ports(objects)
    assert port_of(data["LEASEQ_LISTEN"]) == ports["grpc"]
    assert port_of(data["LEASEQ_METRICS_LISTEN"]) == ports["metrics"]
    # The server's drain must end before the kubelet's SIGKILL.
    pod = workload(objects)["spec"]["template"]["spec"]
    assert float(data["LEASEQ_GRACE"]) + 5 <= pod["terminationGracePeriodSeconds"]
    assert float(data["LEASEQ_MAX_CONNECTION_AGE"]) > 0
    assert float(data["LEASEQ_MAX_CONNECTION_AGE_GRACE"]) >= 30  # a long poll's longest wait


def test_metrics_port_is_annotated_for_scraping(overlay) -> None:
    _, objects = overlay
    annotations = workload(objects)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == named_ports(objects)["metrics"]
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_service_reaches_the_pods(overlay) -> None:
    _, objects = overlay
    service = one(objects, "Service", "leaseq")
    w = workload(objects)
    labels = w["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert w["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = named_ports(objects)
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in ports
    assert {p["name"] for p in service["spec"]["ports"]} == {"grpc", "metrics"}


# --- each overlay -----------------------------------------------------------------------------


def test_sqlite_is_one_stateful_replica_on_a_volume() -> None:
    objects = render(K8S / "overlays" / "sqlite")
    sts = one(objects, "StatefulSet")
    assert sts["spec"]["replicas"] == 1
    [claim] = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    c = container(objects)
    [store] = [e for e in c["env"] if e["name"] == "LEASEQ_STORE"]
    assert store["value"].startswith("sqlite:///")
    db_dir = str(Path(store["value"][len("sqlite://") :]).parent)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts[db_dir] == claim["metadata"]["name"]
    # The pod runs as a user that can write the volume.
    assert sts["spec"]["template"]["spec"]["securityContext"]["fsGroup"] > 0
    headless = one(objects, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert not [o for o in objects if o["kind"] in ("HorizontalPodAutoscaler", "Deployment")]


def test_postgres_is_autoscaled_replicas_with_a_pdb_and_a_secret_dsn() -> None:
    objects = render(K8S / "overlays" / "postgres")
    deployment = one(objects, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    # Replicas belong to the HPA: a re-apply must not reset them.
    assert "replicas" not in deployment["spec"]
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert rolling["maxUnavailable"] == 0
    pdb = one(objects, "PodDisruptionBudget")
    # maxUnavailable, never minAvailable: a node drain is never blocked.
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [store] = [e for e in container(objects)["env"] if e["name"] == "LEASEQ_STORE"]
    assert "value" not in store
    assert set(store["valueFrom"]["secretKeyRef"]) == {"name", "key"}
    # Worker processes (serve --workers), one per core of the cpu limit, read by serve itself.
    [workers] = [e for e in container(objects)["env"] if e["name"] == "LEASEQ_WORKERS"]
    option = next(p for p in serve_command.params if p.name == "workers")
    assert option.envvar == "LEASEQ_WORKERS"
    assert 1 < option.type.convert(workers["value"], option, None)
    assert int(workers["value"]) <= float(container(objects)["resources"]["limits"]["cpu"])
    # No password is committed: the Secret is the operator's.
    assert not [o for o in objects if o["kind"] == "Secret"]
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
