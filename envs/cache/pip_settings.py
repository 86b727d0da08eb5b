"""The host's package-index settings, carried into every build sandbox (env layers, checkout installs).

A build sandbox starts with a fixed environment and its own /etc and home, so nothing of the host's pip
configuration reaches it by itself: on a cluster behind a TLS-inspecting proxy, or with a private index or
wheel folder, every ``pip install`` of a recipe would fail (``CERTIFICATE_VERIFY_FAILED``, or PyPI instead of
the mirror). :func:`host_package_settings` reads what the host's own pip would use and turns it into the
sandbox's environment:

- pip's configuration files, in pip's order (``/etc/xdg/pip/pip.conf``, ``/etc/pip.conf``,
  ``~/.pip/pip.conf``, ``~/.config/pip/pip.conf``, then ``$PIP_CONFIG_FILE``), sections ``[global]`` then
  ``[install]``, then the ``PIP_*`` variables, which win as in pip; only the settings of :data:`PIP_KEYS`
  (where packages come from and how they are trusted; never cache, target or user folders);
- uv's (:data:`UV_VARIABLES`), the proxy variables and the CA-bundle variables (``REQUESTS_CA_BUNDLE``,
  ``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``CURL_CA_BUNDLE``);
- a file a setting names (a certificate, a constraints file) is copied into the sandbox's private /tmp
  (:data:`FILES_DIR`; never part of a layer) and the setting points there; a folder (``find-links``, a
  ``file://`` index) is bound read-only at its own path (not under /tmp: every sandbox has its own /tmp);
- an index, proxy or trusted host on the host's loopback (``127.0.0.1``, ``localhost``, ``::1``) is named by
  the address at which a build sandbox reaches it (``10.0.2.2``, slirp4netns's alias of the host, which the
  sandbox is then allowed: :attr:`PackageSettings.loopback`); a TLS certificate of such an index must name
  that address too (hostname checking sees ``10.0.2.2``);
- pips older than Python 3.10's (no truststore: they trust certifi's bundle only) get the certificate
  explicitly: ``PIP_CERT`` = the host's pip cert, else ``REQUESTS_CA_BUNDLE``/``SSL_CERT_FILE``, else the
  system bundle OpenSSL uses. With a ``PIP_CERT``, ``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE`` are not
  forwarded: pip's vendored requests would let them replace the cert on every request.
"""

from __future__ import annotations

import configparser
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..sandbox import Sandbox
from ..sandbox.usernet import HOST_LOOPBACK

PIP_KEYS = (
    "index-url",
    "extra-index-url",
    "no-index",
    "find-links",
    "cert",
    "client-cert",
    "trusted-host",
    "constraint",
    "proxy",
    "timeout",
    "default-timeout",
    "retries",
    "pre",
    "only-binary",
    "prefer-binary",
    "keyring-provider",
)
"""pip settings forwarded (config-file spelling; ``PIP_`` + upper case with '_' is the variable)."""
UV_VARIABLES = (
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
    "UV_FIND_LINKS",
    "UV_NATIVE_TLS",
    "UV_CONSTRAINT",
    "UV_HTTP_TIMEOUT",
    "UV_INSECURE_HOST",
    "UV_KEYRING_PROVIDER",
)
"""uv's settings of the same kinds, forwarded as they are (paths in them are carried like pip's)."""
TLS_VARIABLES = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE")
OVERRIDE_PIP_CERT = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""pip's vendored requests lets these replace ``--cert`` for every request: left out when pip has a cert."""
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
)
FILE_KEYS = {"cert", "client-cert", "constraint"}
"""Settings whose value is a file path."""
LIST_KEYS = {"extra-index-url", "find-links", "trusted-host", "constraint"}
"""Settings that hold several values (whitespace-separated, as pip reads them from variables and files)."""
URL_KEYS = {"index-url", "extra-index-url", "find-links", "proxy"}
"""Settings whose values may be URLs (rewritten when they point at the host's loopback)."""
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
FILES_DIR = "/tmp/swebox-host-pip"
"""Where copied files live inside the build sandbox (its private /tmp: never in the layer)."""


@dataclass
class PackageSettings:
    """What a build sandbox needs to see the host's package settings."""

    env: dict[str, str] = field(default_factory=dict)
    """Variables for the sandbox (``PIP_*``, uv's, proxies, CA bundles), paths already rewritten."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Sandbox path -> contents of the files the settings name; written by :func:`write_files` after the start."""
    binds: tuple[str, ...] = ()
    """Host folders the settings name (wheel folders, ``file://`` indexes), bound read-only at their path."""
    sources: list[str] = field(default_factory=list)
    """Where the settings came from (config files read, variables), for the build log."""
    loopback: bool = False
    """A setting names the host's loopback: the build sandbox must reach it (``network_host_loopback``)."""


