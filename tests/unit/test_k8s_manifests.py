"""The Kubernetes manifests (deploy/k8s) are valid objects that wire every role as an operator
relies on: probes, its own Secrets only, hardening, shutdown timing, scaling, Services.

No cluster or kustomize binary runs in CI: the base is rendered here (only the kustomization
keys this renderer implements; any other fails), validated offline against the Kubernetes API
schemas (kubernetes-validate, strict), and create-secrets.sh runs against a stand-in kubectl.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nexus import cli
from nexus.contracts.roles import KNOWN_APPS, ROLE_PORT_OFFSET, ROLE_SERVICE, Role
from nexus.platform.settings import CoreSettings, env_var_names

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BASE = K8S / "base"
KUBERNETES_VERSION = "1.30"
PORT_BASE = 8000
USER_ID = 10001

#: Roles that verify other workloads' tokens hold every role's public key.
RECEIVERS = {"runtime-api", "catalog"}
#: Secrets a role mounts besides `nexus-secrets-<role>` (no other role may mount them).
ROLE_EXTRA_SECRETS = {
    "runtime-api": {"nexus-identity-keys"},
    "integration": {"nexus-webhook-secrets"},
}
#: Roles that are replicated, so they need a disruption budget and an autoscaler.
STATELESS = {"gateway", "runtime-api", "runtime-worker", "catalog", "app-sfcrm"}

POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "Job"}
#: The kinds the renderer knows how to place (Namespace: cluster-scoped, renamed to `namespace`).
RENDERED_KINDS = {
    *POD_TEMPLATE_KINDS,
    "Namespace",
    "ConfigMap",
    "Service",
    "PersistentVolumeClaim",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
}


# ---------------------------------------------------------------- rendering the base


class UnsupportedKustomization(Exception):
    """kustomization.yaml uses something this renderer does not implement."""


def _only(mapping: dict[str, Any], allowed: set[str], what: str) -> None:
    unknown = set(mapping) - allowed
    if unknown:
        raise UnsupportedKustomization(f"{what}: {sorted(unknown)} (teach the renderer first)")


def _pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj["kind"] in POD_TEMPLATE_KINDS:
        yield obj["spec"]["template"]["spec"]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _split_image(image: str) -> tuple[str, str | None]:
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
        return name, tag
    return name, None


def _set_image(container: dict[str, Any], rule: dict[str, str]) -> None:
    name, tag = _split_image(container["image"])
    if name != rule["name"]:
        return
    new = rule.get("newName", name)
    if "digest" in rule:
        container["image"] = f"{new}@{rule['digest']}"
    elif "newTag" in rule:
        container["image"] = f"{new}:{rule['newTag']}"
    else:
        container["image"] = f"{new}:{tag}" if tag else new


def _load(base: Path, resources: list[str]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for entry in resources:
        path = base / entry
        if not path.is_file():
            raise UnsupportedKustomization(f"resource {entry!r} is not a file of this base")
        objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for obj in objects:
        if obj["kind"] not in RENDERED_KINDS:
            raise UnsupportedKustomization(f"kind {obj['kind']} (teach the renderer first)")
    return objects


def _set_namespace(objects: list[dict[str, Any]], namespace: str) -> None:
    for obj in objects:
        if obj["kind"] == "Namespace":
            obj["metadata"]["name"] = namespace  # as kustomize does
        else:
            obj["metadata"]["namespace"] = namespace


def _add_labels(objects: list[dict[str, Any]], rule: dict[str, Any]) -> None:
    _only(rule, {"pairs", "includeSelectors", "includeTemplates"}, "labels")
    if rule.get("includeSelectors"):
        raise UnsupportedKustomization("labels: includeSelectors (teach the renderer first)")
    for obj in objects:
        obj["metadata"].setdefault("labels", {}).update(rule["pairs"])
        if rule.get("includeTemplates") and obj["kind"] in POD_TEMPLATE_KINDS:
            template = obj["spec"]["template"].setdefault("metadata", {})
            template.setdefault("labels", {}).update(rule["pairs"])


def _replace_images(objects: list[dict[str, Any]], rule: dict[str, str]) -> None:
    _only(rule, {"name", "newName", "newTag", "digest"}, "images")
    for obj in objects:
        for pod in _pod_specs(obj):
            for container in _containers(pod):
                _set_image(container, rule)


def render(base: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build base` produces, for the features used here."""
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    _only(
        kustomization,
        {"apiVersion", "kind", "namespace", "labels", "images", "resources"},
        "kustomization.yaml",
    )
    objects = _load(base, kustomization["resources"])
    if kustomization.get("namespace"):
        _set_namespace(objects, kustomization["namespace"])
    for rule in kustomization.get("labels", []):
        _add_labels(objects, rule)
    for rule in kustomization.get("images", []):
        _replace_images(objects, rule)
    return objects


