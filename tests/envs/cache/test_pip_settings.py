"""The host's package settings reach every build: a private index over TLS with its own certificate authority.

The e2e test serves a PEP 503 index on the host's loopback over HTTPS (python's http.server + ssl, a CA and a server
certificate made by `openssl`), holding one wheel that exists nowhere else. The host's settings name the index and
the CA (Pythons 3.6 and 3.9: a pip configuration file; Python 3.11: PIP_* variables). An env build whose recipe
installs that wheel succeeds with them, and fails when the builder does not forward them (the control): so it
succeeds only because they were forwarded. Pythons 3.9 and 3.6 are the machine's pyenv builds, whose pips (23.0,
18.1) have no truststore: they trust the CA only through the PIP_CERT the builder sets; pip 18 is also the one that
crashed on the builder's old PIP_NO_CACHE_DIR=1 (``TypeError: ... not int``).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import shutil
import ssl
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path

import pytest
from swebox.envs.cache import EnvSpec, LayerStore
from swebox.envs.cache import builder as builder_module
from swebox.envs.cache.builder import EnvBuildError, build_env
from swebox.envs.cache.interpreters import discover
from swebox.envs.cache.pip_settings import FILES_DIR, PackageSettings, host_package_settings

from tests.pyenv_python import readable_python

PROBE = "swebox_tls_probe"


# -- what is read and how it is carried ---------------------------------------------------------------------------
def test_config_files_then_variables_in_pips_order(tmp_path, request):
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = https://mirror.example/simple\ncache-dir = /somewhere\ncert = "
        f"{tmp_path / 'ca.pem'}\n[install]\ntrusted-host = a.example\n  b.example\n"
    )
    (tmp_path / "ca.pem").write_text("CA")
    wheels = Path(tempfile.mkdtemp(prefix="swebox-test-wheels-", dir="/var/tmp"))  # not /tmp: sandboxes have their own
    request.addfinalizer(lambda: shutil.rmtree(wheels, ignore_errors=True))
    env = {
        "XDG_CONFIG_DIRS": str(tmp_path / "none"),
        "PIP_FIND_LINKS": str(wheels),
        "PIP_INDEX_URL": "https://127.0.0.1:8443/simple/",
        "PIP_USER": "1",
        "HTTPS_PROXY": "http://localhost:3128",
    }
    got = host_package_settings("3.11", env, home, etc=tmp_path / "etc")
    assert got.env["PIP_INDEX_URL"] == "https://10.0.2.2:8443/simple/" and got.loopback  # the variable wins
    assert got.env["PIP_TRUSTED_HOST"] == "a.example b.example" and got.env["HTTPS_PROXY"] == "http://10.0.2.2:3128"
    assert got.env["PIP_CERT"] == f"{FILES_DIR}/0-ca.pem" and got.files == {f"{FILES_DIR}/0-ca.pem": b"CA"}
    assert got.env["PIP_FIND_LINKS"] == str(wheels) and got.binds == (str(wheels),)
    assert "PIP_CACHE_DIR" not in got.env and "PIP_USER" not in got.env  # host folders and modes stay out
    assert got.sources[0].endswith(".config/pip/pip.conf") and "$PIP_INDEX_URL" in got.sources
    in_tmp = host_package_settings("3.11", {**env, "PIP_FIND_LINKS": str(tmp_path)}, home, etc=tmp_path / "etc")
    assert in_tmp.env["PIP_FIND_LINKS"] == str(tmp_path) and in_tmp.binds == ()  # a sandbox's /tmp is its own


def test_constraints_and_file_indexes_are_carried(tmp_path, request):
    local = Path(tempfile.mkdtemp(prefix="swebox-test-index-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(local, ignore_errors=True))
    (local / "simple").mkdir()
    (local / "pins.txt").write_text("six<2\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(
        f"[global]\nconstraint = {local / 'pins.txt'}\nextra-index-url = file://{local}/simple "
        "https://other.example/simple\n"
    )
    got = host_package_settings(
        "3.11", {"PIP_CONFIG_FILE": str(conf), "XDG_CONFIG_DIRS": str(tmp_path / "x")}, tmp_path, etc=tmp_path / "etc"
    )
    assert got.env["PIP_CONSTRAINT"] == f"{FILES_DIR}/0-pins.txt" and got.files[got.env["PIP_CONSTRAINT"]] == b"six<2\n"
    # a PEP 503 folder's pages link to files beside it: its parent is bound
    assert got.env["PIP_EXTRA_INDEX_URL"] == f"file://{local}/simple https://other.example/simple"
    assert got.binds == (str(local),) and got.sources == [str(conf)]


def test_old_pips_get_the_certificate_explicitly_and_devnull_reads_no_file(tmp_path):
    (tmp_path / "bundle.pem").write_text("B")
    env = {"PIP_CONFIG_FILE": "/dev/null", "REQUESTS_CA_BUNDLE": str(tmp_path / "bundle.pem")}
    old, new = host_package_settings("3.9", env, tmp_path), host_package_settings("3.11", env, tmp_path)
    assert old.sources[0].startswith("PIP_CERT=") and len(old.sources) == 1  # PIP_CONFIG_FILE=/dev/null: no file
    # pip's requests would let REQUESTS_CA_BUNDLE replace --cert: with a PIP_CERT it stays out
    assert old.env["PIP_CERT"] == f"{FILES_DIR}/0-bundle.pem" and "REQUESTS_CA_BUNDLE" not in old.env
    assert "PIP_CERT" not in new.env and new.env["REQUESTS_CA_BUNDLE"] == f"{FILES_DIR}/0-bundle.pem"
    bare = host_package_settings("3.6", {"PIP_CONFIG_FILE": "/dev/null"}, tmp_path)
    assert bare.env["PIP_CERT"].startswith(FILES_DIR) and "Python 3.6" in bare.sources[0]  # the system bundle


# -- a private index over TLS --------------------------------------------------------------------------------------
def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(folder: Path) -> None:
    """ca.pem (a new CA) and server.pem/server.key signed by it for 127.0.0.1 and 10.0.2.2 (the host, seen from
    a build sandbox)."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=swebox test CA",
        cwd=folder,
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
        cwd=folder,
    )
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,IP:10.0.2.2\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        cwd=folder,
    )


