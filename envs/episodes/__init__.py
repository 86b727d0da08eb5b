"""The episode layer: one SWE episode (episode.py), a task's episodes on this node (task_episodes.py),
their start state and diff (episode_state.py), GRPO groups, the grade memo, and a task's layers.
"""