@cache
def _rendered() -> tuple[dict[str, Any], ...]:
    return tuple(render(BASE))


def _objects(kind: str | None = None) -> list[dict[str, Any]]:
    return [copy.deepcopy(o) for o in _rendered() if kind is None or o["kind"] == kind]


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in _objects(kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _config() -> dict[str, str]:
    return _one("ConfigMap", "nexus-config")["data"]


def _roles() -> dict[str, tuple[list[str], int, str | None]]:
    """Each workload (Deployment name): its `nexus serve` arguments, port, database Secret."""
    roles = {}
    for role in Role:
        port = PORT_BASE + ROLE_PORT_OFFSET[role]
        service = ROLE_SERVICE[role]
        db = f"nexus-db-{service.value}" if service else None
        if role is Role.APP:
            for app in KNOWN_APPS:
                roles[f"app-{app}"] = (["--role=app", f"--app={app}", f"--port={port}"], port, db)
        else:
            roles[role.value] = ([f"--role={role.value}", f"--port={port}"], port, db)
    return roles


def _workload(name: str) -> dict[str, Any]:
    found = [
        o
        for o in _objects()
        if o["kind"] in ("Deployment", "StatefulSet") and o["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"{name}: {len(found)} Deployments/StatefulSets"
    return found[0]


def _selects(selector: dict[str, str], obj: dict[str, Any]) -> bool:
    labels = obj["spec"]["template"]["metadata"].get("labels", {})
    return bool(selector) and selector.items() <= labels.items()


def _secret_refs(container: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def _secret_volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v["secret"] for v in pod.get("volumes", []) if "secret" in v}


def _mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


# ---------------------------------------------------------------- rendering and schemas


def test_the_kustomization_lists_every_manifest_and_renders() -> None:
    listed = set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    images = {c["image"] for o in _objects() for p in _pod_specs(o) for c in _containers(p)}
    assert images == {"nexus:latest"}
    assert {o["metadata"].get("namespace") for o in _objects() if o["kind"] != "Namespace"} == {
        "nexus"
    }
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "nexus" for o in _objects())


def test_the_renderer_refuses_kustomization_keys_it_does_not_implement(tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(BASE, base)
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    kustomization["patches"] = [{"path": "gateway-patch.yaml"}]
    (base / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    with pytest.raises(UnsupportedKustomization, match="patches"):
        render(base)


def test_every_object_is_valid_for_the_kubernetes_api() -> None:
    examples = [
        d for p in (K8S / "examples").glob("*.yaml") for d in yaml.safe_load_all(p.read_text())
    ]
    assert examples
    for obj in [*_objects(), *examples]:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("field", "value"),
    [("readinesProbe", {"httpGet": {"path": "/readyz", "port": "http"}}), ("ports", "8000")],
)
def test_schema_validation_rejects_a_broken_deployment(field: str, value: object) -> None:
    broken = _workload("gateway")
    broken["spec"]["template"]["spec"]["containers"][0][field] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


# ---------------------------------------------------------------- roles


@pytest.mark.parametrize("name", sorted(_roles()))
def test_each_role_serves_on_its_port_with_readiness_and_liveness(name: str) -> None:
    args, port, _db = _roles()[name]
    pod = _workload(name)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == args
    assert "command" not in container  # the image's `nexus serve`
    ports = {p["name"]: p["containerPort"] for p in container["ports"] if p["protocol"] == "TCP"}
    assert ports["http"] == port
    for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]:
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert ports.get(get["port"], get["port"]) == port, probe
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize("name", sorted(_roles()))
def test_each_role_mounts_only_its_own_secrets(name: str) -> None:
    _args, _port, db = _roles()[name]
    pod = _workload(name)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    volumes = _secret_volumes(pod)
    assert {v["secretName"] for v in volumes.values()} == {
        f"nexus-secrets-{name}",
        *ROLE_EXTRA_SECRETS.get(name, set()),
    }
    mount = _mounts(container)["/app/var/secrets"]
    assert mount["readOnly"] is True
    own = volumes[mount["name"]]
    assert own["secretName"] == f"nexus-secrets-{name}"
    assert own["defaultMode"] == 0o400
    assert pod["securityContext"]["fsGroup"] == USER_ID
    paths = {item["path"] for item in own["items"]}
    assert {p for p in paths if p.endswith(".key")} == {f"workload/{name}.key"}
    if name in RECEIVERS:
        assert {f"workload/{w}.pub" for w in _roles()} <= paths
    assert all(item["path"] == f"workload/{item['key']}" for item in own["items"])
    assert {secret for secret, _key in _secret_refs(container)} == ({db} if db else set())


def _pod_templates() -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], p) for o in _objects() for p in _pod_specs(o)]


