"""The Llama-family model: config, loaders (GGUF, HF directory), weight cache and the runner."""
