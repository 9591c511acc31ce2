"""The BuildSpec seam: one record per configuration says what builds and views are made of;
the view loader, the append in place and the partial views receive it (with the store,
embedder and extractor they use), never the Memory that made it."""

from __future__ import annotations

import inspect

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.build.spec import BuildSpec, make_spec
from memcompile_local.build.stages import embedding_model_id, layout_id
from memcompile_local.config import PipelineConfig
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.views.append import InPlaceAppend
from memcompile_local.views.load import ViewLoader
from memcompile_local.views.pending import PartialViews


def test_the_spec_and_the_extractor_are_made_once_per_config(tmp_path):
    cfg = apply_preset("model-free", PipelineConfig())
    emb = HashEmbedder(dim=16)
    with Memory(tmp_path / "m.sqlite", cfg, embedder=emb) as mem:
        spec = mem.spec
        assert mem.spec is spec and mem.extractor() is mem.extractor()
        assert spec == make_spec(cfg, mem.extractor().descriptor_set, emb)
        assert spec.layout_id == layout_id(spec.descriptor_set, cfg.placement)
        assert spec.embedder_id == embedding_model_id(emb) and spec.fusion and spec.context_vectors
        mem.config = cfg.replace(fusion={"dense_context": "composed"})
        assert mem.spec is not spec and mem.spec.dense.context == "composed"
        assert mem.spec.view_key != spec.view_key  # views of the two configs never mix


def test_nothing_below_the_facade_receives_a_memory():
    for fn in (ViewLoader.load, ViewLoader.plan_append, ViewLoader.adopt, InPlaceAppend.__init__,
               PartialViews.__init__):
        params = inspect.signature(fn).parameters
        assert "mem" not in params and "memory" not in params, fn
        assert any(p.annotation in (BuildSpec, "BuildSpec") for p in params.values()), fn
