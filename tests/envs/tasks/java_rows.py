"""A SWE-bench Multilingual Java row made from a real project: Apache Commons CLI 1.6.0, the upstream source of
Debian's ``libcommons-cli-java`` (its ``.orig.tar.xz`` from Debian's pool), in a git mirror
(``apache__commons-cli.git``, read through ``$SWEBOX_GIT_MIRROR``) with a real one-line bug in ``Util.java``
and its own ``UtilTest`` as the test that catches it.

Upstream's ``pom.xml`` inherits ``commons-parent`` and its release plugins, which only Maven Central has; the
mirror's first commit replaces it with a pom of the same coordinates that needs only what Debian packages
(JUnit 4.13.2, JUnit Jupiter's API 5.9.2 for three tests' ``assertThrows``, and the resources, compiler and
surefire plugins), as Debian's own build of the package does with its Maven rules.

Every Maven run of the tests (the env build, then three or one per graded patch) is a cold JVM compiling the
project's 29 test classes on a busy 2-core machine, so the mirror's project is set up for short builds, as
projects with slow CI do, without changing what runs: ``.mvn/jvm.config`` (Maven's own JVM) and surefire's
``argLine`` (the JVM the tests fork) stop the JIT at its first tier and use the serial collector, and the compiler
plugin recompiles only stale sources (``useIncrementalCompilation`` false: its "incremental" mode recompiles the
whole module whenever any file changed, so the second and third ``mvn test -Dtest=`` runs of a grade compiled all
test classes again).
"""

from __future__ import annotations

from pathlib import Path

from tests.envs.tasks.graders.test_lang_logs import line_patch
from tests.envs.tasks.multilang_rows import _mirror

OWNER, NAME = "apache", "commons-cli"
POOL_PATH = "libc/libcommons-cli-java/libcommons-cli-java_1.6.0.orig.tar.xz"
SHA256 = "fc764c3dab50817d1c7440b904aa6fc7bbc0064117e42c8b99e28ecdcdd4ab0f"
FILE = "src/main/java/org/apache/commons/cli/Util.java"
TEST_FILE = "src/test/java/org/apache/commons/cli/UtilTest.java"
FIX = (
    '        if (length > 1 && str.startsWith("\\"") && str.endsWith("\\"")'
    " && str.substring(1, length - 1).indexOf('\"') == -1) {\n"
)
BUG = FIX.replace("length > 1", "length > 0")
"""A lone ``"`` is stripped: ``substring(1, 0)`` throws StringIndexOutOfBoundsException."""
WRONG = FIX.replace(" && str.substring(1, length - 1).indexOf('\"') == -1", "")
"""Strips quotes around text that holds quotes too: the lone quote passes, ``"foo" and "bar"`` does not."""
CLASS = "org.apache.commons.cli.UtilTest"
F2P = [f"{CLASS}#testStripLeadingAndTrailingQuotes"]
P2P = [f"{CLASS}#testStripLeadingHyphens", "org.apache.commons.cli.HelpFormatterTest#testFindWrapPos"]
MVN = "mvn test -B -o -Dtest="
"""Maven offline (``-o``): the env build filled the local repository from Debian's; the tests need nothing more."""

POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- upstream's pom needs commons-parent from Maven Central; this one needs only Debian's packages -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>commons-cli</groupId>
  <artifactId>commons-cli</artifactId>
  <version>1.6.0</version>
  <properties>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
    <maven.compiler.source>8</maven.compiler.source>
    <maven.compiler.target>8</maven.compiler.target>
    <fast.jvm>-XX:TieredStopAtLevel=1 -XX:+UseSerialGC</fast.jvm>
  </properties>
  <dependencies>
    <dependency><groupId>junit</groupId><artifactId>junit</artifactId><version>4.13.2</version>
      <scope>test</scope></dependency>
    <dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter-api</artifactId>
      <version>5.9.2</version><scope>test</scope></dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin><artifactId>maven-resources-plugin</artifactId><version>3.3.0</version></plugin>
      <plugin><artifactId>maven-compiler-plugin</artifactId><version>3.10.1</version>
        <configuration><useIncrementalCompilation>false</useIncrementalCompilation></configuration></plugin>
      <plugin><artifactId>maven-surefire-plugin</artifactId><version>2.22.3</version>
        <configuration><argLine>${fast.jvm}</argLine></configuration></plugin>
    </plugins>
  </build>
</project>
"""


JVM_CONFIG = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC\n"
"""Maven's JVM options (``.mvn/jvm.config``): C1 only and the serial collector, the usual settings for short
builds (a Maven run ends before C2's compilations pay back; on two cores they compete with the build)."""


def offline_project(work: Path, pom: str = POM) -> None:
    """Upstream's source at ``work`` made the mirror's project: ``pom`` (default :data:`POM`) and Maven's JVM
    options."""
    (work / "pom.xml").write_text(pom)
    (work / ".mvn").mkdir(exist_ok=True)
    (work / ".mvn" / "jvm.config").write_text(JVM_CONFIG)


def make_java_mirror(source: Path, mirror: Path) -> dict[str, str]:
    """The mirror (``clean``: the source with the offline pom and Maven's JVM options; ``base``: the bug in,
    UtilTest out) and the patches the row carries (``fix``, ``test``, ``wrong``)."""

    def prepare(work: Path) -> None:
        offline_project(work)

    tests = (source / TEST_FILE).read_text()
    c = _mirror(source, mirror, f"{OWNER}__{NAME}", FILE, FIX, BUG, TEST_FILE, tests, prepare)
    return {**c, "wrong": line_patch(FILE, c["buggy"], BUG, WRONG)}


def java_multilingual_row(c: dict[str, str]) -> tuple[dict, dict]:
    """The SWE-bench Multilingual row (SWE-bench's keys only) and the ``$SWEBOX_SWE_SPECS`` table of its recipe
    (swebench's Java table does not know commons-cli): swebench's spec keys for Maven rows, one ``mvn test
    -Dtest=`` command per test (what ``parse_log_maven`` reads), the env build resolving every plugin and
    library once (``install``) so that the tests run offline."""
    repo = f"{OWNER}/{NAME}"
    row = {
        "repo": repo,
        "instance_id": f"{OWNER}__{NAME}-multilingual-1",
        "base_commit": c["base"],
        "environment_setup_commit": c["base"],
        "patch": c["fix"],
        "test_patch": c["test"],
        "problem_statement": 'Util.stripLeadingAndTrailingQuotes throws on a lone " .',
        "hints_text": "",
        "created_at": "2026-12-06T00:00:00Z",
        "version": "1.6",
        "FAIL_TO_PASS": F2P,
        "PASS_TO_PASS": P2P,
    }
    spec = {
        "language": "java",
        "log_parser": "maven",
        "install": ["mvn test -B -Dmaven.test.failure.ignore=true"],
        "test_cmd": [MVN + t for t in (*F2P, *P2P)],
        "docker_specs": {"java_version": "17"},
    }
    return row, {repo: {"1.6": spec}}