def _wheel(folder: Path) -> Path:
    """A wheel of a package that exists nowhere else."""
    path = folder / f"{PROBE}-1.0-py3-none-any.whl"
    files = {
        f"{PROBE}.py": b"MARK = 'from the private index'\n",
        f"{PROBE}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\n".encode(),
        f"{PROBE}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: swebox-test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
            f"{len(data)}\n"
            for name, data in files.items()
        )
        + f"{PROBE}-1.0.dist-info/RECORD,,\n"
    )
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{PROBE}-1.0.dist-info/RECORD", record)
    return path


@pytest.fixture(scope="module")
def tls_index(tmp_path_factory):
    if shutil.which("openssl") is None or shutil.which("slirp4netns") is None:
        pytest.skip("needs openssl and slirp4netns")
    root = tmp_path_factory.mktemp("tls-index")
    _certificates(root)
    site = root / "site"
    (site / "files").mkdir(parents=True)
    wheel = _wheel(site / "files")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (site / "simple" / "swebox-tls-probe").mkdir(parents=True)
    (site / "simple" / "swebox-tls-probe" / "index.html").write_text(
        f"<a href='../../files/{wheel.name}#sha256={digest}'>{wheel.name}</a>\n"
    )
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(site))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(root / "server.pem", root / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"https://127.0.0.1:{server.server_port}/simple/", "ca": root / "ca.pem", "root": root}
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _source_repo(folder: Path) -> tuple[str, str]:
    folder.mkdir()
    (folder / "README").write_text("a project whose recipe installs the probe\n")
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    return str(folder), subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.e2e
@pytest.mark.parametrize("python", ["3.6", "3.9", "3.11"])
def test_a_build_installs_from_a_private_tls_index_only_through_the_hosts_settings(
    tls_index, python, tmp_path, monkeypatch
):
    if python != "3.11":
        monkeypatch.setenv("SWEBOX_PYTHONS", str(readable_python(python)))
        # a pip configuration file names the index and the CA (and wins over the host's earlier files)
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {tls_index['url']}\ncert = {tls_index['ca']}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        for name in ("PIP_CERT", "PIP_INDEX_URL"):
            monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv("PIP_INDEX_URL", tls_index["url"])
        monkeypatch.setenv("PIP_CERT", str(tls_index["ca"]))
    discover.cache_clear()  # the interpreter search reads $SWEBOX_PYTHONS
    source, commit = _source_repo(tmp_path / "repo")
    spec = EnvSpec(
        source=source, commit=commit, python=python, install=("pip install swebox-tls-probe==1.0",), test_deps=()
    )
    try:
        # the control: the same build without the host's settings cannot reach or trust the index
        with monkeypatch.context() as m:
            m.setattr(builder_module, "host_package_settings", lambda version: PackageSettings())
            with pytest.raises(EnvBuildError, match="swebox-tls-probe"):
                build_env(LayerStore(tmp_path / "control"), spec)
        store = LayerStore(tmp_path / "store")
        manifest = build_env(store, spec)
    finally:
        discover.cache_clear()
    assert manifest.meta["python"].startswith(python)
    log = (store.root / manifest.build_log).read_text()  # the build's log, `pip freeze --all` included
    assert "swebox-tls-probe==1.0" in log.replace("_", "-") and "# the host's package settings: " in log
