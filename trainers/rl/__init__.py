"""The GRPO core: the loop (trainer.py), the maths (grpo.py), the update (learner.py), rollouts (rollout.py)."""
