"""One namespace at query time: the structures a search reads, kept current with the store.

- ``load``: reading a built namespace into a ``MemoryView``, reusing the previous load's work
- ``append``: an append under the rule extractor, written and applied to the held view in place
- ``pending``: the service's partial view (built turns plus turns the background build has not
  extracted yet)
"""
