"""The policy: the model and tokenizer (models.py), generation backends (generation.py), shared
generation servers (gen_server.py) and seeded sampling (sampling.py).
"""