def config_files(environ: dict[str, str], home: Path, etc: Path = Path("/etc")) -> list[Path]:
    """pip's configuration files in the order pip reads them (later ones win)."""
    xdg = [d for d in environ.get("XDG_CONFIG_DIRS", str(etc / "xdg")).split(os.pathsep) if d]
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg)] + [etc / "pip.conf"]
    config_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    files += [home / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        if environ["PIP_CONFIG_FILE"] == os.devnull:
            return []  # pip: PIP_CONFIG_FILE=os.devnull loads no file at all
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def _read_configs(paths: list[Path], sources: list[str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for path in paths:
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            sources.append(f"{path}: unreadable, skipped ({type(exc).__name__})")
            continue
        sources.append(str(path))
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    key = key.replace("_", "-")
                    if key in PIP_KEYS:
                        settings[key] = " ".join(value.split())
    return settings


def _system_bundle() -> str:
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"):
        if candidate and os.path.isfile(candidate):
            return candidate
    return ""


class _Carrier:
    """Rewrites host paths in settings to what the sandbox sees, collecting files to copy and folders to bind."""

    def __init__(self, out: PackageSettings) -> None:
        self.out, self.binds = out, list(out.binds)
        self.copied: dict[str, str] = {}

    def file(self, path: str) -> str:
        host = Path(path).expanduser()
        if not host.is_file():
            return path  # pip's own error inside the sandbox names it
        if str(host) not in self.copied:
            self.copied[str(host)] = f"{FILES_DIR}/{len(self.copied)}-{host.name}"
            self.out.files[self.copied[str(host)]] = host.read_bytes()
        return self.copied[str(host)]

    def location(self, value: str) -> str:
        """A find-links / index value: a local folder (or ``file://`` URL of one) is bound; URLs pass."""
        parsed = urlparse(value)
        local = unquote(parsed.path) if parsed.scheme == "file" else value if "://" not in value else ""
        if local and os.path.isabs(local):
            folder = (local if os.path.isdir(local) else os.path.dirname(local)).rstrip("/") or "/"
            if os.path.basename(folder) == "simple":  # a PEP 503 index: its pages link to files beside it
                folder = os.path.dirname(folder)
            if os.path.isdir(folder) and not folder.startswith("/tmp/") and folder not in self.binds:
                self.binds.append(folder)
        return value

    def url(self, value: str) -> str:
        """``value`` with a loopback host replaced by the sandbox's name for the host (:data:`HOST_LOOPBACK`)."""
        parsed = urlparse(value if "://" in value else f"//{value}")
        if parsed.hostname not in LOOPBACK_NAMES:
            return value
        self.out.loopback = True
        host = parsed.hostname if parsed.hostname != "::1" else "[::1]"
        netloc = parsed.netloc.replace(host, HOST_LOOPBACK, 1)
        return parsed._replace(netloc=netloc).geturl().removeprefix("//")

    def value(self, key: str, value: str) -> str:
        items = value.split() if key in LIST_KEYS else [value]
        if key in FILE_KEYS:
            items = [self.file(v) for v in items]
        elif key in ("find-links", "index-url", "extra-index-url"):
            items = [self.url(self.location(v)) for v in items]
        elif key in ("proxy", "trusted-host"):
            items = [self.url(v) for v in items]
        return " ".join(items)


def host_package_settings(
    python: str, environ: dict[str, str] | None = None, home: Path | None = None, etc: Path = Path("/etc")
) -> PackageSettings:
    """The host's package settings for a build whose interpreter is Python ``python`` ('3.9', '3.11.7');
    ``environ``, ``home`` and ``etc`` default to the host's (tests name others)."""
    environ = dict(os.environ if environ is None else environ)
    home = home or Path.home()
    out = PackageSettings()
    settings = _read_configs(config_files(environ, home, etc), out.sources)
    for key in PIP_KEYS:
        variable = "PIP_" + key.upper().replace("-", "_")
        if environ.get(variable):
            settings[key] = " ".join(environ[variable].split())
            out.sources.append(f"${variable}")
    carry = _Carrier(out)
    for key, value in settings.items():
        out.env["PIP_" + key.upper().replace("-", "_")] = carry.value(key, value)
    for name in TLS_VARIABLES:
        value = environ.get(name, "")
        if name in OVERRIDE_PIP_CERT and "PIP_CERT" in out.env:
            continue
        if value and name == "SSL_CERT_DIR":
            if os.path.isdir(value):
                carry.location(value)
                out.env[name] = value
        elif value:
            out.env[name] = carry.file(value)
    for name in UV_VARIABLES:
        if environ.get(name):
            key = {
                "UV_CONSTRAINT": "constraint",
                "UV_FIND_LINKS": "find-links",
                "UV_INDEX_URL": "index-url",
                "UV_DEFAULT_INDEX": "index-url",
                "UV_EXTRA_INDEX_URL": "extra-index-url",
                "UV_INSECURE_HOST": "trusted-host",
            }.get(name, "")
            out.env[name] = carry.value(key, environ[name]) if key else environ[name]
    for name in PROXY_VARIABLES:
        if environ.get(name):
            out.env[name] = environ[name] if name.lower() == "no_proxy" else carry.url(environ[name])
    major_minor = tuple(int(x) for x in python.split(".")[:2])
    if major_minor < (3, 10) and "PIP_CERT" not in out.env:
        # no truststore before Python 3.10's pips: without --cert they trust certifi's bundle only
        bundle = (
            next(
                (
                    environ[n]
                    for n in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE")
                    if environ.get(n) and os.path.isfile(environ[n])
                ),
                "",
            )
            or _system_bundle()
        )
        if bundle:
            out.env["PIP_CERT"] = carry.file(bundle)
            out.sources.append(f"PIP_CERT={bundle} (Python {python}: pip without truststore)")
    if "PIP_CERT" in out.env:
        for name in OVERRIDE_PIP_CERT:
            out.env.pop(name, None)
    out.binds = tuple(carry.binds)
    return out


def write_files(sb: Sandbox, settings: PackageSettings) -> None:
    """Write the settings' files into a started sandbox (before the first pip runs)."""
    if settings.files:
        made = sb.exec(f"mkdir -p {FILES_DIR}", timeout=30)
        if made.exit_code != 0:
            raise OSError(f"making {FILES_DIR} in the build sandbox failed: {made.output[-300:]}")
    for path, data in settings.files.items():
        sb.write_file(path, data, mode=0o644)
