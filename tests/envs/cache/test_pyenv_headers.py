"""The relocated pyenv interpreters carry their C headers: recipes that compile extensions build against them.

astropy's recipe (`pip install -e .[test]`) compiles C extensions in the checkout layer; gcc is given the
interpreter's ``sysconfig`` include folder, under the prefix the env's venv comes from. The copy that
tests/pyenv_python.py makes (and docs/verified.md uses) had ``bin/`` and ``lib/`` only, so every such build
stopped at ``fatal error: Python.h: No such file or directory`` (astropy__astropy-13453's starting tree).
Here a venv made from the copy, as env builds make ``/venv``, compiles and imports a real extension module.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.pyenv_python import readable_python

EXTENSION = r"""
#include <Python.h>
static PyObject *twice(PyObject *self, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    return PyLong_FromLong(2 * v);
}
static PyMethodDef methods[] = {{"twice", twice, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "twice", NULL, -1, methods};
PyMODINIT_FUNC PyInit_twice(void) { return PyModule_Create(&module); }
"""


@pytest.mark.parametrize("minor", ["3.9"])
def test_a_venv_of_the_copied_interpreter_compiles_an_extension(tmp_path, minor):
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    prefix = readable_python(minor)
    subprocess.run(
        [str(prefix / "bin" / f"python{minor}"), "-m", "venv", "--without-pip", str(tmp_path / "venv")],
        check=True,
        timeout=120,
    )
    python = str(tmp_path / "venv" / "bin" / "python")
    paths = subprocess.run(
        [
            python,
            "-c",
            "import sysconfig; p = sysconfig.get_paths(); "
            "print(p['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    include, suffix = paths
    assert include.startswith(str(prefix)), include  # the copy's own folder, not pyenv's under /root
    (tmp_path / "twice.c").write_text(EXTENSION)
    built = subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-I{include}", str(tmp_path / "twice.c"), "-o", str(tmp_path / f"twice{suffix}")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    out = subprocess.run(
        [python, "-c", "import twice; print(twice.twice(21))"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "42", out.stderr
