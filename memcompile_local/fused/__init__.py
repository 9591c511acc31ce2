"""The model-free fused retriever: packet selection by score fusion, no model call.

- ``retriever``: packet documents, the fused index, its channels and the selection
"""
