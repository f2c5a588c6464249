"""The packaged pretrained Transformer (MiniLM): loading it offline, and its analyses."""
