"""A model's tokenizer, read from the model's own files without torch, shared by the router (its
chat template and /v1/models id) and the engines (their loader): `tokenizer` (EngineTokenizer:
text <-> ids, the chat template), `gguf_tokenizer` (tokenizer.json from a GGUF's vocabulary),
`gguf_metadata` (a GGUF's metadata fields; the engine's weight loader reads them too) and
`default_model` (where the default SmolLM2 GGUF is installed). It imports nothing of the engine
or the router."""
