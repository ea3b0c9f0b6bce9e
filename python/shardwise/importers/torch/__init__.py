"""``sw.from_torch``: a PyTorch module traced by torch.fx into a shardwise graph (convert), its call
records (call), op converters (ops) and sequence-model converters (seq)."""
