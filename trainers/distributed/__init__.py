"""Rollouts over a Ray cluster: connecting (ray_connect.py), the pool (ray_pool.py), its actors."""
