"""The toolchains there are: what each toolchain layer is made of (Debian's packages, the files and links written
over them) and how a sandbox uses it (its prefix, bin folders, environment variables, a check command).

A catalogue only: resolving a toolchain's packages, building and holding its layer is toolchains.py's work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PREFIX_ROOT = "/opt/toolchains"
"""Where toolchain ``NAME`` appears in a sandbox: ``/opt/toolchains/NAME`` (its debs' ``usr/`` below it)."""
CACHE_ROOT = "/pkgcache"
"""Package caches of toolchain builds in the sandbox (npm, go, cargo, m2 below it): never in /testbed."""


class UnknownToolchain(KeyError):
    """A toolchain name that :data:`TOOLCHAINS` does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class ToolchainSpec:
    """What one toolchain layer holds and how a sandbox uses it."""

    name: str
    """Its name ('node'); the layer's tree is ``opt/toolchains/<name>/``."""
    packages: tuple[str, ...]
    """Debian packages the toolchain is made of (the roots of the dependency closure)."""
    own: tuple[str, ...] = ()
    """fnmatch patterns of dependencies always shipped in the layer, even where the host has them (the
    toolchain's own parts: a host gcc must not be half of the layer's)."""
    bin_dirs: tuple[str, ...] = ("usr/bin",)
    """Folders below the prefix put first on PATH, in this order."""
    env: dict[str, str] = field(default_factory=dict)
    """More environment variables; ``{prefix}`` is replaced by the toolchain's prefix in the sandbox."""
    check: str = ""
    """A command run in a sandbox on the built tree before publication; a failure fails the build."""
    files: dict[str, str] = field(default_factory=dict)
    """Files written below the prefix after the packages are unpacked (path relative to the prefix -> text,
    ``{prefix}`` replaced), replacing a package's file of that path: part of the layer's key."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Absolute paths compiled into the toolchain's ELF files -> a path of the same length in the layer, a
    symlink to the same folder below the prefix; the ELF files are patched to name it (Debian's node reads
    builtins such as acorn from /usr/share/nodejs, which the host's /usr lacks)."""

    @property
    def prefix(self) -> str:
        """Where the toolchain appears in a sandbox."""
        return f"{PREFIX_ROOT}/{self.name}"


_MAVEN_TEST_PACKAGES = (
    "libmaven-resources-plugin-java",
    "libmaven-compiler-plugin-java",
    "libsurefire-java",
    "junit4",
    "junit5",
)
"""What ``mvn test`` needs beyond Maven itself: the plugins of its lifecycle (resources, compiler, surefire with
its JUnit 4 and JUnit Platform providers) and JUnit 4/5, each with the versions Debian packages (see
docs/datasets.md, "SWE-bench Multilingual")."""
_IGNORE_CHECKSUMS = "<releases><checksumPolicy>ignore</checksumPolicy></releases>"
_DEBIAN_REPOS = "".join(
    f"<repository><id>{rid}</id><url>file://{path}</url>{_IGNORE_CHECKSUMS}</repository>"
    for rid, path in (("debian-toolchain", "{prefix}/usr/share/maven-repo"), ("debian-host", "/usr/share/maven-repo"))
)
_MAVEN_SETTINGS = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<!-- swebox jdk toolchain: Debian's Maven repository (this layer's packages, then the host's, whose /usr\n"
    "     every sandbox has) is searched before Maven Central; Debian ships no checksums, hence 'ignore' -->\n"
    "<settings><profiles><profile><id>debian</id>"
    f"<repositories>{_DEBIAN_REPOS}</repositories>"
    f"<pluginRepositories>{_DEBIAN_REPOS.replace('repository>', 'pluginRepository>')}</pluginRepositories>"
    "</profile></profiles><activeProfiles><activeProfile>debian</activeProfile></activeProfiles></settings>\n"
)
"""The jdk layer's global Maven settings (Maven reads ``$MAVEN_HOME/conf/settings.xml``, Debian's link to
``/etc/maven/settings.xml``, here the layer's): a profile, always active, with Debian's repositories."""
_NODE = "{prefix}/usr/share/nodejs:{prefix}/usr/lib/nodejs:{prefix}/usr/lib/x86_64-linux-gnu/nodejs"
TOOLCHAINS: dict[str, ToolchainSpec] = {
    spec.name: spec
    for spec in (
        ToolchainSpec(
            "node",
            ("nodejs", "npm"),
            own=("nodejs", "libnode*", "npm", "node-*"),
            # Debian's node looks for modules in /usr/share/nodejs (the host's): NODE_PATH names the layer's
            env={
                "NODE_PATH": _NODE,
                "npm_config_cache": f"{CACHE_ROOT}/npm",
                "npm_config_update_notifier": "false",
                "npm_config_fund": "false",
                "npm_config_audit": "false",
            },
            aliases={"/usr/share/nodejs": f"{PREFIX_ROOT}/n"},
            check="node --version && node -e 'require(\"assert\")' && npm --version",
        ),
        ToolchainSpec(
            "go",
            ("golang-go",),
            own=("golang-*",),
            bin_dirs=("usr/lib/go-1.19/bin",),
            env={
                "GOROOT": "{prefix}/usr/lib/go-1.19",
                "GOPATH": f"{CACHE_ROOT}/go",
                "GOMODCACHE": f"{CACHE_ROOT}/go/pkg/mod",
                "GOCACHE": f"{CACHE_ROOT}/go-build",
                "GOFLAGS": "-modcacherw",
                "GOTOOLCHAIN": "local",
                "GOTELEMETRY": "off",
            },
            check="go version",
        ),
        ToolchainSpec(
            "rust",
            ("rustc", "cargo"),
            own=("rustc", "cargo", "libstd-rust-*", "librust-*"),
            env={"CARGO_HOME": f"{CACHE_ROOT}/cargo"},
            check="rustc --version && cargo --version",
        ),
        ToolchainSpec(
            "jdk",
            # Maven Central is not reachable here: Debian's Maven plugins and test libraries (their artifacts in
            # usr/share/maven-repo) let `mvn test` build and run a JUnit 4/5 project with no network at all
            ("openjdk-17-jdk-headless", "maven", *_MAVEN_TEST_PACKAGES),
            own=("openjdk-17-*", "maven", "libmaven3-core-java"),
            bin_dirs=("usr/lib/jvm/java-17-openjdk-amd64/bin", "usr/share/maven/bin"),
            env={
                "JAVA_HOME": "{prefix}/usr/lib/jvm/java-17-openjdk-amd64",
                "MAVEN_OPTS": f"-Dmaven.repo.local={CACHE_ROOT}/m2/repository",
            },
            files={"etc/maven/settings.xml": _MAVEN_SETTINGS},
            check="java -version && javac -version && mvn --version",
        ),
        ToolchainSpec(
            "cc",
            ("gcc", "g++", "make"),
            own=(
                "gcc*",
                "g++*",
                "cpp*",
                "make",
                "binutils*",
                "libbinutils",
                "libctf*",
                "libgprofng*",
                "libgcc-*-dev",
                "libstdc++-*-dev",
                "libcc1-*",
                "libisl*",
                "libmpc*",
                "libmpfr*",
                "libasan*",
                "liblsan*",
                "libtsan*",
                "libubsan*",
                "libitm*",
                "libquadmath*",
                "libgomp*",
                "libatomic*",
                "libjansson*",
            ),
            check="gcc --version && g++ --version && make --version",
        ),
    )
}


def get_spec(name: str) -> ToolchainSpec:
    """The spec of ``name``, or a one-line error naming the known ones."""
    if name not in TOOLCHAINS:
        raise UnknownToolchain(
            f"toolchain: expected one of {', '.join(TOOLCHAINS)}; found {name!r}. Use one of "
            "those names (`swebox cache toolchain list`)."
        )
    return TOOLCHAINS[name]
