"""Pulling from the reference registry server (Debian's docker-registry) on 127.0.0.1: anonymous, basic auth,
bearer tokens from a token server, multi-arch indexes and Docker schema-2 manifests, pushed with skopeo; and
the faults a registry brings: 429/503 (retried, then a clear error), a truncated blob (resumed), a corrupted
blob (refused), another architecture only (a clear error)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from swebox.envs.cache import LayerStore
from swebox.envs.cache.budget import IOBudget
from swebox.envs.cache.images import ImageSourceError, Platform, get_image, import_image, oci_layout
from swebox.envs.cache.images.registry import RegistryConfig, RegistryError, pull

from .oci_fixture import build_test_image, d, f, layer_tar, write_layout
from .registry_fixture import Faults, proxy, push, registry, v2_status

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("docker-registry", "skopeo", "tar2sqfs")),
    reason="needs docker-registry, skopeo and tar2sqfs (see the Makefile's APT_PACKAGES)",
)
AMD64 = Platform("linux", "amd64")
INSECURE = RegistryConfig(insecure=True, retries=3, backoff_s=0.05)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return build_test_image(tmp_path_factory.mktemp("image") / "layout")


@pytest.fixture(scope="module")
def anonymous(tmp_path_factory, image):
    with registry(tmp_path_factory.mktemp("registry")) as address:
        push(image, "latest", f"{address}/test/image:latest")
        yield address


def test_pull_matches_the_oci_layout_import(anonymous, image, tmp_path):
    store = LayerStore(tmp_path / "store")
    budget = IOBudget(50)
    record = pull(store, f"{anonymous}/test/image:latest", AMD64, INSECURE, budget)
    local = import_image(LayerStore(tmp_path / "local"), oci_layout(image), "local", "linux/amd64")
    assert record.layers == local.layers and record.config == local.config and record.source == "registry"
    assert get_image(store, f"{anonymous}/test/image:latest") == record
    assert 0 < budget.peak_mb <= 50 and budget.in_flight_mb == 0
    assert list((store.root / "downloads").iterdir()) == []  # the download folder goes once converted


def test_docker_schema2_and_multi_arch_index(anonymous, tmp_path):
    layers = [layer_tar([d("data"), f("data/x", "multi")])]
    multi = write_layout(tmp_path / "multi", layers, "multi", arch="arm64", extra_arches=("amd64",))
    push(multi, "multi", f"{anonymous}/test/multi:1", all_images=True)
    store = LayerStore(tmp_path / "store")
    assert pull(store, f"{anonymous}/test/multi:1", AMD64, INSECURE).platform == "linux/amd64"
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            "--format",
            "v2s2",
            f"docker://{anonymous}/test/image:latest",
            f"docker://{anonymous}/test/docker:v2s2",
        ],
        check=True,
        capture_output=True,
    )
    manifest = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{anonymous}/test/docker:v2s2"],
        capture_output=True,
        text=True,
    ).stdout
    assert "application/vnd.docker.distribution.manifest.v2+json" in manifest
    assert len(pull(store, f"{anonymous}/test/docker:v2s2", AMD64, INSECURE).layers) == 3
    arm_only = write_layout(tmp_path / "arm", layers, "arm", arch="arm64", extra_arches=("ppc64le",))
    push(arm_only, "arm", f"{anonymous}/test/arm:1", all_images=True)
    with pytest.raises(
        ImageSourceError, match="no image for platform linux/amd64; the index has linux/arm64, linux/ppc64le"
    ):
        pull(store, f"{anonymous}/test/arm:1", AMD64, INSECURE)


def test_basic_auth(image, tmp_path):
    with registry(tmp_path / "registry", auth="basic", users={"alice": "s3cret"}) as address:
        assert v2_status(address) == 401
        push(image, "latest", f"{address}/test/image:latest", creds="alice:s3cret")
        store = LayerStore(tmp_path / "store")
        with pytest.raises(RegistryError, match="check --creds"):
            pull(store, f"{address}/test/image:latest", AMD64, INSECURE)
        config = RegistryConfig(insecure=True, creds="alice:s3cret")
        assert len(pull(store, f"{address}/test/image:latest", AMD64, config).layers) == 3


@pytest.mark.parametrize("users", [None, {"bob": "pw"}], ids=["anonymous-token", "token-with-creds"])
def test_bearer_token_flow(image, tmp_path, users):
    with registry(tmp_path / "registry", auth="token", users={"pusher": "pw", **(users or {})}) as address:
        push(image, "latest", f"{address}/test/image:latest", creds="pusher:pw")
    with registry(tmp_path / "registry", auth="token", users=users) as address:  # same storage, new auth
        assert v2_status(address) == 401
        creds = "bob:pw" if users else ""
        record = pull(
            LayerStore(tmp_path / "store"),
            f"{address}/test/image:latest",
            AMD64,
            RegistryConfig(insecure=True, creds=creds),
        )
        assert len(record.layers) == 3


def test_rate_limits_and_outages_are_retried_then_reported(anonymous, tmp_path):
    faults = Faults()
    with proxy(anonymous, faults) as address:
        faults.add("/manifests/", 429, times=2)
        faults.add("/blobs/", 503, times=1)
        store = LayerStore(tmp_path / "store")
        assert len(pull(store, f"{address}/test/image:latest", AMD64, INSECURE).layers) == 3
        answered = [status for _, _, status in faults.log]
        assert answered.count(429) == 2 and answered.count(503) == 1
        faults.add("/manifests/", 503, times=-1)
        with pytest.raises(RegistryError, match=r"failed 4 times over \d+ s, last: .*503.*try again later"):
            pull(LayerStore(tmp_path / "other"), f"{address}/test/image:latest", AMD64, INSECURE)


def test_truncated_blob_resumes_and_corrupt_blob_is_refused(anonymous, image, tmp_path):
    layer_digests = [b.digest for b in oci_layout(image).layers]
    faults = Faults()
    with proxy(anonymous, faults) as address:
        faults.add(f"/blobs/{layer_digests[2]}", "truncate", times=1)
        store = LayerStore(tmp_path / "store")
        assert len(pull(store, f"{address}/test/image:latest", AMD64, INSECURE).layers) == 3
        fetched = [
            path for method, path, status in faults.log if method == "GET" and status == 200 and "/blobs/" in path
        ]
        assert sum(layer_digests[2] in p for p in fetched) == 2  # the truncated blob, fetched again
        assert [sum(digest in p for p in fetched) for digest in layer_digests[:2]] == [1, 1]  # the rest kept
        faults.add(f"/blobs/{layer_digests[1]}", "corrupt", times=-1)
        with pytest.raises(RegistryError, match="(?i)digest"):
            pull(LayerStore(tmp_path / "other"), f"{address}/test/image:latest", AMD64, INSECURE)
        assert get_image(LayerStore(tmp_path / "other"), f"{address}/test/image:latest") is None


def test_cli_pull_from_the_registry_under_another_name(anonymous, tmp_path, capsys):
    from .test_cli import swebox

    store = str(tmp_path / "store")
    assert (
        swebox(
            "cache",
            "--store",
            store,
            "pull",
            f"docker://{anonymous}/test/image:latest",
            "--insecure",
            "--as",
            "swebench/sweb.eval.x86_64.test",
        )
        == 0
    )
    assert "swebench/sweb.eval.x86_64.test: 3 layers" in capsys.readouterr().out
    assert get_image(LayerStore(store), "swebench/sweb.eval.x86_64.test").source == "registry"
    assert get_image(LayerStore(store), f"{anonymous}/test/image:latest") is None
    assert swebox("cache", "--store", store, "pull", f"{anonymous}/test/no-such-image:latest", "--insecure") == 1
    assert "manifest unknown" in capsys.readouterr().err


def test_registry_host_as_docker_reads_references():
    from swebox.envs.cache.images.registry import registry_host

    assert registry_host("swebench/sweb.eval.x86_64.django_1776_django-11099:latest") == "docker.io"
    assert registry_host("ubuntu:22.04") == "docker.io"
    assert [registry_host(r) for r in ("127.0.0.1:5000/a/b:1", "localhost/a", "ghcr.io/o/r@sha256:00")] == [
        "127.0.0.1:5000",
        "localhost",
        "ghcr.io",
    ]


@pytest.mark.parametrize(
    "err, transient",
    [
        # CI once drew port 42925 for the loopback registry: an auth refusal was retried as a '429'.
        (
            'msg="Error parsing image name \\"docker://127.0.0.1:42925/test/image:latest\\": '
            'reading manifest latest in '
            '127.0.0.1:42925/test/image: unauthorized: authentication required"',
            False,
        ),
        (
            "reading manifest latest in 127.0.0.1:5030/a/b: received unexpected HTTP status: 503 Service Unavailable",
            True,
        ),
        ("reading manifest 1 in 127.0.0.1:50429/a: toomanyrequests: You have reached your pull rate limit", True),
        ("Get \"http://127.0.0.1:5000/v2/\": dial tcp 127.0.0.1:5000: connect: connection refused", True),
        ("reading blob sha256:4295cafe: 429 Too Many Requests", True),
        ("reading manifest latest in 127.0.0.1:4290/a: manifest unknown", False),
        ("requested access to the resource is denied (status 429)", False),
    ],
)
def test_only_real_transient_failures_are_retried(err, transient):
    from swebox.envs.cache.images.registry import is_transient

    assert is_transient(err) is transient
