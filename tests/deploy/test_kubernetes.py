"""deploy/kubernetes: every manifest valid against the Kubernetes schemas of one fixed
release (kubernetes-validate carries them; nothing is fetched), and the promises across
files: probes on paths the gateway serves, a grace period longer than the drain, the
migration Job applied before the Deployment, Secrets referenced and never inlined."""

from __future__ import annotations

import copy
import re
import stat
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest

from localgate.app.operations import OPERATIONS
from localgate.cli import main
from localgate.config import Settings, load_settings
from tests.deploy.tools import KUBERNETES, ROOT, load_all_yaml, load_yaml

# The release the manifests are written for (kubernetes-validate is pinned in pyproject).
KUBERNETES_VERSION = "1.32.0"
PREPARE = ("localgate.dev/stage", "prepare")


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object the kustomization applies, by (kind, name)."""
    kustomization = load_yaml(KUBERNETES / "kustomization.yaml")
    found = {}
    for resource in kustomization["resources"]:
        for document in load_all_yaml(KUBERNETES / resource):
            found[(document["kind"], document["metadata"]["name"])] = document
    return found


def deployment() -> dict[str, Any]:
    return manifests()[("Deployment", "localgate")]


def job() -> dict[str, Any]:
    return manifests()[("Job", "localgate-migrate")]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (found,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(found)


def configmap_text() -> str:
    return str(manifests()[("ConfigMap", "localgate-config")]["data"]["localgate.yaml"])


def configured(tmp_path: Path) -> Settings:
    """The ConfigMap's configuration, as the gateway loads it; what the pods get from
    Secrets is given as the variables that carry it (or win over the files)."""
    path = tmp_path / "localgate.yaml"
    path.write_text(configmap_text())
    env = {
        "GEMINI_API_KEY": "AIza-test",
        "LOCALGATE_REDIS_URL": "redis://redis:6379/0",
        "LOCALGATE_AUDIT_POSTGRES_DSN": "postgresql://localgate@postgres:5432/localgate",
        "LOCALGATE_DATABASE_URL": "postgresql://localgate@postgres:5432/localgate",
    }
    return load_settings(path, env)[0]


def test_every_file_of_the_folder_is_applied_by_the_kustomization() -> None:
    kustomization = load_yaml(KUBERNETES / "kustomization.yaml")
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}

    assert set(kustomization["resources"]) == files
    images = {image["name"] for image in kustomization["images"]}
    assert images == {container(deployment())["image"], container(job())["image"]}


@pytest.mark.parametrize("path", sorted(KUBERNETES.glob("*.yaml")), ids=lambda p: p.name)
def test_each_manifest_is_valid_for_the_kubernetes_release(path: Path) -> None:
    for document in load_all_yaml(path):
        if document["kind"] == "Kustomization":
            continue
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_validator_refuses_a_misspelt_field_and_a_wrong_type() -> None:
    misspelt = copy.deepcopy(deployment())
    misspelt["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    wrong = copy.deepcopy(deployment())
    wrong["spec"]["replicas"] = "two"

    for broken in (misspelt, wrong):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_configmap_is_valid_for_replicas_that_share_state(tmp_path: Path) -> None:
    settings = configured(tmp_path)

    assert settings.server.host == "0.0.0.0"  # noqa: S104
    assert settings.audit.store == "postgres"
    assert settings.limits.backend == "redis"
    assert settings.cache.chroma_url
    assert str(settings.data_dir) == "/var/lib/localgate"


def test_the_probes_are_on_paths_and_ports_the_gateway_serves(tmp_path: Path) -> None:
    gateway = container(deployment())
    ports = {port["name"]: port["containerPort"] for port in gateway["ports"]}
    settings = configured(tmp_path)

    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert gateway[probe]["httpGet"]["path"] in OPERATIONS
        assert ports[gateway[probe]["httpGet"]["port"]] == settings.server.port
    assert "--port" in gateway["args"]
    assert int(gateway["args"][gateway["args"].index("--port") + 1]) == settings.server.port
    service = manifests()[("Service", "localgate")]
    assert service["spec"]["ports"][0]["targetPort"] in ports


def test_the_grace_period_outlasts_the_pre_stop_sleep_and_the_whole_drain(tmp_path: Path) -> None:
    spec = deployment()["spec"]["template"]["spec"]
    gateway = container(deployment())
    sleep = gateway["lifecycle"]["preStop"]["exec"]["command"]
    settings = configured(tmp_path)

    assert sleep[0] == "sleep"
    assert int(sleep[1]) >= settings.server.drain_delay_s > 0
    assert spec["terminationGracePeriodSeconds"] > (
        int(sleep[1]) + settings.server.drain_delay_s + settings.server.drain_timeout_s
    )


def test_the_pods_run_unprivileged_on_a_read_only_root_with_resources() -> None:
    for workload in (deployment(), job()):
        spec = workload["spec"]["template"]["spec"]
        gateway = container(workload)
        context = gateway["securityContext"]

        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["automountServiceAccountToken"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert {"cpu", "memory"} <= set(gateway["resources"]["requests"])
        assert "memory" in gateway["resources"]["limits"]
        # What a read-only root leaves writable: the data directory and /tmp, as volumes.
        for init in spec.get("initContainers", []):
            assert init["securityContext"] == context
            assert {"cpu", "memory"} <= set(init["resources"]["limits"])
        mounted = {mount["mountPath"] for mount in gateway["volumeMounts"]}
        assert {"/var/lib/localgate", "/tmp"} <= mounted  # noqa: S108 - a mount point


def test_the_pod_disruption_budget_and_autoscaler_keep_a_replica_serving() -> None:
    objects = manifests()
    selector = deployment()["spec"]["selector"]["matchLabels"]
    labels = deployment()["spec"]["template"]["metadata"]["labels"]
    budget = objects[("PodDisruptionBudget", "localgate")]["spec"]
    autoscaler = objects[("HorizontalPodAutoscaler", "localgate")]["spec"]

    assert selector.items() <= labels.items()
    assert budget["selector"]["matchLabels"] == selector
    assert objects[("Service", "localgate")]["spec"]["selector"] == selector
    assert budget["minAvailable"] >= 1
    assert autoscaler["scaleTargetRef"]["name"] == deployment()["metadata"]["name"]
    assert autoscaler["minReplicas"] > budget["minAvailable"]
    assert autoscaler["maxReplicas"] >= autoscaler["minReplicas"]
    # The autoscaler owns the count: a replicas field would reset it on every apply.
    assert "replicas" not in deployment()["spec"]


def test_the_migration_job_runs_localgate_migrate_before_the_rollout() -> None:
    objects = manifests()
    migrate = container(job())
    command = migrate["args"]

    assert command == ["migrate"]
    assert main.get_command(main.make_context("localgate", list(command)), command[0])
    # The Job and what it needs are in the first apply (-l localgate.dev/stage=prepare);
    # the Deployment is not.
    prepared = {key for key, o in objects.items() if _label(o, PREPARE)}
    assert ("Job", "localgate-migrate") in prepared
    assert ("Deployment", "localgate") not in prepared
    volumes = job()["spec"]["template"]["spec"]["volumes"]
    needs = {("ConfigMap", v["configMap"]["name"]) for v in volumes if "configMap" in v}
    needs |= {("ServiceAccount", job()["spec"]["template"]["spec"]["serviceAccountName"])}
    needs |= {("Namespace", "localgate"), ("NetworkPolicy", "localgate")}
    assert needs <= prepared
    assert job()["metadata"]["annotations"]["argocd.argoproj.io/hook"] == "PreSync"
    # The Job migrates the database the replicas use, with their configuration and image.
    assert migrate["image"] == container(deployment())["image"]
    assert _database_env(migrate) == _database_env(container(deployment()))
    # The documented order: the prepare step, waiting for the Job, then everything.
    guide = (ROOT / "docs" / "deploy.md").read_text()
    steps = [
        "kubectl apply -k deploy/kubernetes -l localgate.dev/stage=prepare",
        "kubectl -n localgate wait --for=condition=complete job/localgate-migrate",
        "kubectl apply -k deploy/kubernetes\n",
    ]
    positions = [guide.find(step) for step in steps]
    assert -1 not in positions, positions
    assert positions == sorted(positions)


def test_no_secret_is_inlined_and_every_secret_is_referenced_by_name(tmp_path: Path) -> None:
    objects = manifests()
    text = "\n".join(p.read_text() for p in KUBERNETES.glob("*.yaml"))

    assert not [key for key in objects if key[0] == "Secret"]
    assert not re.search(r"^\s*stringData:", text, re.M)
    # The configuration names files and services, never a credential.
    config = configmap_text()
    for url in re.findall(r"[a-z+]+://\S+", config):
        assert urlsplit(url).password is None, url
    assert not re.search(r"AIza[0-9A-Za-z_-]{35}|password|postgres_dsn|redis_url", config)
    for workload in (deployment(), job()):
        for variable in container(workload)["env"]:
            name = variable["name"]
            if re.search(r"URL|DSN|TOKEN|KEY|PASSWORD", name) and "PROXY" not in name:
                assert "secretKeyRef" in variable.get("valueFrom", {}), name
    volumes = deployment()["spec"]["template"]["spec"]["volumes"]
    secrets = {v["name"]: v["secret"] for v in volumes if "secret" in v}
    # Owner and group (fsGroup) only: never readable by others.
    assert all(secret["defaultMode"] & 0o007 == 0 for secret in secrets.values())
    # The gateway itself mounts no Secret: it reads the owner-only copies key-files makes.
    gateway_mounts = {m["name"] for m in container(deployment())["volumeMounts"]}
    assert not gateway_mounts & set(secrets)


def test_every_key_file_the_gateway_reads_is_an_owner_only_copy_of_a_secret(
    tmp_path: Path,
) -> None:
    spec = deployment()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (init,) = spec["initContainers"]
    copies = dict(re.findall(r"install -m 0600 (\S+)/\* (\S+)/", init["command"][-1]))
    init_mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    gateway_mounts = {m["mountPath"]: m["name"] for m in container(deployment())["volumeMounts"]}
    settings = configured(tmp_path)

    assert init["image"] == container(deployment())["image"]
    for path in (
        settings.audit.master_key_file,
        settings.audit.signing_key_file,
        settings.proxy.signature_key_file,
        settings.upstream.api_key_file,
    ):
        folder = str(PurePosixPath(str(path)).parent)
        (source,) = [s for s, target in copies.items() if target == folder]
        assert "secret" in volumes[init_mounts[source]], path
        # The same in-memory volume in both containers.
        assert gateway_mounts[folder] == init_mounts[folder]
        assert volumes[gateway_mounts[folder]]["emptyDir"]["medium"] == "Memory"


def test_the_key_copy_follows_kubernetes_secret_links_and_leaves_owner_only_files(
    tmp_path: Path,
) -> None:
    """key-files' command, run on a folder laid out as the kubelet lays out a Secret volume
    (files are links into a timestamped folder through ``..data``)."""
    (init,) = deployment()["spec"]["template"]["spec"]["initContainers"]
    script = init["command"][-1]
    root = tmp_path / "root"
    contents = {"keys": ["master.key", "signing.key", "seal.key"], "upstream": []}
    contents["upstream"] = ["gemini-api-key"]
    for name, files in contents.items():
        secret = root / "etc/localgate/secrets" / name
        version = secret / "..2026_12_01_00_00_00.000000001"
        version.mkdir(parents=True)
        (secret / "..data").symlink_to(version.name)
        for file in files:
            (version / file).write_text(f"{name}/{file}\n")
            (version / file).chmod(0o440)
            (secret / file).symlink_to(f"..data/{file}")
        (root / "etc/localgate" / name).mkdir()

    result = subprocess.run(  # noqa: S603 - the manifest's own command, on a test folder
        [init["command"][0], init["command"][1], script.replace("/etc/", f"{root}/etc/")],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    for name, files in contents.items():
        copied = sorted((root / "etc/localgate" / name).iterdir())
        assert [p.name for p in copied] == sorted(files)
        for path in copied:
            assert not path.is_symlink()
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
            assert path.read_text() == f"{name}/{path.name}\n"


def test_egress_is_allowed_only_to_dns_the_stores_and_the_egress_proxy(tmp_path: Path) -> None:
    policy = manifests()[("NetworkPolicy", "localgate")]["spec"]
    proxy = next(v["value"] for v in container(deployment())["env"] if v["name"] == "HTTPS_PROXY")
    allowed = {port["port"]: rule["to"] for rule in policy["egress"] for port in rule["ports"]}

    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["podSelector"]["matchLabels"].items() <= (
        deployment()["spec"]["template"]["metadata"]["labels"].items()
    )
    assert policy["podSelector"]["matchLabels"].items() <= (
        job()["spec"]["template"]["metadata"]["labels"].items()
    )
    assert set(allowed) == {53, 5432, 6379, 8000, int(proxy.rsplit(":", 1)[1])}
    for rule in policy["egress"]:
        assert rule["to"], "a rule without `to` would allow every destination"
        for peer in rule["to"]:
            cidr = peer.get("ipBlock", {}).get("cidr")
            assert cidr not in ("0.0.0.0/0", "::/0")
    assert 443 not in allowed  # the Gemini API only through the proxy
    assert configured(tmp_path).cache.chroma_url.endswith(":8000")  # type: ignore[union-attr]


def _label(document: dict[str, Any], label: tuple[str, str]) -> bool:
    return bool(document["metadata"].get("labels", {}).get(label[0]) == label[1])


def _database_env(gateway: dict[str, Any]) -> list[Any]:
    shared = {
        "LOCALGATE_CONFIG",
        "LOCALGATE_DATA_DIR",
        "LOCALGATE_DATABASE_URL",
        "LOCALGATE_AUDIT_POSTGRES_DSN",
        "LOCALGATE_REDIS_URL",
    }
    return [v for v in gateway["env"] if v["name"] in shared]
