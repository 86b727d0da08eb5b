"""swebox.trainers: the GRPO trainer on Ray, fine-tuning and evaluation (see docs/training.md).

Folders by role (docs/architecture.md): rl/ (the GRPO loop and maths), policy/ (model, generation), distributed/
(Ray), finetune/ (SFT), evaluation/ (``swebox eval``'s library half) and run/ (config, checkpoints, metrics,
trajectories, plots). The modules' names before that move keep working: see swebox.envs.old_names.
"""

from swebox.envs import old_names

old_names.install()
