"""The write side: what ``Memory.build`` and an append store for a namespace.

- ``stages``: extraction of descriptors, Cell placement, embedding of packet and context
  documents, and the keys (layout ids, embedding model ids, text addresses) they are stored under
- ``progress``: the progress bar a long build shows (a no-op without tqdm)
"""
