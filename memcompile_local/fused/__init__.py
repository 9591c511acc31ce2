"""The model-free fused retriever: packet selection by score fusion, no model call.

- ``documents``: what the index is computed from (lexical and context documents, names, periods)
- ``index``: the ``FusionIndex`` of one namespace (BM25, dense matrices, dates, expansion terms)
- ``channels``: the channel table (name -> score function) and the weighted sum
- ``retriever``: ``FusedRetriever``, which makes the query vector, scores once and selects
"""
