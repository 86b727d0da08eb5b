"""Harbor's task folders: read in (folders.py, dockerfile.py), written out (export.py), graded (verify.py)."""
