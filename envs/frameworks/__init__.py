"""The faces other frameworks see: Gymnasium (gym_env.py), skyrl-gym (skyrl_env.py, skyrl_prepare.py)
and Harbor's environment provider (harbor_env.py). Each wraps the episode layer, nothing more.
"""
