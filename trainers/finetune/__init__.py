"""Supervised and rejection-sampling fine-tuning (sft.py) on trajectories (sft_data.py)."""
