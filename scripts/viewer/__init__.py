"""``swebox view``: a local, read-only web viewer of training trajectories and eval outputs (app.py)."""
