"""What a run reads and writes: its config, checkpoints, metrics, trajectories and plots."""
