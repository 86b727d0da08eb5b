"""The policy: the model and tokenizer (models.py), generation backends (generation.py: the
choice; generation_api.py: what a backend returns; batching.py; backends.py), shared
generation servers (gen_server.py) and seeded sampling (sampling.py).
"""