def test_every_container_is_hardened_and_bounded() -> None:
    assert len(_pod_templates()) == len(_roles()) + 1  # and the migrate Job
    for owner, pod in _pod_templates():
        assert pod["automountServiceAccountToken"] is False, owner
        writable = {
            v["name"] for v in pod["volumes"] if "emptyDir" in v or "persistentVolumeClaim" in v
        }
        for container in _containers(pod):
            where = f"{owner}/{container['name']}"
            context = {**pod["securityContext"], **container.get("securityContext", {})}
            assert context["runAsNonRoot"] is True, where
            assert context["runAsUser"] == USER_ID, where
            assert context["runAsGroup"] == USER_ID, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert context["seccompProfile"]["type"] == "RuntimeDefault", where
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), where
            mounts = _mounts(container)
            for path in ("/app/var", "/tmp"):
                assert mounts[path]["name"] in writable, f"{where}: {path}"
                assert not mounts[path].get("readOnly"), f"{where}: {path}"


def test_pods_outlive_the_readiness_delay_and_the_drain() -> None:
    config = _config()
    delay = float(config["NEXUS_SHUTDOWN_DELAY_SECONDS"])
    assert delay > 0
    grace = float(
        config.get(
            "NEXUS_SHUTDOWN_GRACE_SECONDS",
            CoreSettings.model_fields["shutdown_grace_seconds"].default,
        )
    )
    for name in _roles():
        pod = _workload(name)["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] > delay + grace + 5, name
        [container] = pod["containers"]
        assert {"configMapRef": {"name": "nexus-config"}} in container["envFrom"], name


def test_the_migrate_job_migrates_then_installs_the_builtin_apps() -> None:
    pod = _one("Job", "nexus-migrate")["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    [migrate] = pod["initContainers"]
    assert "nexus migrate --wait" in " ".join(migrate["command"])
    assert "nexus admin bootstrap" in " ".join(migrate["command"])
    assert {s for s, _ in _secret_refs(migrate) if s.startswith("nexus-db-")} == {
        "nexus-db-runtime",
        "nexus-db-catalog",
        "nexus-db-integration",
    }
    assert "/app/var/secrets" not in _mounts(migrate)  # migrations need no workload key
    [install] = pod["containers"]
    assert install["command"][:3] == ["nexus", "catalog", "install-builtin"]
    assert "--wait" in install["command"]
    assert _secret_refs(install) == {("nexus-db-catalog", "url")}
    secrets = _secret_volumes(pod)
    mount = _mounts(install)["/app/var/secrets"]
    assert secrets[mount["name"]]["secretName"] == "nexus-secrets-catalog"
    assert [i["path"] for i in secrets[mount["name"]]["items"]] == ["workload/catalog.key"]
    assert "NEXUS_RUNTIME_API_URL" in _config()


@pytest.mark.parametrize("name", sorted(STATELESS))
def test_stateless_roles_have_a_disruption_budget_and_an_autoscaler(name: str) -> None:
    workload = _workload(name)
    assert "replicas" not in workload["spec"]  # the autoscaler owns it; an apply would reset it
    budgets = [
        b
        for b in _objects("PodDisruptionBudget")
        if _selects(b["spec"]["selector"]["matchLabels"], workload)
    ]
    assert len(budgets) == 1
    assert not [
        w["metadata"]["name"]
        for w in _objects("Deployment")
        if w["metadata"]["name"] != name
        and _selects(budgets[0]["spec"]["selector"]["matchLabels"], w)
    ]
    [hpa] = [
        h
        for h in _objects("HorizontalPodAutoscaler")
        if h["spec"]["scaleTargetRef"]
        == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    ]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    [container] = workload["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"]  # CPU utilisation is relative to it


def test_integration_keeps_webhook_bodies_on_its_one_volume() -> None:
    workload = _workload("integration")
    pod = workload["spec"]["template"]["spec"]
    [container] = pod["containers"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    [(path, mount)] = [(p, m) for p, m in _mounts(container).items() if m["name"] in claims]
    assert Path("/app/var/ingress/bodies").is_relative_to(path)
    assert not mount.get("readOnly")
    claim = _one("PersistentVolumeClaim", claims[mount["name"]])
    if claim["spec"]["accessModes"] != ["ReadWriteMany"]:
        assert workload["kind"] == "StatefulSet" or (
            workload["spec"]["replicas"] == 1 and workload["spec"]["strategy"]["type"] == "Recreate"
        )
    assert "integration" not in {
        h["spec"]["scaleTargetRef"]["name"] for h in _objects("HorizontalPodAutoscaler")
    }


def test_every_service_selects_pods_and_targets_a_declared_port() -> None:
    workloads = [o for o in _objects() if o["kind"] in ("Deployment", "StatefulSet")]
    for service in _objects("Service"):
        name = service["metadata"]["name"]
        selected = [w for w in workloads if _selects(service["spec"]["selector"], w)]
        assert selected, name
        for workload in selected:
            [container] = workload["spec"]["template"]["spec"]["containers"]
            declared = {
                (p.get("name"), p["containerPort"], p.get("protocol", "TCP"))
                for p in container["ports"]
            }
            for port in service["spec"]["ports"]:
                target, protocol = port["targetPort"], port.get("protocol", "TCP")
                assert any(
                    target in (n, number) and protocol == proto for n, number, proto in declared
                ), f"{name}:{port['port']}/{protocol}"


def test_every_role_is_reachable_where_the_others_look_for_it() -> None:
    urls = {k: v for k, v in _config().items() if re.fullmatch(r"NEXUS_\w+_URL", k)}
    urls.pop("NEXUS_PUBLIC_BASE_URL")
    assert len(urls) == len(_roles()) - 1  # every role but the gateway
    for variable, url in urls.items():
        match = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", url)
        assert match, f"{variable}={url}"
        host, port = match.groups()
        assert variable == f"NEXUS_{host.upper().replace('-', '_')}_URL"
        service = _one("Service", host)
        assert int(port) in {p["port"] for p in service["spec"]["ports"]}
        assert int(port) == _roles()[host][1]
    gateway = _one("Service", "gateway")
    assert {p["port"] for p in gateway["spec"]["ports"]} == {_roles()["gateway"][1]}


def test_every_setting_the_manifests_set_is_one_nexus_reads() -> None:
    used = set(_config())
    for _owner, pod in _pod_templates():
        for container in _containers(pod):
            used |= {e["name"] for e in container.get("env", [])}
    known = env_var_names()
    assert used <= known, sorted(used - known)


# ---------------------------------------------------------------- the Secrets


FAKE_KUBECTL = """
import json, os, re, sys
from pathlib import Path

args = sys.argv[1:]
if args[:3] == ["create", "secret", "generic"]:
    data = {}
    for arg in args[4:]:
        if arg.startswith("--from-file="):
            spec = arg.removeprefix("--from-file=")
            key, sep, path = spec.partition("=")
            if not sep:
                source = Path(spec)
                files = [source]
                if source.is_dir():
                    files = sorted(f for f in source.iterdir() if f.is_file())
                data.update({f.name: f.read_text() for f in files})
            else:
                data[key] = Path(path).read_text()
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]+", key) for key in data), sorted(data)
    namespace = args[args.index("--namespace") + 1]
    print(json.dumps({"name": args[3], "namespace": namespace, "data": data}))
elif args[0] == "apply":
    with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
        log.write(sys.stdin.read().strip() + "\\n")
else:
    sys.exit(f"unexpected kubectl {args}")
"""


def _init_secrets_output(directory: Path) -> None:
    """What `nexus admin init-secrets --dir` writes (the real command), plus a webhook secret."""
    assert cli.main(["admin", "init-secrets", "--dir", str(directory)]) == 0
    assert sorted(p.name for p in directory.iterdir()) == sorted(_roles())
    (directory / "integration" / "webhooks").mkdir()
    (directory / "integration" / "webhooks" / "stripe").write_text("whsec_x\n")


def _run_create_secrets(
    tmp_path: Path, directory: Path, env: dict[str, str]
) -> tuple[int, str, list[dict[str, Any]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "fake_kubectl.py").write_text(FAKE_KUBECTL)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "fake_kubectl.py"}" "$@"\n'
    )
    kubectl.chmod(0o755)
    log = tmp_path / "applied.jsonl"
    done = subprocess.run(
        ["sh", str(K8S / "create-secrets.sh"), str(directory)],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_KUBECTL_LOG": str(log), **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    applied = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done.returncode, done.stderr, applied


def test_create_secrets_makes_every_secret_and_key_the_manifests_reference(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    _init_secrets_output(directory)
    urls = {
        s: f"mysql+aiomysql://nexus_{s}:pw@mariadb:3306/nexus_{s}"
        for s in ("runtime", "catalog", "integration")
    }
    env = {f"NEXUS_{s.upper()}_DATABASE_URL": url for s, url in urls.items()}
    env["NEXUS_BOOTSTRAP_ADMIN_PASSWORD"] = "correct horse"
    code, stderr, applied = _run_create_secrets(tmp_path, directory, env)
    assert code == 0, stderr
    created = {s["name"]: s["data"] for s in applied}
    assert len(created) == len(applied)
    assert {s["namespace"] for s in applied} == {"nexus"}
    for service, url in urls.items():
        assert created[f"nexus-db-{service}"] == {"url": url}  # no trailing newline
    for owner, pod in _pod_templates():
        for container in _containers(pod):
            for secret, key in _secret_refs(container):
                assert key in created.get(secret, {}), f"{owner}: {secret}/{key}"
        for volume in _secret_volumes(pod).values():
            keys = created.get(volume["secretName"])
            assert keys is not None, f"{owner}: {volume['secretName']}"
            missing = {i["key"] for i in volume.get("items", [])} - set(keys)
            assert not missing, f"{owner}: {volume['secretName']} lacks {sorted(missing)}"
    readme = (K8S / "README.md").read_text()
    assert all(name in readme or name.startswith("nexus-secrets-") for name in created)


def test_create_secrets_refuses_a_directory_without_a_role_key(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    _init_secrets_output(directory)
    (directory / "app-sfcrm" / "workload" / "app-sfcrm.key").unlink()
    code, stderr, applied = _run_create_secrets(tmp_path, directory, {})
    assert code != 0
    assert "app-sfcrm.key" in stderr
    assert applied == []
