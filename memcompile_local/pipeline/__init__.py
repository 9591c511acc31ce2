"""Algorithm 1 of the MemCompile paper at query time.

- ``compile``: the wiring, one typed step after another (intent, candidates, normalization,
  dense proposals, anchors, frontier, reader view)
- ``normalize``: the normalization boundary (descriptor candidates to SourcePackets)
- ``presets``: the paper's ablation paths and our own defaults, as configurations
"""
